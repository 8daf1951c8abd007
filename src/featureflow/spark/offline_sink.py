"""The offline store of the stream job: every accepted event's features (training history).

One Parquet file per micro-batch and shuffle partition (and, for the last
batch of a run, one more for the sessions the watermark after it closes)::

    <root>/<view>/batch=<id>/part-<p>.parquet
    <root>/<view>/batch=<id>/part-<p>-closed.parquet

Columns: the join key, the view's timestamp field (timestamp[us, UTC]) and
the features, i.e. exactly the online rows' schema, one row per event. A
micro-batch that Spark replays after a crash rewrites the same files (same
events, same partitioning), so the history is written idempotently per
batch. Any filesystem pyarrow reaches works (local, HDFS, S3).

Each file is written under a hidden temporary name of the writer's own
(:func:`~featureflow.spark.state.temporary_path`; readers skip names that
start with '.') and moved into place; local files and directories get the
job's file mode (:mod:`featureflow.spark.file_modes`, owner-only by default).
A writer killed mid-write leaves its hidden temporary file behind (the
replay writes the file under a new name); readers never see it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from featureflow.spark import failpoints, file_modes
from featureflow.spark.state import create_temporary, filesystem_of

PARQUET_OPTIONS: dict[str, Any] = {"use_dictionary": False}
"""How feature files are written. Features are floats that seldom repeat, so
dictionary encoding (pyarrow's default) only cost time: 0.20 s against 0.03 s
for 125 k rows of 18 features, and the files came out 25 % larger."""


def write_parquet_atomic(
    filesystem: pafs.FileSystem, final: str, table: pa.Table,
    before_move: Callable[[], None] | None = None,
) -> None:  # fmt: skip
    """Write ``final`` under a temporary name of this writer's own, then move it into
    place: readers see all of it or nothing, and two writers never share a file."""
    temporary = create_temporary(filesystem, final)
    pq.write_table(table, temporary, filesystem=filesystem, **PARQUET_OPTIONS)
    if before_move is not None:
        before_move()
    filesystem.move(temporary, final)


CLOSED_SUFFIX = "-closed"
"""File suffix of the sessions that the watermark after a settled batch closes
(:meth:`~featureflow.spark.pipeline.TopicBatchProcessor.close_settled_sessions`)."""


@dataclass(frozen=True)
class OfflineFeatureLog:
    """Per-event features of one view, under ``root`` (a path or URI)."""

    root: str
    view: str

    def batch_dir(self, batch: int) -> str:
        _, base = filesystem_of(self.root)
        return f"{base}/{self.view}/batch={batch:09d}"

    def write(self, batch: int, partition: int, history: pa.Table, suffix: str = "") -> None:
        """Write (or, on a replay, rewrite) one partition's history of ``batch`` atomically
        (``part-<p><suffix>.parquet``: the sessions the watermark after the batch
        closes have a file of their own)."""
        filesystem, _ = filesystem_of(self.root)
        directory = self.batch_dir(batch)
        file_modes.make_dirs(filesystem, directory)
        final = f"{directory}/part-{partition:05d}{suffix}.parquet"
        write_parquet_atomic(
            filesystem, final, history,
            before_move=lambda: failpoints.reach("mid_offline_write", batch),
        )  # fmt: skip

    def has_suffix(self, batch: int, suffix: str) -> bool:
        """Whether any partition's file ``part-<p><suffix>.parquet`` of ``batch`` exists."""
        filesystem, _ = filesystem_of(self.root)
        found = filesystem.get_file_info(
            pafs.FileSelector(self.batch_dir(batch), allow_not_found=True)
        )
        return any(info.base_name.endswith(f"{suffix}.parquet") for info in found)


def read_history(root: str, view: str) -> pa.Table:
    """All per-event features written for ``view`` (for tests, notebooks and backfills)."""
    import pyarrow.dataset as ds

    filesystem, base = filesystem_of(root)
    dataset = ds.dataset(
        f"{base}/{view}", filesystem=filesystem, format="parquet", partitioning="hive",
        exclude_invalid_files=True,
    )  # fmt: skip
    return dataset.to_table()
