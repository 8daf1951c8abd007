"""The backfill's offline store: per-event features, one directory per day, replaced whole.

Layout (Hive partitioning, read by :func:`featureflow.spark.offline_sink.read_history`)::

    <root>/<view>/day=YYYY-MM-DD/part-<p>.parquet

Rows have the stream job's history schema: the join key, the view's
timestamp field (timestamp[us, UTC]) and the features. A run writes into
``<root>/<view>/_staging-<run>/`` (executors; a retried task rewrites its own
file), then the driver swaps each day of the range in by renaming directories
(:meth:`DayStore.commit`). Readers skip names starting with ``_``, so they
never see staged files. Re-running a range replaces its days, never
duplicates; a run interrupted at any point leaves every day either old, new
or (only when killed between the two renames of a day) absent until the
range is run again, which restores it. Run one backfill per view at a time.

On a day only partly in the range, the rows outside the range are carried
over from the day's current files into the staged day before the swap.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import fs as pafs

from featureflow.backfill.timerange import NS_PER_DAY, TimeRange, day_label
from featureflow.spark.offline_sink import write_parquet_atomic
from featureflow.spark.state import filesystem_of

STAGING_PREFIX = "_staging-"
TRASH_PREFIX = "_replaced-"


def day_numbers(stamps: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Day since the epoch (UTC) of each timestamp (any Arrow timestamp unit)."""
    ns = stamps.cast(pa.timestamp("ns", tz="UTC")).cast(pa.int64())
    return np.floor_divide(np.asarray(ns), NS_PER_DAY)


@dataclass(frozen=True)
class DayStore:
    """The day-partitioned features of ``view`` under ``root`` (a path or URI), for run ``run``."""

    root: str
    view: str
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def _fs(self) -> tuple[pafs.FileSystem, str]:
        filesystem, base = filesystem_of(self.root)
        return filesystem, f"{base}/{self.view}"

    def day_dir(self, day: int, *, staged: bool) -> str:
        _, base = self._fs
        parent = f"{base}/{STAGING_PREFIX}{self.run}" if staged else base
        return f"{parent}/day={day_label(day)}"

    def stage(self, partition: int, rows: pa.Table, timestamp_field: str) -> dict[int, int]:
        """Write one shuffle partition's rows to the staged days (executor side).

        Returns:
            Rows written per day number.
        """
        filesystem, _ = self._fs
        days = day_numbers(rows.column(timestamp_field))
        written = {}
        for day in np.unique(days).tolist():
            part = rows.filter(pa.array(days == day))
            directory = self.day_dir(day, staged=True)
            filesystem.create_dir(directory, recursive=True)
            write_parquet_atomic(filesystem, f"{directory}/part-{partition:05d}.parquet", part)
            written[day] = part.num_rows
        return written

    def carry_over(self, span: TimeRange, timestamp_field: str) -> int:
        """Stage the rows outside ``span`` on days it covers partly; returns their count."""
        filesystem, _ = self._fs
        carried = 0
        for day in span.days:
            if span.covers_day(day):
                continue
            current = self.day_dir(day, staged=False)
            if filesystem.get_file_info(current).type != pafs.FileType.Directory:
                continue
            import pyarrow.dataset as ds

            table = ds.dataset(current, filesystem=filesystem, format="parquet").to_table()
            ns = table.column(timestamp_field).cast(pa.timestamp("ns", tz="UTC")).cast(pa.int64())
            outside = pc.or_(pc.less(ns, span.start_ns), pc.greater_equal(ns, span.end_ns))
            kept = table.filter(outside)
            if kept.num_rows:
                directory = self.day_dir(day, staged=True)
                filesystem.create_dir(directory, recursive=True)
                write_parquet_atomic(filesystem, f"{directory}/part-kept.parquet", kept)
                carried += kept.num_rows
        return carried

    def commit(self, span: TimeRange) -> list[str]:
        """Swap the staged days of ``span`` in, replacing the current ones; returns the day labels.

        Every day of the span is replaced, also one for which this run staged
        nothing (its old rows are removed: the range now holds no events that day).
        """
        filesystem, base = self._fs
        trash = f"{base}/{TRASH_PREFIX}{self.run}"
        filesystem.create_dir(trash, recursive=True)
        replaced = []
        for day in span.days:
            current = self.day_dir(day, staged=False)
            staged = self.day_dir(day, staged=True)
            if filesystem.get_file_info(current).type == pafs.FileType.Directory:
                filesystem.move(current, f"{trash}/day={day_label(day)}")
            if filesystem.get_file_info(staged).type == pafs.FileType.Directory:
                filesystem.move(staged, current)
            replaced.append(day_label(day))
        self.discard()
        return replaced

    def discard(self) -> None:
        """Remove this run's staging and replaced directories."""
        filesystem, base = self._fs
        for prefix in (STAGING_PREFIX, TRASH_PREFIX):
            directory = f"{base}/{prefix}{self.run}"
            if filesystem.get_file_info(directory).type == pafs.FileType.Directory:
                filesystem.delete_dir(directory)

    def discard_stale(self) -> int:
        """Remove what interrupted earlier runs left (staging and replaced directories)."""
        filesystem, base = self._fs
        if filesystem.get_file_info(base).type != pafs.FileType.Directory:
            return 0
        stale = [
            info.path
            for info in filesystem.get_file_info(pafs.FileSelector(base))
            if info.type == pafs.FileType.Directory
            and info.base_name.startswith((STAGING_PREFIX, TRASH_PREFIX))
        ]
        for directory in stale:
            filesystem.delete_dir(directory)
        return len(stale)
