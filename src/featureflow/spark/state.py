"""Window state of the stream job, versioned by micro-batch id next to Spark's checkpoint.

Why not Spark's stateful operators: the per-key Python APIs
(``applyInPandasWithState``, ``transformWithStateInPandas``) pay a Python call
and a state round trip per key per batch — measured 25-50x slower here than
handing a whole partition's Arrow batches to the kernels. So the job stays
stateless in Spark's eyes (``repartition(key).mapInArrow``) and keeps its own
state: per shuffle partition, the raw events each key may still need (those
within the largest window of the watermark) and, for a tiled view, the
per-entity tile partials of older events (:mod:`featureflow.tiles`), as Arrow
IPC files per micro-batch::

    <root>/partitions=<P>/part-<p>/batch-<id>.arrow        events after batch <id>
    <root>/partitions=<P>/part-<p>/tiles/batch-<id>.arrow  tiles after batch <id>
    <root>/watermarks/batch-<id>.json     per-Kafka-partition watermarks after batch <id>
    <root>/clock/batch-<id>.json          the driver's clock of batch <id>

Exactly-once comes from the versioning: micro-batch ``b`` reads the newest
version *before* ``b`` and writes version ``b``. Spark re-runs ``b`` after a
crash (its offsets are committed only after the batch succeeded), and the
re-run reads the same input state, computes the same output and overwrites
version ``b``. The clock of a batch is recorded before the batch does
anything, so a re-run takes the same decisions that depend on it (idle
partitions, events in the future).

Retention: Spark starts batch ``b`` only after committing every batch before
it, so when ``b`` saves a version, the newest version before ``b`` (what a
re-run of ``b`` reads) is the oldest one anybody can still read; older ones
are deleted then. A partition that skipped batches keeps its newest version
however old. Any filesystem pyarrow reaches works (local, HDFS, S3), so the
same job runs on a cluster when the checkpoint is on shared storage.

State stays where it is used: each Python worker holds the events (and tiles)
it last loaded or saved per partition directory, with the version, size and
modification time of their file (:data:`_RESIDENT`). Loading version ``v`` is
then one directory listing when the worker holds ``v`` and the listing shows
the same file; otherwise (a replay, which reads an older version; a task that
ran on another worker; a rewritten or damaged file) the version is read from
disk. What a worker holds is a version's exact content, so outputs do not
depend on where a task runs. Workers hold at most
``FEATUREFLOW_RESIDENT_STATE_BYTES`` (default 4 GiB) of state, the partitions
used least recently leaving first.

Files are written to a temporary name and moved into place, so a reader never
sees a half-written version. The temporary name is the writer's own
(``.batch-<id>.arrow.<pid>-<random>.tmp``, created exclusively), so two writers
of one version (a second job on the checkpoint, which the checkpoint lock
refuses; a zombie task on a lost executor) never write into one file: the
last move wins, whole. A temporary file left by a killed writer is deleted
by a later save in its directory once it is an hour old. Files are created
with :mod:`featureflow.spark.file_modes`' mode (owner-only by default).
A version that is nevertheless truncated or unreadable (storage that lost
data) stops the job with :class:`~featureflow.errors.StateError` naming the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from featureflow.errors import JobError, StateError
from featureflow.spark import file_modes
from featureflow.spark.watermarks import PartitionWatermarks

_VERSION = re.compile(r"batch-(\d+)\.(arrow|json)$")
_TEMPORARY = re.compile(r"^\..*\.\d+-[0-9a-f]+\.tmp$")
_LEFTOVER_AGE_NS = 3600 * 10**9
"""A temporary file this old is a killed writer's leftover (no write takes an hour)."""


def temporary_path(final: str) -> str:
    """A name of this writer's own next to ``final``: hidden (dataset readers skip names
    starting with '.'), with this process's pid and random bits."""
    directory, _, name = final.rpartition("/")
    return f"{directory}/.{name}.{os.getpid()}-{secrets.token_hex(6)}.tmp"


def create_temporary(filesystem: pafs.FileSystem, final: str) -> str:
    """:func:`temporary_path` created empty with the job's file mode (local files)."""
    temporary = temporary_path(final)
    file_modes.create_file(filesystem, temporary)
    return temporary


class _Held(NamedTuple):
    """A version this worker holds: which file it came from, and its content."""

    version: int
    size: int
    mtime_ns: int | None
    table: pa.Table


_RESIDENT: OrderedDict[tuple[str, str], _Held] = OrderedDict()
"""Per (state root, version directory): the version this Python worker holds, least
recently used first. Module-level, so it outlives one task in a reused worker."""


def _resident_limit_bytes() -> int:
    return int(os.environ.get("FEATUREFLOW_RESIDENT_STATE_BYTES", 4 << 30))


def drop_resident() -> None:
    """Forget every version this worker holds (the next loads read from disk)."""
    _RESIDENT.clear()


def _hold(key: tuple[str, str], held: _Held) -> None:
    _RESIDENT[key] = held
    _RESIDENT.move_to_end(key)
    limit = _resident_limit_bytes()
    while _RESIDENT and sum(h.table.nbytes for h in _RESIDENT.values()) > limit:
        _RESIDENT.popitem(last=False)


def filesystem_of(root: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and path of a local path or a URI (file://, hdfs://, s3://)."""
    if "://" in root:
        filesystem, path = pafs.FileSystem.from_uri(root)
        return filesystem, path
    import os

    return pafs.LocalFileSystem(), os.path.abspath(root)


def _drop_leftovers(filesystem: pafs.FileSystem, infos: list[pafs.FileInfo]) -> None:
    """Delete the temporary files of ``infos`` (one listing) older than an hour."""
    now_ns = time.time_ns()
    for info in infos:
        if (
            _TEMPORARY.match(info.base_name)
            and info.mtime_ns is not None
            and now_ns - info.mtime_ns > _LEFTOVER_AGE_NS
        ):
            with contextlib.suppress(OSError):  # another writer's cleanup was first
                filesystem.delete_file(info.path)


@dataclass(frozen=True)
class StateStore:
    """The state of one stream view: ``partitions`` shuffle partitions under ``root``."""

    root: str
    partitions: int

    def _paths(self) -> tuple[pafs.FileSystem, str]:
        return filesystem_of(self.root)

    def check_layout(self) -> None:
        """Refuse to start when the state was written with another number of partitions.

        Raises:
            JobError: naming the partition count the state needs.
        """
        filesystem, base = self._paths()
        file_modes.make_dirs(filesystem, base)
        found = filesystem.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        counts = {
            int(info.base_name.split("=", 1)[1])
            for info in found
            if info.base_name.startswith("partitions=")
        }
        others = counts - {self.partitions}
        if others:
            msg = (
                f"the state under {self.root} was written with {sorted(others)} partitions; "
                f"run the job with --partitions {min(others)} or start from a new checkpoint"
            )
            raise JobError(msg)

    def _version_files(self, directory: str, suffix: str) -> list[tuple[int, pafs.FileInfo]]:
        """The versions in ``directory`` (one listing), oldest first, with their file's info."""
        filesystem, _ = self._paths()
        infos = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        versions = []
        for info in infos:
            match = _VERSION.search(info.base_name)
            if match and match.group(2) == suffix:
                versions.append((int(match.group(1)), info))
        return sorted(versions, key=lambda version: version[0])

    def _versions(self, directory: str, suffix: str) -> list[tuple[int, str]]:
        return [(version, info.path) for version, info in self._version_files(directory, suffix)]

    def _partition_dir(self, partition: int) -> str:
        _, base = self._paths()
        return f"{base}/partitions={self.partitions}/part-{partition:05d}"

    def load_events(self, partition: int, before_batch: int) -> pa.Table | None:
        """The partition's events as left by the newest batch before ``before_batch``."""
        return self._load_table(self._partition_dir(partition), before_batch)

    def save_events(self, partition: int, batch: int, events: pa.Table) -> None:
        """Write the partition's events after ``batch`` (atomically); drop the versions
        nothing reads any more (see the module's retention rule)."""
        self._save_table(self._partition_dir(partition), batch, events)

    def load_tiles(self, partition: int, before_batch: int) -> pa.Table | None:
        """The partition's tile partials (:mod:`featureflow.tiles`) as of ``before_batch``."""
        return self._load_table(f"{self._partition_dir(partition)}/tiles", before_batch)

    def save_tiles(self, partition: int, batch: int, tiles: pa.Table) -> None:
        """Write the partition's tile partials after ``batch``, like :meth:`save_events`.

        A batch writes its tiles before its events, and a re-run of the batch
        rewrites both, so the newest versions before a batch always belong together.
        """
        self._save_table(f"{self._partition_dir(partition)}/tiles", batch, tiles)

    def _newest_before(self, directory: str, suffix: str, before_batch: int) -> str | None:
        versions = self._versions(directory, suffix)
        earlier = [path for batch, path in versions if batch < before_batch]
        return earlier[-1] if earlier else None

    def _load_table(self, directory: str, before_batch: int) -> pa.Table | None:
        """The newest version before ``before_batch``: the one this worker holds when
        the listing shows its file unchanged, else read from disk (and then held)."""
        earlier = [
            (version, info)
            for version, info in self._version_files(directory, "arrow")
            if version < before_batch
        ]
        if not earlier:
            return None
        version, info = earlier[-1]
        key = (self.root, directory)
        held = _RESIDENT.get(key)
        if held is not None and (held.version, held.size, held.mtime_ns) == (
            version, info.size, info.mtime_ns,
        ):  # fmt: skip
            _RESIDENT.move_to_end(key)
            return held.table
        filesystem, _ = self._paths()
        try:
            with filesystem.open_input_file(info.path) as source:
                table = ipc.open_file(source).read_all()
        except (OSError, pa.ArrowInvalid) as error:
            raise StateError.unreadable(info.path, error) from error
        _hold(key, _Held(version, info.size, info.mtime_ns, table))
        return table

    def _save_table(self, directory: str, batch: int, table: pa.Table) -> None:
        filesystem, _ = self._paths()
        file_modes.make_dirs(filesystem, directory)
        final = f"{directory}/batch-{batch}.arrow"
        temporary = create_temporary(filesystem, final)
        with filesystem.open_output_stream(temporary) as sink:
            writer = ipc.new_file(sink, table.schema)
            writer.write_table(table)
            writer.close()
        filesystem.move(temporary, final)
        written = filesystem.get_file_info(final)
        _hold((self.root, directory), _Held(batch, written.size, written.mtime_ns, table))
        self._drop_unreadable_versions(directory, "arrow", batch)

    def _drop_unreadable_versions(self, directory: str, suffix: str, batch: int) -> None:
        """Delete the versions older than the newest one before ``batch``: every batch
        before ``batch`` is committed, so nothing reads them again."""
        filesystem, _ = self._paths()
        infos = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        versions = [
            (int(match.group(1)), info.path)
            for info in infos
            if (match := _VERSION.search(info.base_name)) and match.group(2) == suffix
        ]
        _drop_leftovers(filesystem, infos)
        keep_from = max((version for version, _ in versions if version < batch), default=None)
        if keep_from is None:
            return
        for version, path in versions:
            if version < keep_from:
                filesystem.delete_file(path)

    def _load_json(self, directory: str, before_batch: int) -> dict[str, Any] | None:
        path = self._newest_before(directory, "json", before_batch)
        if path is None:
            return None
        filesystem, _ = self._paths()
        try:
            with filesystem.open_input_stream(path) as source:
                data = json.loads(source.read())
        except (OSError, ValueError) as error:
            raise StateError.unreadable(path, error) from error
        if not isinstance(data, dict):
            raise StateError.unreadable(path, "not a JSON object")
        return data

    def _save_json(self, directory: str, batch: int, data: dict[str, Any]) -> None:
        filesystem, _ = self._paths()
        file_modes.make_dirs(filesystem, directory)
        final = f"{directory}/batch-{batch}.json"
        temporary = create_temporary(filesystem, final)
        with filesystem.open_output_stream(temporary) as sink:
            sink.write(json.dumps(data).encode())
        filesystem.move(temporary, final)
        self._drop_unreadable_versions(directory, "json", batch)

    def load_watermarks(self, before_batch: int, delay_ns: int) -> PartitionWatermarks:
        """The per-Kafka-partition watermarks after the newest batch before ``before_batch``
        (empty on a new checkpoint)."""
        _, base = self._paths()
        data = self._load_json(f"{base}/watermarks", before_batch)
        if data is None:
            return PartitionWatermarks(delay_ns)
        try:
            return PartitionWatermarks.from_json(data)
        except (KeyError, TypeError, ValueError) as error:
            path = self._newest_before(f"{base}/watermarks", "json", before_batch)
            raise StateError.unreadable(str(path), error) from error

    def save_watermarks(self, batch: int, watermarks: PartitionWatermarks) -> None:
        """Record the watermarks after ``batch`` (what batch ``batch + 1`` judges against)."""
        _, base = self._paths()
        self._save_json(f"{base}/watermarks", batch, watermarks.to_json())

    def batch_clock_ns(self, batch: int, now_ns: int) -> int:
        """The driver's clock of ``batch`` (epoch ns): ``now_ns``, recorded, on its first
        run; what the first run recorded, on a re-run."""
        filesystem, base = self._paths()
        directory = f"{base}/clock"
        path = f"{directory}/batch-{batch}.json"
        if filesystem.get_file_info(path).type == pafs.FileType.File:
            recorded = self._load_json(directory, batch + 1)
            if recorded is not None and "clock_ns" in recorded:
                return int(recorded["clock_ns"])
        self._save_json(directory, batch, {"clock_ns": now_ns})
        return now_ns
