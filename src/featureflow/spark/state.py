"""Window state of the stream job, versioned by micro-batch id next to Spark's checkpoint.

Why not Spark's stateful operators: the per-key Python APIs
(``applyInPandasWithState``, ``transformWithStateInPandas``) pay a Python call
and a state round trip per key per batch — measured 25-50x slower here than
handing a whole partition's Arrow batches to the kernels. So the job stays
stateless in Spark's eyes (``repartition(key).mapInArrow``) and keeps its own
state: per shuffle partition, the raw events each key may still need (those
within the largest window of the watermark) and, for a tiled view, the
per-entity tile partials of older events (:mod:`featureflow.tiles`). Each is a
table with one version per micro-batch, kept as Arrow IPC files the way
Spark's RocksDB store keeps changelogs and snapshots::

    <root>/partitions=<P>/part-<p>/batch-<id>.delta.arrow  events: batch <id>'s delta
    <root>/partitions=<P>/part-<p>/batch-<id>.arrow        events after batch <id>, whole
    <root>/partitions=<P>/part-<p>/tiles/...               tiles, the same way
    <root>/watermarks/batch-<id>.json     per-Kafka-partition watermarks after batch <id>
    <root>/clock/batch-<id>.json          the driver's clock of batch <id>

A version is (batch id, step): the view's pass over batch ``b`` writes step 0;
the session closer, which passes over the state that pass left under the
watermark after the batch, writes step 1 (``batch-<id>.1.delta.arrow``).

Deltas and snapshots: a save writes the version as its *delta* from the version
the batch read (:class:`featureflow.state_delta.StateDelta`: the rows it
appended — its new events, the tiles it closed — and the rule for the rows
that left; its base version and rule in the file's schema metadata), so it
costs what the batch holds, not what the state holds. A version without an
earlier one (a new checkpoint) is written whole: a *snapshot*. Once the deltas
after the newest snapshot are :data:`SNAPSHOT_EVERY` or more, or hold
:data:`SNAPSHOT_SHARE` of its bytes, the saving worker writes a snapshot of the
version in a background thread, from the table it holds (Arrow tables are
immutable), so the batch does not wait for it; a snapshot lost with its
worker only makes a rebuild replay more deltas. Loading version ``v`` rebuilds
it from the newest snapshot at or before ``v`` (or from a version the worker
holds, when nearer) and the deltas after it, in order, with the very functions
the batch computed ``v`` with: a rebuilt version is the table the batch held,
the same rows in the same order with the same schema. A whole file of the
former layout (every version whole, ``batch-<id>.arrow``) is a snapshot, so
such a checkpoint continues with deltas.

Exactly-once comes from the versioning: micro-batch ``b`` reads the newest
version *before* ``b`` and writes version ``b``. Spark re-runs ``b`` after a
crash (its offsets are committed only after the batch succeeded), and the
re-run reads the same input state, computes the same output and overwrites
version ``b`` — its delta, with the same content; it first deletes what the
earlier run left at or after that version (a snapshot of it, the closer's
step), which followed from the earlier run's input. The clock of a batch is
recorded before the batch does anything, so a re-run takes the same
decisions that depend on it (idle partitions, events in the future).

Retention: Spark starts batch ``b`` only after committing every batch before
it, so when ``b`` saves a version, the newest version before ``b`` (what a
re-run of ``b`` reads) is the oldest one anybody can still read. It and the
later ones need the newest snapshot at or before it and the deltas after that
snapshot; older files are deleted then. A partition that skipped batches
keeps its newest version however old. Any filesystem pyarrow reaches works
(local, HDFS, S3), so the same job runs on a cluster when the checkpoint is
on shared storage.

State stays where it is used: each process that runs partitions (on an
executor its state host, :mod:`~featureflow.spark.state_host`; the driver for
small batches) holds the events (and tiles) it last loaded or saved per
partition directory, with the version and the
name, size and modification time of the file that defines it (its delta, or
its snapshot: :data:`_RESIDENT`). Loading version ``v`` is then one directory
listing when the worker holds ``v`` and the listing shows the same file;
otherwise (a replay, which reads an older version; a task that ran on
another worker; a rewritten or damaged file) the version is rebuilt from
disk. What a worker holds is a version's exact content, so outputs do not
depend on where a task runs. After each task a worker forgets the versions
another worker has since replaced (:func:`drop_superseded`), so two workers
do not both keep every partition. Workers hold at most
``FEATUREFLOW_RESIDENT_STATE_BYTES`` (default 4 GiB) of state, the partitions
used least recently leaving first.

Files are written to a temporary name and moved into place, so a reader never
sees a half-written version. The temporary name is the writer's own
(``.batch-<id>.arrow.<pid>-<random>.tmp``, created exclusively), so two writers
of one version (a second job on the checkpoint, which the checkpoint lock
refuses; a zombie task on a lost executor; a worker's snapshot thread) never
write into one file: the last move wins, whole. A temporary file left by a
killed writer is deleted by a later save in its directory once it is an hour
old. Files are created with :mod:`featureflow.spark.file_modes`' mode
(owner-only by default). A version that is nevertheless truncated or
unreadable (storage that lost data), or a delta whose base version is
missing, stops the job with :class:`~featureflow.errors.StateError` naming the file.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from featureflow.errors import JobError, StateError
from featureflow.spark import file_modes
from featureflow.spark.watermarks import PartitionWatermarks
from featureflow.state_delta import StateDelta

if TYPE_CHECKING:
    from featureflow.features import FrameStatesByColumn
    from featureflow.session_state import SessionStates

    Carried = FrameStatesByColumn | SessionStates
    """What a worker holds beside a version: a rolling view's frame states or a session
    view's kept sessions."""

log = logging.getLogger(__name__)

_VERSION = re.compile(r"batch-(\d+)\.(arrow|json)$")
_STATE_FILE = re.compile(r"^batch-(\d+)(?:\.(\d+))?(\.delta)?\.arrow$")
"""A state table's file: ``batch-<b>[.<step>][.delta].arrow`` (snapshot, or delta)."""
_DELTA_KEY = b"featureflow.delta"
_KEEP_FROM_KEY = b"featureflow.delta.keep_from"
SNAPSHOT_EVERY = 10
"""A snapshot is written once this many deltas follow the newest one (Spark's
``minDeltasForSnapshot`` default) ..."""
SNAPSHOT_SHARE = 0.5
"""... or once the deltas after it hold this share of its bytes."""
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


Version = tuple[int, int]
"""A state table's version: (micro-batch id, step). Step 0 is the batch's view pass;
the session closer's pass over the state that pass left is step 1."""


class _Held(NamedTuple):
    """A version this worker holds: the file that defines it (its delta, or its snapshot
    when it has no delta: name, size, modification time), its content, and the frame
    states the batch that wrote it computed with it (:meth:`StateStore.take_frames`)."""

    version: Version
    file: tuple[str, int, int | None]
    table: pa.Table
    frames: Carried | None = None

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes) + carried_nbytes(self.frames)


def carried_nbytes(frames: Carried | None) -> int:
    """Bytes of what a worker holds beside a state version (its frame states or kept
    sessions, :data:`Carried`): raw array bytes, 0 for none."""
    if isinstance(frames, Mapping):
        return sum(int(f.nbytes) for f in frames.values())
    return 0 if frames is None else int(frames.nbytes)


_RESIDENT: OrderedDict[tuple[str, str], _Held] = OrderedDict()
"""Per (state root, version directory): the version this Python worker holds, least
recently used first. Module-level, so it outlives one task in a reused worker."""


def _resident_limit_bytes() -> int:
    return int(os.environ.get("FEATUREFLOW_RESIDENT_STATE_BYTES", 4 << 30))


_RESIDENT_LOCK = threading.RLock()
"""Guards :data:`_RESIDENT` and :data:`_RESIDENT_BYTES`: the driver's pass runs
partitions on threads of one process."""
_RESIDENT_BYTES: dict[tuple[str, str], int] = {}
"""Per key of :data:`_RESIDENT`: its held bytes (``_Held.nbytes``, taken once: Arrow
walks every chunk to tell a table's size)."""


def drop_resident() -> None:
    """Forget every version this worker holds (the next loads read from disk)."""
    with _RESIDENT_LOCK:
        _RESIDENT.clear()
        _RESIDENT_BYTES.clear()


def drop_superseded(current_batch: int) -> int:
    """Forget the versions this worker holds that a later version on disk replaced.

    In a reused worker a partition's tasks land on whichever worker is idle, so
    a worker that ran partition ``p`` in batch ``b`` while another ran it in
    ``b + 1`` holds a version nobody will load from it again (a later load finds
    the newer file and rebuilds). Each held version older than
    ``current_batch`` is checked with one listing of its directory; those with
    a newer version there, or whose file is gone, are dropped, so a worker's
    memory follows the partitions it serves, not every partition it ever
    served. Returns how many it dropped.
    """
    dropped = 0
    with _RESIDENT_LOCK:
        held_now = list(_RESIDENT.items())
    for key, held in held_now:
        if held.version[0] >= current_batch:
            continue
        root, directory = key
        filesystem, _ = filesystem_of(root)
        try:
            infos = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        except OSError:
            continue  # storage unreachable now: the next load decides
        files = _state_files(infos)
        newest = max(files, default=None)
        current = held.version in files and files[held.version].holds(held.file)
        if not current or (newest is not None and newest > held.version):
            with _RESIDENT_LOCK:
                if _RESIDENT.get(key) is held:  # not replaced meanwhile
                    del _RESIDENT[key]
                    _RESIDENT_BYTES.pop(key, None)
                    dropped += 1
    return dropped


def _hold(key: tuple[str, str], held: _Held) -> None:
    size = held.nbytes
    with _RESIDENT_LOCK:
        _RESIDENT[key] = held
        _RESIDENT_BYTES[key] = size
        _RESIDENT.move_to_end(key)
        limit = _resident_limit_bytes()
        while _RESIDENT and sum(_RESIDENT_BYTES.get(k, 0) for k in _RESIDENT) > limit:
            oldest, _ = _RESIDENT.popitem(last=False)
            _RESIDENT_BYTES.pop(oldest, None)


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


def _file_name(version: Version, delta: bool) -> str:
    step = f".{version[1]}" if version[1] else ""
    return f"batch-{version[0]}{step}{'.delta' if delta else ''}.arrow"


class _Files(NamedTuple):
    """One version's files in a listing."""

    snapshot: pafs.FileInfo | None
    delta: pafs.FileInfo | None

    def defining(self) -> pafs.FileInfo:
        """The file a held copy of the version is checked against: its delta, if any."""
        info = self.delta or self.snapshot
        assert info is not None
        return info

    def holds(self, file: tuple[str, int, int | None]) -> bool:
        """Whether one of these files is ``file`` (name, size, modification time)."""
        return any(
            info is not None and (info.base_name, info.size, info.mtime_ns) == file
            for info in self
        )


def _identity(info: pafs.FileInfo) -> tuple[str, int, int | None]:
    return (info.base_name, info.size, info.mtime_ns)


def _state_files(infos: list[pafs.FileInfo]) -> dict[Version, _Files]:
    """The versions of a directory listing, with their snapshot and delta files."""
    found: dict[Version, _Files] = {}
    for info in infos:
        match = _STATE_FILE.match(info.base_name)
        if match is None:
            continue
        version = (int(match.group(1)), int(match.group(2) or 0))
        files = found.get(version, _Files(None, None))
        found[version] = (
            files._replace(delta=info) if match.group(3) else files._replace(snapshot=info)
        )
    return found


def _write_table(filesystem: pafs.FileSystem, final: str, table: pa.Table) -> pafs.FileInfo:
    """``table`` as the Arrow IPC file ``final``: written to this writer's own temporary
    name, then moved into place. Returns the file's info."""
    temporary = create_temporary(filesystem, final)
    with filesystem.open_output_stream(temporary) as sink:
        writer = ipc.new_file(sink, table.schema)
        writer.write_table(table)
        writer.close()
    filesystem.move(temporary, final)
    info: pafs.FileInfo = filesystem.get_file_info(final)
    return info


def _delta_table(delta: StateDelta, base: Version) -> pa.Table:
    """The file content of ``delta``: its appended rows, its rule and ``base`` (the
    version it follows) in the schema's metadata."""
    metadata = dict(delta.appended.schema.metadata or {})
    rule = {"base": list(base), "order": delta.order, "cut": delta.cut,
            "cut_column": delta.cut_column, "key": delta.key, "closed": delta.closed}  # fmt: skip
    metadata[_DELTA_KEY] = json.dumps(rule).encode()
    if delta.keep_from is not None:
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, delta.keep_from.schema) as writer:
            writer.write_table(delta.keep_from)
        metadata[_KEEP_FROM_KEY] = base64.b64encode(sink.getvalue().to_pybytes())
    return delta.appended.replace_schema_metadata(metadata)


def _delta_of(table: pa.Table) -> tuple[StateDelta, Version]:
    """:func:`_delta_table` read back: (the delta, its base)."""
    metadata = dict(table.schema.metadata or {})
    rule = json.loads(metadata.pop(_DELTA_KEY))
    keep_from = None
    if _KEEP_FROM_KEY in metadata:
        keep_from = ipc.open_stream(base64.b64decode(metadata.pop(_KEEP_FROM_KEY))).read_all()
    appended = table.replace_schema_metadata(metadata or None)
    delta = StateDelta(
        appended, rule["order"], cut=rule["cut"], cut_column=rule["cut_column"],
        key=rule["key"], keep_from=keep_from, closed=rule.get("closed"),
    )  # fmt: skip
    base = rule["base"]
    return delta, (int(base[0]), int(base[1]))


_SNAPSHOTS: dict[tuple[str, str], Future[None]] = {}
"""Per (state root, directory): this worker's snapshot being written in the background."""
_SNAPSHOT_WRITER: list[tuple[int, ThreadPoolExecutor]] = []
"""The thread writing snapshots, with the pid that started it (a forked worker starts its own)."""


def _snapshot_writer() -> ThreadPoolExecutor:
    if not _SNAPSHOT_WRITER or _SNAPSHOT_WRITER[0][0] != os.getpid():
        _SNAPSHOT_WRITER[:] = [
            (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="featureflow-snapshot"))
        ]
        _SNAPSHOTS.clear()
    return _SNAPSHOT_WRITER[0][1]


def _write_snapshot(filesystem: pafs.FileSystem, final: str, table: pa.Table) -> None:
    """The background snapshot: a missing one only makes a rebuild replay more deltas."""
    try:
        _write_table(filesystem, final, table)
    except (OSError, pa.ArrowException) as error:
        log.warning("state snapshot %s not written: %s", final, error)


def _start_snapshot(
    key: tuple[str, str], filesystem: pafs.FileSystem, final: str, table: pa.Table
) -> None:
    """Write the snapshot ``final`` of ``table`` (immutable) in the background, unless one
    of the directory ``key`` is still being written."""
    running = _SNAPSHOTS.get(key)
    if running is not None and not running.done():
        return
    _SNAPSHOTS[key] = _snapshot_writer().submit(_write_snapshot, filesystem, final, table)


def wait_for_snapshots() -> None:
    """Wait until this worker's background snapshots are written (tests, benchmarks)."""
    for future in list(_SNAPSHOTS.values()):
        future.result()


PARTITIONING_FILE = "partitioning"
"""The file under a state root that names how its entities were placed in partitions."""
ENTITY_HASH = "entity-hash"
"""The scheme of the shuffled layout: the shuffle's hash of the entity."""
KAFKA_SCHEME_PREFIX = "kafka-"
_SLICES_SUFFIX = "-slices"


def keyed_scheme(partitioner: str, slices: int) -> str:
    """The scheme of a topic keyed by its entity (:class:`~featureflow.spark.keyed_pass.
    KeyedTopic`): ``kafka-<partitioner>``, with ``/<slices>-slices`` when each Kafka
    partition's entities are cut into several state slices."""
    sliced = f"/{slices}{_SLICES_SUFFIX}" if slices > 1 else ""
    return f"{KAFKA_SCHEME_PREFIX}{partitioner}{sliced}"


def keyed_scheme_parts(scheme: str) -> tuple[str, int] | None:
    """The partitioner and slices a :func:`keyed_scheme` names; None for another scheme."""
    if not scheme.startswith(KAFKA_SCHEME_PREFIX):
        return None
    partitioner, _, sliced = scheme.removeprefix(KAFKA_SCHEME_PREFIX).partition("/")
    return partitioner, int(sliced.removesuffix(_SLICES_SUFFIX)) if sliced else 1


def recorded_partitioning(root: str) -> str | None:
    """The scheme the state under ``root`` places entities by (see
    :meth:`StateStore.check_partitioning`); None: no state there yet."""
    filesystem, base = filesystem_of(root)
    path = f"{base}/{PARTITIONING_FILE}"
    if filesystem.get_file_info(path).type == pafs.FileType.NotFound:
        return ENTITY_HASH if written_partitions(root) else None
    with filesystem.open_input_stream(path) as stream:
        return str(stream.read().decode())


def written_partitions(root: str) -> set[int]:
    """The partition counts the state under ``root`` was written with (empty: none yet)."""
    filesystem, base = filesystem_of(root)
    found = filesystem.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    return {
        int(info.base_name.split("=", 1)[1])
        for info in found
        if info.base_name.startswith("partitions=")
    }


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
        others = written_partitions(self.root) - {self.partitions}
        if others:
            msg = (
                f"the state under {self.root} was written with {sorted(others)} partitions; "
                f"run the job with --partitions {min(others)} or start from a new checkpoint"
            )
            raise JobError(msg)

    def check_partitioning(self, scheme: str) -> None:
        """Refuse state whose entities were placed by another scheme (``entity-hash``: the
        shuffle's hash of the entity; ``kafka-<partitioner>[/<n>-slices]``: a topic keyed
        by its entity, the Kafka partition and the entity's slice of it,
        :class:`~featureflow.spark.keyed_pass.KeyedTopic`); record the scheme with new
        state. State written before schemes were recorded is ``entity-hash``.

        Raises:
            JobError: naming the scheme the state needs.
        """
        filesystem, base = self._paths()
        recorded = recorded_partitioning(self.root)
        if recorded is None:  # new state: record it, atomically
            path = f"{base}/{PARTITIONING_FILE}"
            file_modes.make_dirs(filesystem, base)
            temporary = create_temporary(filesystem, path)
            with filesystem.open_output_stream(temporary) as out:
                out.write(scheme.encode())
            filesystem.move(temporary, path)
            return
        if recorded != scheme:
            keyed = keyed_scheme_parts(recorded)
            how = "without --keyed-topic"
            if keyed is not None:
                partitioner, slices = keyed
                how = f"with --keyed-topic {partitioner}" + (
                    f" --keyed-slices {slices}" if slices > 1 else ""
                )
            msg = (
                f"the state under {self.root} places entities by {recorded}, not {scheme}: "
                f"run the job {how}, or start from a new checkpoint"
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

    def _tiles_dir(self, partition: int) -> str:
        return f"{self._partition_dir(partition)}/tiles"

    def load_events(self, partition: int, before_batch: int) -> pa.Table | None:
        """The partition's events as left by the newest batch before ``before_batch``."""
        return self._load_table(self._partition_dir(partition), before_batch)

    def take_frames(self, partition: int, events: pa.Table) -> Carried | None:
        """The frame states held with ``events`` (the very table :meth:`load_events`
        returned, held since the batch that saved it with them), else None: a version
        rebuilt from files, or replaced since, comes without them.

        Taking them leaves ``events`` held without frames: the caller owns them and may
        update them in place for its own batch's version (:meth:`save_events` holds
        that one with them). A batch that fails in between leaves no half-updated
        frames behind; its retry computes them from the rows.
        """
        key = (self.root, self._partition_dir(partition))
        with _RESIDENT_LOCK:
            held = _RESIDENT.get(key)
            if held is None or held.table is not events or held.frames is None:
                return None
            _RESIDENT[key] = held._replace(frames=None)
            _RESIDENT_BYTES[key] = int(held.table.nbytes)
        return held.frames

    def release(self, partition: int, events: pa.Table, tiles: bool = False) -> None:
        """Stop holding ``events``, the table a load of ``partition``'s events (or, with
        ``tiles``, its tiles) returned, once its task has computed the next version.

        The next version shares the runs the batch left alone, so what this frees is the
        runs it merged away: without it they stayed until the save replaced the held
        version, through the online and offline writes, where a worker's two tasks peak.
        A task that fails after this rebuilds the version from its files (its frame
        states were taken already: :meth:`take_frames`).
        """
        directory = self._tiles_dir(partition) if tiles else self._partition_dir(partition)
        key = (self.root, directory)
        with _RESIDENT_LOCK:
            held = _RESIDENT.get(key)
            if held is not None and held.table is events:
                del _RESIDENT[key]
                _RESIDENT_BYTES.pop(key, None)

    def save_events(
        self, partition: int, batch: int, events: pa.Table, delta: StateDelta | None = None,
        *, read_before: int | None = None, frames: Carried | None = None,
    ) -> None:  # fmt: skip
        """Write the partition's events after ``batch`` (atomically): as ``delta`` from
        the version the batch read (the newest before ``read_before``, default
        ``batch``; ``delta.apply`` of it is ``events``), or whole without a delta. Drop
        the files nothing reads any more (see the module's retention rule). ``frames``:
        the frame states computed with ``events``, held beside them in this worker only
        (never written: a worker without them computes the frames from the events)."""
        self._save_table(
            self._partition_dir(partition), batch, events, delta, read_before, frames
        )

    def load_tiles(self, partition: int, before_batch: int) -> pa.Table | None:
        """The partition's tile partials (:mod:`featureflow.tiles`) as of ``before_batch``."""
        return self._load_table(self._tiles_dir(partition), before_batch)

    def save_tiles(
        self, partition: int, batch: int, tiles: pa.Table, delta: StateDelta | None = None,
        *, read_before: int | None = None,
    ) -> None:  # fmt: skip
        """Write the partition's tile partials after ``batch``, like :meth:`save_events`.

        A batch writes its tiles before its events, and a re-run of the batch
        rewrites both, so the newest versions before a batch always belong together.
        """
        self._save_table(
            self._tiles_dir(partition), batch, tiles, delta, read_before
        )

    def _newest_before(self, directory: str, suffix: str, before_batch: int) -> str | None:
        versions = self._versions(directory, suffix)
        earlier = [path for batch, path in versions if batch < before_batch]
        return earlier[-1] if earlier else None

    def _listing(self, directory: str) -> tuple[list[pafs.FileInfo], dict[Version, _Files]]:
        filesystem, _ = self._paths()
        infos = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        return infos, _state_files(infos)

    def _load_table(self, directory: str, before_batch: int) -> pa.Table | None:
        """The newest version before ``before_batch``: the one this worker holds when the
        listing shows its file unchanged, else rebuilt (and then held) from the newest
        snapshot at or before it — or a held older version, when nearer — and the deltas
        after that, in order."""
        _, files = self._listing(directory)
        versions = sorted(version for version in files if version[0] < before_batch)
        if not versions:
            return None
        target = versions[-1]
        key = (self.root, directory)
        with _RESIDENT_LOCK:
            held = _RESIDENT.get(key)
            if held is not None and held.version == target and files[target].holds(held.file):
                _RESIDENT.move_to_end(key)
                return held.table
        table = self._rebuild(directory, files, versions, held)
        _hold(key, _Held(target, _identity(files[target].defining()), table))
        return table

    def _rebuild(
        self, directory: str, files: dict[Version, _Files], versions: list[Version],
        held: _Held | None,
    ) -> pa.Table:  # fmt: skip
        """Version ``versions[-1]`` from the newest snapshot in ``versions`` (or ``held``,
        when it is a later one of them) and the deltas after it."""
        snapshots = [at for at, version in enumerate(versions) if files[version].snapshot]
        start = snapshots[-1] if snapshots else -1
        table: pa.Table | None = None
        if held is not None and held.version in files and files[held.version].holds(held.file):
            at = versions.index(held.version) if held.version in versions else -1
            if at > start:
                start, table = at, held.table
        if table is None and start >= 0:
            snapshot = files[versions[start]].snapshot
            assert snapshot is not None
            table = self._read_file(snapshot.path)
        for at in range(start + 1, len(versions)):
            info = files[versions[at]].delta
            assert info is not None  # no snapshot after start: each version has its delta
            try:
                delta, base = _delta_of(self._read_file(info.path))
            except (pa.ArrowException, KeyError, ValueError, TypeError) as error:
                raise StateError.unreadable(info.path, f"not a state delta: {error}") from error
            if start < 0 or base != versions[at - 1]:
                msg = f"it follows version {base}, which is not in {directory}"
                raise StateError.unreadable(info.path, msg)
            try:
                table = delta.apply(table)
            except (pa.ArrowException, KeyError, ValueError) as error:
                raise StateError.unreadable(info.path, error) from error
        assert table is not None
        return table

    def _read_file(self, path: str) -> pa.Table:
        filesystem, _ = self._paths()
        try:
            with filesystem.open_input_file(path) as source:
                table: pa.Table = ipc.open_file(source).read_all()
        except (OSError, pa.ArrowInvalid) as error:
            raise StateError.unreadable(path, error) from error
        return table

    def _save_table(
        self, directory: str, batch: int, table: pa.Table, delta: StateDelta | None = None,
        read_before: int | None = None, frames: Carried | None = None,
    ) -> None:  # fmt: skip
        """Write version ``table`` of ``batch``: as ``delta`` from the version the batch
        read (the newest before ``read_before``, default ``batch``), or whole (no delta,
        or no earlier version). Then drop the files nothing reads any more, and start a
        background snapshot when the deltas after the newest one are many or large."""
        filesystem, _ = self._paths()
        file_modes.make_dirs(filesystem, directory)
        _, files = self._listing(directory)
        read_before = batch if read_before is None else read_before
        base = max((v for v in files if v[0] < read_before), default=None)
        version = (batch, 0) if base is None or base[0] < batch else (batch, base[1] + 1)
        whole = delta is None or base is None
        final = f"{directory}/{_file_name(version, delta=not whole)}"
        for stale, stale_files in files.items():  # an earlier run's, from an older input
            if stale[0] == batch and stale >= version:
                for info in stale_files:
                    if info is not None and info.path != final:
                        with contextlib.suppress(FileNotFoundError):
                            filesystem.delete_file(info.path)
        if whole:
            written = _write_table(filesystem, final, table)
        else:
            assert delta is not None and base is not None
            written = _write_table(filesystem, final, _delta_table(delta, base))
        key = (self.root, directory)
        _hold(key, _Held(version, _identity(written), table, frames))
        infos, files = self._listing(directory)
        _drop_leftovers(filesystem, infos)
        self._drop_unreadable_tables(files, batch)
        if not whole and self._snapshot_due(files, version, table):
            _start_snapshot(key, filesystem, f"{directory}/{_file_name(version, False)}", table)

    @staticmethod
    def _snapshot_due(files: dict[Version, _Files], version: Version, table: pa.Table) -> bool:
        """Whether the deltas up to ``version`` after its newest snapshot are
        :data:`SNAPSHOT_EVERY` or more, or hold :data:`SNAPSHOT_SHARE` of its bytes."""
        chain = sorted(v for v in files if v <= version)
        snapshots = [v for v in chain if files[v].snapshot is not None]
        after = [files[v].delta for v in chain if not snapshots or v > snapshots[-1]]
        sizes = [info.size for info in after if info is not None]
        newest = files[snapshots[-1]].snapshot if snapshots else None
        whole_bytes = newest.size if newest is not None else table.nbytes
        return len(sizes) >= SNAPSHOT_EVERY or sum(sizes) >= SNAPSHOT_SHARE * whole_bytes

    def _drop_unreadable_tables(self, files: dict[Version, _Files], batch: int) -> None:
        """Delete what no version still readable needs: every batch before ``batch`` is
        committed, so the oldest readable version is the newest before ``batch`` (a
        re-run of ``batch`` reads it); it and the later ones need the newest snapshot at
        or before it and the deltas after that snapshot."""
        filesystem, _ = self._paths()
        readable = [v for v in files if v[0] < batch]
        if not readable:
            return
        oldest = max(readable)
        snapshots = [v for v in files if files[v].snapshot is not None and v <= oldest]
        if not snapshots:
            return
        kept_from = max(snapshots)
        for version, version_files in files.items():
            doomed = [version_files.delta] if version == kept_from else []
            if version < kept_from:
                doomed = list(version_files)
            for info in doomed:
                if info is not None:
                    with contextlib.suppress(FileNotFoundError):  # another cleanup was first
                        filesystem.delete_file(info.path)

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
