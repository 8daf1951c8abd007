"""featureflow's window kernels as Spark UDFs, for data engineers' own PySpark jobs.

Three window functions, with the frames and output names of :mod:`featureflow.ops`:

- `Rolling`: one output row per event; the frame of an event at ``t`` is the
  events of its key with time in ``[t − W, t]`` (ns, both ends included, SQL's
  ``RANGE BETWEEN W PRECEDING AND CURRENT ROW``; with ``hop`` the sawtooth
  ``[floor((t − W) / hop) · hop, t]``); adds a column ``f"{agg}_{window}"`` per
  window and aggregate (window as written, e.g. ``sum_1h``).
- `Hopping`: Spark's ``window(ts, size, step)``: windows ``[start, start + size)``
  (ns, end excluded), ``start`` a multiple of ``step`` since the epoch; one row
  per (key, window) holding an event: the key, ``window_start``, ``window_end``,
  one column per aggregate named after it.
- `Sessions`: Spark's ``session_window(ts, gap)``: per key in time order, an
  event joins the open session when its time is <= the session's end, the max
  of ``ts + gap`` over its events (inclusive); one row per session: the key,
  ``session_start`` (first event), ``session_end`` (max ts + gap), the aggregates.

Each spec gives every Spark form of the same computation::

    spec = udfs.Rolling(ts="event_ns", value="amount", windows=["10m", "1h"],
                        aggs=["count", "sum"], key="user_id")
    out = spec.apply_in_arrow(df)           # df.groupBy(key).applyInArrow(spec.arrow, ...)
    out = spec.apply_in_pandas(df)          # df.groupBy(key).applyInPandas(spec.pandas, ...)
    out = spec.map_in_arrow(spec.partitioned(df))    # many keys per call: the fast path
    out = spec.map_in_pandas(spec.partitioned(df))

and `rolling_udf` / `rolling_pandas_udf` give a column expression (scalar
Arrow / pandas UDF) for one rolling aggregate, e.g. the unkeyed rolling sum
over an ordered column.

Times (``ts``) are a long column of epoch nanoseconds (read in place) or a
Spark timestamp (microseconds, scaled to ns: one pass over the times); window
bounds come back in the ts column's type. Durations are ``"10s"``, ``"5m"``,
``"1h"``, ``"1d"``, ints (ns) or ``timedelta``. Nulls and NaN values are
skipped. The key is one integer or string column.

Frames never cross a call: a grouped call sees all events of one key (Spark
hands them over as one Arrow table, chunked when they span Arrow batches); a
map call or a scalar UDF gathers every Arrow batch of its partition first
(``spark.sql.execution.arrow.maxRecordsPerBatch`` rows each, 10,000 by
default) and calls the kernels once, so windows are right across batches as
long as each key's events are in one partition (`partitioned`; unkeyed: one
partition). The kernels read the Arrow buffers in place: a partition or group
that arrives as one Arrow batch is not copied; one spanning several batches is
concatenated once (a copy) since the kernels read contiguous buffers. Raise
``maxRecordsPerBatch`` above the rows of a partition to avoid it. The pandas
forms read the numpy buffers behind the pandas columns Spark built, also in place;
as everywhere in pandas, NaN and null are one there (a NaN result comes back null).

The Mojo kernels are used when they load in the Python workers, else the numpy
reference, with the same results; ``spark.executorEnv.FEATUREFLOW_BACKEND=numpy``
forces the reference there (see :func:`featureflow.ops.backend`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from featureflow import ops

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "Hopping",
    "Rolling",
    "Sessions",
    "arrow_table",
    "gather",
    "rolling_pandas_udf",
    "rolling_udf",
]


def gather(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    """A partition's Arrow batches as one table (chunks, no copy); ``None`` when empty."""
    received = [batch for batch in batches if batch.num_rows]
    return pa.Table.from_batches(received) if received else None


def _arrow_column(series: pd.Series) -> pa.Array:
    """A pandas column as Arrow, sharing its numpy buffer when it has one.

    NaN stays NaN (the kernels skip it as they skip nulls); strings and pandas
    extension types (nullable integers) go through Arrow's own conversion.
    """
    values = series.array
    if isinstance(values, pd.arrays.NumpyExtensionArray) and values.dtype.kind in "iufM":
        return pa.array(values.to_numpy())  # wraps the buffer: no copy
    return pa.Array.from_pandas(series)


def arrow_table(frame: pd.DataFrame) -> pa.Table:
    """A pandas frame as an Arrow table whose numeric and datetime64 columns are views."""
    return pa.table({str(name): _arrow_column(frame[name]) for name in frame.columns})


@dataclass(frozen=True, kw_only=True)
class _Spec:
    ts: str
    value: str
    aggs: Sequence[str]
    key: str | None = None

    # What each subclass defines: the ops call, whether the input rows are kept, the bounds.
    def _ops(self, table: pa.Table, ts: object, values: object, keys: object) -> pa.Table:
        raise NotImplementedError

    def _extra_inputs(self) -> list[str]:
        return []

    def _keeps_input(self) -> bool:
        return False

    def _bounds(self) -> tuple[str, ...]:
        return ()

    def compute(self, table: pa.Table) -> pa.Table:
        """The Arrow core of every form: the kernels over ``table``'s columns.

        Rolling keeps every input column and appends the results (input row
        order); hopping and sessions return the key (named as the key column),
        the window bounds (in the ts column's type) and the aggregates.
        """
        keys = None if self.key is None else table.column(self.key)
        ts = table.column(self.ts)
        result = self._ops(table, ts, table.column(self.value), keys)
        if self._keeps_input():
            clash = sorted(set(result.column_names) & set(table.column_names))
            if clash:
                msg = f"output columns {clash} already exist in the input"
                raise ValueError(msg)
            for name in result.column_names:
                table = table.append_column(name, result.column(name))
            return table
        columns: dict[str, pa.ChunkedArray] = {}
        for name in result.column_names:
            column = result.column(name)
            if name == "key":
                name = str(self.key)
            elif name in self._bounds():
                column = (
                    column.cast(pa.int64())
                    if ts.type == pa.int64()
                    else column.cast(ts.type, safe=False)
                )
            columns[name] = column
        return pa.table(columns)

    # Spark schemas ----------------------------------------------------------------

    def schema(self, input_schema: StructType) -> StructType:
        """The Spark schema of the output for input rows of ``input_schema``."""
        from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
        from pyspark.sql.types import StructField, StructType

        fields = {f.name: f for f in input_schema.fields}
        inputs = [self.ts, self.value, *([self.key] if self.key else []), *self._extra_inputs()]
        for name in inputs:
            if name not in fields:
                msg = f"column {name!r} is not in the input ({sorted(fields)})"
                raise ValueError(msg)

        def arrow_type(name: str) -> pa.DataType:
            return to_arrow_type(fields[name].dataType, timezone="UTC")

        empty = {name: pa.array([], arrow_type(name)) for name in inputs}
        out = self.compute(pa.table(empty))
        kept: list[Any] = list(input_schema.fields) if self._keeps_input() else []
        for f in out.schema:
            if f.name in empty:
                if not self._keeps_input():
                    kept.append(fields[f.name])
            elif f.name in self._bounds():
                kept.append(StructField(f.name, fields[self.ts].dataType, False))
            else:
                kept.append(StructField(f.name, from_arrow_type(f.type), True))
        return StructType(kept)

    # The Spark forms ----------------------------------------------------------------

    @property
    def arrow(self) -> Any:
        """For ``groupBy(key).applyInArrow(spec.arrow, spec.schema(df.schema))``: one key's
        events (a table, chunked when they span Arrow batches) -> its output table."""
        spec = self

        def apply(table: pa.Table) -> pa.Table:
            return spec.compute(table)

        return apply

    @property
    def pandas(self) -> Any:
        """For ``groupBy(key).applyInPandas(spec.pandas, spec.schema(df.schema))``."""
        spec = self

        def apply(frame: pd.DataFrame) -> pd.DataFrame:
            return spec.compute(arrow_table(frame)).to_pandas()

        return apply

    @property
    def map_arrow(self) -> Any:
        """For ``df.mapInArrow(spec.map_arrow, spec.schema(df.schema))`` over data partitioned
        by key (`partitioned`): every batch of the partition, then one kernel call."""
        spec = self

        def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            table = gather(batches)
            if table is not None:
                yield from spec.compute(table).to_batches()

        return apply

    @property
    def map_pandas(self) -> Any:
        """For ``df.mapInPandas(spec.map_pandas, spec.schema(df.schema))`` (partitioned by key)."""
        spec = self

        def apply(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            tables = [arrow_table(frame) for frame in frames if len(frame)]
            if tables:  # an integer column is float64 in the frames where it has nulls
                table = pa.concat_tables(tables, promote_options="permissive")
                yield spec.compute(table).to_pandas()

        return apply

    def _grouped(self, df: DataFrame) -> Any:
        if self.key is None:
            msg = "a grouped form needs the key column: pass key="
            raise ValueError(msg)
        return df.groupBy(self.key)

    def apply_in_arrow(self, df: DataFrame) -> DataFrame:
        """``df.groupBy(key).applyInArrow(...)``: one call per key."""
        return self._grouped(df).applyInArrow(self.arrow, self.schema(df.schema))

    def apply_in_pandas(self, df: DataFrame) -> DataFrame:
        """``df.groupBy(key).applyInPandas(...)``: one call per key, as pandas."""
        return self._grouped(df).applyInPandas(self.pandas, self.schema(df.schema))

    def map_in_arrow(self, df: DataFrame) -> DataFrame:
        """``df.mapInArrow(...)``: one call per partition; ``df`` must hold each key's
        events in one partition (`partitioned`), or be one partition when unkeyed."""
        return df.mapInArrow(self.map_arrow, self.schema(df.schema))

    def map_in_pandas(self, df: DataFrame) -> DataFrame:
        """``df.mapInPandas(...)``: as `map_in_arrow`, the function seeing pandas frames."""
        return df.mapInPandas(self.map_pandas, self.schema(df.schema))

    def partitioned(self, df: DataFrame, partitions: int | None = None) -> DataFrame:
        """``df`` hash-partitioned by key (one partition when unkeyed), sorted by ts within
        partitions: what the map forms need, and the kernels' in-order fast path."""
        if self.key is None:
            return df.repartition(1).sortWithinPartitions(self.ts)
        parted = df.repartition(partitions, self.key) if partitions else df.repartition(self.key)
        return parted.sortWithinPartitions(self.ts)


@dataclass(frozen=True, kw_only=True)
class Rolling(_Spec):
    """Rolling aggregates (:func:`featureflow.ops.rolling`): frame ``[t − W, t]`` in ns
    (``hop``: ``[floor((t − W)/hop)·hop, t]``); adds ``f"{agg}_{window}"`` columns."""

    windows: object
    hop: object = None

    def _ops(self, table: pa.Table, ts: object, values: object, keys: object) -> pa.Table:
        return ops.rolling(ts, values, self.windows, list(self.aggs), keys, self.hop)

    def _keeps_input(self) -> bool:
        return True


@dataclass(frozen=True, kw_only=True)
class Hopping(_Spec):
    """Hopping windows (:func:`featureflow.ops.hopping`, Spark's ``window(ts, size, step)``):
    ``[start, start + size)`` in ns, starts at multiples of ``step``."""

    size: object
    step: object

    def _ops(self, table: pa.Table, ts: object, values: object, keys: object) -> pa.Table:
        return ops.hopping(ts, values, self.size, self.step, list(self.aggs), keys)

    def _bounds(self) -> tuple[str, str]:
        return ("window_start", "window_end")


@dataclass(frozen=True, kw_only=True)
class Sessions(_Spec):
    """Session windows (:func:`featureflow.ops.sessions`, Spark's ``session_window``):
    an event within ``gap`` (ns) of its session's end joins it; the end is inclusive.
    ``gap_column`` names a per-row gap (long ns or interval) instead. ``max_length``
    (a duration; None: no cap) opens a new session at an event more than that after
    its session's first event (ns, strictly)."""

    gap: object = None
    gap_column: str | None = None
    max_length: object = None

    def __post_init__(self) -> None:
        if (self.gap is None) == (self.gap_column is None):
            msg = "Sessions: give either gap= (a duration) or gap_column= (a per-row gap)"
            raise ValueError(msg)

    def _ops(self, table: pa.Table, ts: object, values: object, keys: object) -> pa.Table:
        gap = self.gap if self.gap_column is None else table.column(self.gap_column)
        return ops.sessions(ts, values, gap, list(self.aggs), keys, max_length=self.max_length)

    def _extra_inputs(self) -> list[str]:
        return [] if self.gap_column is None else [self.gap_column]

    def _bounds(self) -> tuple[str, str]:
        return ("session_start", "session_end")


# Scalar UDFs: one rolling aggregate as a column ------------------------------------------


def _scalar_type(window: object, agg: str, value_type: pa.DataType) -> DataType:
    from pyspark.sql.pandas.types import from_arrow_type

    empty = ops.rolling(pa.array([], pa.int64()), pa.array([], value_type), window, agg)
    return from_arrow_type(empty.schema.field(0).type)


def _rolling_over_partition(
    arrays: list[list[pa.Array]], window: object, agg: str, hop: object
) -> tuple[list[int], pa.Array]:
    """One kernel call over a partition's batches of (ts, values[, keys]): the lengths of
    the batches and the result, in row order."""
    lengths = [len(batch[0]) for batch in arrays]
    tables = [pa.table({str(i): array for i, array in enumerate(batch)}) for batch in arrays]
    # (pandas: an integer column is float64 in the batches where it has nulls)
    columns = pa.concat_tables(tables, promote_options="permissive").columns
    keys = columns[2] if len(columns) > 2 else None
    result = ops.rolling(columns[0], columns[1], window, agg, keys, hop).column(0)
    return lengths, result.combine_chunks()


def _slices(result: pa.Array, lengths: list[int]) -> Iterator[pa.Array]:
    start = 0
    for n in lengths:
        yield result.slice(start, n)
        start += n


def rolling_udf(
    window: object, agg: str, *, hop: object = None, value_type: pa.DataType | None = None
) -> Any:
    """A scalar Arrow UDF: ``rolling_udf("1h", "sum")(ts, value[, key])`` is, per row,
    ``agg`` over the rows of its partition (and key) with ts in ``[t − W, t]`` (ns).

    The frame covers the rows of one Spark partition: every Arrow batch of the
    partition is gathered before the one kernel call, so give it data whose
    frames are within a partition: one partition when unkeyed (an ordered
    column, e.g. ``df.repartition(1)`` or `Rolling.partitioned`), each key in
    one partition when keyed. ``value_type``: the Arrow type of the value column
    (default float64), which fixes the result type (e.g. min of int32 is int).
    """
    from pyspark.sql import functions

    factory: Any = functions.arrow_udf  # its stubs do not know the iterator-of-tuples form

    def rolling(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        arrays = [list(batch) for batch in batches]
        if arrays:
            lengths, result = _rolling_over_partition(arrays, window, agg, hop)
            yield from _slices(result, lengths)

    return factory(rolling, _scalar_type(window, agg, value_type or pa.float64()))


def rolling_pandas_udf(
    window: object, agg: str, *, hop: object = None, value_type: pa.DataType | None = None
) -> Any:
    """`rolling_udf` as a pandas UDF: the kernels read the numpy buffers of the pandas
    series Spark built (in place); results come back as pandas series."""
    from pyspark.sql import functions

    factory: Any = functions.pandas_udf  # its stubs do not know the iterator-of-tuples form

    def rolling(batches: Iterator[tuple[pd.Series, ...]]) -> Iterator[pd.Series]:
        arrays = [[_arrow_column(series) for series in batch] for batch in batches]
        if arrays:
            lengths, result = _rolling_over_partition(arrays, window, agg, hop)
            for part in _slices(result, lengths):
                yield pd.Series(part.to_numpy(zero_copy_only=False))

    return factory(rolling, _scalar_type(window, agg, value_type or pa.float64()))
