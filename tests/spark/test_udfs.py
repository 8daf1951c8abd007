"""featureflow.spark.udfs in local Spark: every form equals DuckDB's window functions.

Hypothesis draws events (ties, nulls, NaN, int or string keys, one key or many)
as the kernel tests do (tests/ops); Spark gets them in Arrow batches of 7 rows
so that keys span batches, in 1 or 3 partitions. Each test runs once with the
Mojo kernels and once with the numpy reference in the Python workers (set
through the workers' environment, and checked there). Rows reach a call in
(ts, rid) order within each key, so first/last of tied times are defined as
the oracle defines them (by row id).

The zero-copy tests spy on the kernel descriptors inside the Python workers:
the buffer addresses the kernels read are those of the Arrow batches (or the
pandas columns) Spark handed over.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark import cloudpickle

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))  # the kernels' oracle
import ops_oracle as oracle
from ops_strategies import Rows, rows
from test_ops_rolling import assert_matches
from test_ops_windows import assert_sessions_match

import featureflow.ops as ops
from featureflow.ops._backend import ENV_VAR
from featureflow.spark import udfs

pytestmark = pytest.mark.integration

# Functions of this module run in Spark's Python workers, which cannot import it.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ALL = list(ops.AGGS)
SMALL_BATCHES = "7"  # rows per Arrow batch: every key of a few rows spans batches
EXAMPLES = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _worker_backend(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    yield pa.record_batch({"backend": [ops.backend()]})


@pytest.fixture(params=["mojo", "numpy"])
def backend(request: pytest.FixtureRequest, spark: Any) -> Iterator[str]:
    """Python workers of the UDFs built in the test run this backend (forced: no fallback)."""
    env = spark.sparkContext.environment
    env[ENV_VAR] = request.param
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", SMALL_BATCHES)
    try:
        seen = spark.range(1).mapInArrow(_worker_backend, "backend string").collect()
        assert {row.backend for row in seen} == {request.param}
        yield request.param
    finally:
        env.pop(ENV_VAR, None)
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def _events(spark: Any, data: Rows) -> Any:
    """rid (input order), ts (long ns), v, key; unkeyed rows get one key."""
    n = len(data.ts)
    keys = data.keys if data.keys is not None else pa.array(np.zeros(n, np.int64))
    table = pa.table({"rid": np.arange(n), "ts": data.ts, "v": data.values, "key": keys})
    return spark.createDataFrame(table)


def _grouped_input(df: Any, partitions: int) -> Any:
    # Already clustered and sorted by key: groupBy(key) adds no shuffle and keeps (ts, rid).
    return df.repartition(partitions, "key").sortWithinPartitions("key", "ts", "rid")


def _map_input(df: Any, partitions: int) -> Any:
    return df.repartition(partitions, "key").sortWithinPartitions("ts", "rid")


def _forms(spec: udfs.Rolling | udfs.Hopping | udfs.Sessions, df: Any, partitions: int) -> dict:
    return {
        "applyInArrow": spec.apply_in_arrow(_grouped_input(df, partitions)),
        "applyInPandas": spec.apply_in_pandas(_grouped_input(df, partitions)),
        "mapInArrow": spec.map_in_arrow(_map_input(df, partitions)),
        "mapInPandas": spec.map_in_pandas(_map_input(df, partitions)),
    }


def _as_seen_by(form: str, expected: pa.ChunkedArray) -> pa.ChunkedArray:
    """Results of the pandas forms pass through pandas, where NaN and null are one: Spark
    turns a NaN result (e.g. std over +inf) into null on the way back."""
    if ("Pandas" not in form and "pandas" not in form) or not pa.types.is_floating(expected.type):
        return expected
    return pc.if_else(pc.is_nan(expected), pa.scalar(None, expected.type), expected)


def _keyed(data: Rows) -> pa.Array:
    return data.keys if data.keys is not None else pa.array(np.zeros(len(data.ts), np.int64))


@EXAMPLES
@given(
    data=rows(),
    window=st.sampled_from([1, 50, 10**4, 2**61]),
    partitions=st.sampled_from([1, 3]),
    scalar_agg=st.sampled_from(ALL),
)
def test_rolling_forms_match_duckdb(
    spark: Any, backend: str, data: Rows, window: int, partitions: int, scalar_agg: str
) -> None:
    df = _events(spark, data)
    windows = [window, window + 3]
    spec = udfs.Rolling(ts="ts", value="v", key="key", windows=windows, aggs=ALL)
    outputs = _forms(spec, df, partitions)
    value_type = data.values.type
    keyed_udfs = {
        "arrow_udf": udfs.rolling_udf(window, scalar_agg, value_type=value_type),
        "pandas_udf": udfs.rolling_pandas_udf(window, scalar_agg, value_type=value_type),
    }
    for name, udf in keyed_udfs.items():
        outputs[name] = _map_input(df, partitions).select("rid", udf("ts", "v", "key").alias("u"))
    expected = {w: oracle.rolling(data.ts, data.values, w, ALL, _keyed(data)) for w in windows}
    for form, out in outputs.items():
        table = out.toArrow().sort_by("rid")
        assert table["rid"].to_pylist() == list(range(len(data.ts))), form
        if form in keyed_udfs:
            want = _as_seen_by(form, expected[window][scalar_agg])
            assert_matches(table["u"], want, f"{form} {scalar_agg}")
            continue
        for w in windows:
            for agg in ALL:
                want = _as_seen_by(form, expected[w][agg])
                assert_matches(table[f"{agg}_{w}"], want, f"{form} {agg}_{w}")


@EXAMPLES
@given(data=rows(), window=st.sampled_from([1, 50, 10**4]), agg=st.sampled_from(ALL))
def test_unkeyed_rolling_udf_over_one_partition_matches_duckdb(
    spark: Any, backend: str, data: Rows, window: int, agg: str
) -> None:
    """The scalar UDFs without a key: one ordered partition, frames across its batches."""
    df = _events(spark, data).repartition(1).sortWithinPartitions("ts", "rid")
    arrow = udfs.rolling_udf(window, agg, value_type=data.values.type)
    pandas = udfs.rolling_pandas_udf(window, agg, value_type=data.values.type)
    out = df.select("rid", arrow("ts", "v").alias("a"), pandas("ts", "v").alias("p"))
    table = out.toArrow().sort_by("rid")
    expected = oracle.rolling(data.ts, data.values, window, [agg])[agg]
    assert_matches(table["a"], expected, f"arrow_udf {agg}")
    assert_matches(table["p"], _as_seen_by("pandas_udf", expected), f"pandas_udf {agg}")


def _sorted_windows(table: pa.Table, start: str) -> pa.Table:
    return table.sort_by([("key", "ascending"), (start, "ascending")])


@EXAMPLES
@given(
    data=rows(),
    size=st.sampled_from([1, 10, 1000]),
    step=st.sampled_from([1, 7, 500]),
    partitions=st.sampled_from([1, 3]),
)
def test_hopping_forms_match_duckdb(
    spark: Any, backend: str, data: Rows, size: int, step: int, partitions: int
) -> None:
    spec = udfs.Hopping(ts="ts", value="v", key="key", size=size, step=step, aggs=ALL)
    expected = oracle.hopping(data.ts, data.values, size, step, ALL, _keyed(data))
    for form, out in _forms(spec, _events(spark, data), partitions).items():
        table = _sorted_windows(out.toArrow(), "window_start")
        assert table["key"].to_pylist() == expected["k"].to_pylist(), form
        assert table["window_start"].to_pylist() == expected["ws"].to_pylist(), form
        ends = (expected["ws"].to_numpy() + size).tolist()
        assert table["window_end"].to_pylist() == ends, form
        for agg in ALL:
            assert_matches(table[agg], _as_seen_by(form, expected[agg]), f"{form} {agg}")


@EXAMPLES
@given(
    data=rows(),
    gap=st.sampled_from([1, 3, 50, 10**5]),
    dynamic=st.booleans(),
    partitions=st.sampled_from([1, 3]),
    max_length=st.sampled_from([None, 2, 50]),
)
def test_sessions_forms_match_duckdb(
    spark: Any,
    backend: str,
    data: Rows,
    gap: int,
    dynamic: bool,
    partitions: int,
    max_length: int | None,
) -> None:
    n = len(data.ts)
    gaps = np.random.default_rng(n).integers(-2, 2 * gap, n) if dynamic else np.full(n, gap)
    df = _events(spark, data)
    if dynamic:  # a per-row gap column; rows with a gap <= 0 are dropped, as in Spark
        rid_gap = spark.createDataFrame(pa.table({"rid": np.arange(n), "g": gaps}))
        df = df.join(rid_gap, "rid")
        spec = udfs.Sessions(
            ts="ts", value="v", key="key", gap_column="g", aggs=ALL, max_length=max_length
        )
    else:
        spec = udfs.Sessions(
            ts="ts", value="v", key="key", gap=gap, aggs=ALL, max_length=max_length
        )
    expected = oracle.sessions(data.ts, data.values, gaps, ALL, _keyed(data), max_length)
    for form, out in _forms(spec, df, partitions).items():
        table = _sorted_windows(out.toArrow(), "session_start")
        assert table.column_names[:3] == ["key", "session_start", "session_end"], form
        seen = expected.select(["k", "s", "e"])
        for agg in ALL:
            seen = seen.append_column(agg, _as_seen_by(form, expected[agg]))
        assert_sessions_match(table, seen, ALL, keyed=True)


def test_schema_names_types_and_bounds_follow_the_ts_column(spark: Any) -> None:
    """Output names and types are featureflow.ops' (min of int keeps int, counts are
    long); bounds of a Spark timestamp column are timestamps, equal to window()'s."""
    from pyspark.sql import functions as F

    minute = 60 * 10**9
    ts_ns = np.array([0, 4, 6, 11, 30], dtype=np.int64) * minute
    table = pa.table(
        {
            "user": pa.array(["a", "a", "b", "a", "a"]),
            "ts": pa.array(ts_ns // 1000, pa.timestamp("us", tz="UTC")),
            "n": pa.array([1, 2, 3, None, 5], pa.int32()),
        }
    )
    df = spark.createDataFrame(table)
    spec = udfs.Hopping(
        ts="ts", value="n", key="user", size="10m", step="5m", aggs=["min", "count"]
    )
    assert spec.schema(df.schema).simpleString() == (
        "struct<user:string,window_start:timestamp,window_end:timestamp,min:int,count:bigint>"
    )
    ours = spec.apply_in_arrow(df).orderBy("user", "window_start").collect()
    spark_window = (
        df.groupBy("user", F.window("ts", "10 minutes", "5 minutes"))
        .agg(F.min("n").alias("min"), F.count("n").alias("count"))
        .select("user", "window.start", "window.end", "min", "count")
        .orderBy("user", "start")
        .collect()
    )
    assert [tuple(row) for row in ours] == [tuple(row) for row in spark_window]
    rolling = udfs.Rolling(ts="ts", value="n", key="user", windows=["5m"], aggs=["max", "mean"])
    assert rolling.schema(df.schema).simpleString() == (
        "struct<user:string,ts:timestamp,n:int,max_5m:int,mean_5m:double>"
    )
    got = rolling.apply_in_pandas(df).orderBy("ts").collect()
    assert [row.max_5m for row in got] == [1, 2, 3, None, 5]  # a at 11m: only its null


# Zero copy: the kernel descriptors seen inside the Python workers ---------------------------

ADDRESSES = "ts_in long, values_in long, ts_kernel long, values_kernel long"


def _spied(run: Any) -> list[dict[str, int]]:
    """Call ``run()`` with the kernel calls recorded; the (ts, values) addresses they read."""
    from featureflow.ops import _backend

    native = type(_backend.current().backend)  # the Mojo kernels' bindings
    calls: list[list[int]] = []
    original = native._call

    def spy(self: Any, kernel: str, words: Any, *extra: int) -> int:
        if not kernel.startswith("encode"):  # the key encoder's descriptor is another
            calls.append(list(words))
        return original(self, kernel, words, *extra)

    native._call = spy
    try:
        run()
    finally:
        native._call = original
    return [{"ts_kernel": words[1], "values_kernel": words[2]} for words in calls[:1]]


def _address(arr: pa.Array | np.ndarray) -> int:
    if isinstance(arr, np.ndarray):
        return int(arr.ctypes.data)
    return int(arr.buffers()[1].address) + arr.offset * arr.type.byte_width


def _rows(ts: Any, values: Any, kernel: list[dict[str, int]]) -> pa.RecordBatch:
    row = {"ts_in": _address(ts), "values_in": _address(values)}
    return pa.RecordBatch.from_pylist([{**row, **k} for k in kernel], schema=_schema())


def _schema() -> pa.Schema:
    return pa.schema([(name, pa.int64()) for name in ADDRESSES.replace(" long", "").split(", ")])


def _spy_map_arrow(spec: Any) -> Any:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = list(batches)
        if received:
            seen = _spied(lambda: list(spec.map_arrow(iter(received))))
            yield _rows(received[0].column("ts"), received[0].column("v"), seen)

    return run


def _spy_grouped_arrow(spec: Any) -> Any:
    def run(table: pa.Table) -> pa.Table:
        seen = _spied(lambda: spec.arrow(table))
        return pa.Table.from_batches([_rows(table["ts"].chunk(0), table["v"].chunk(0), seen)])

    return run


def _spy_grouped_pandas(spec: Any) -> Any:
    def run(frame: pd.DataFrame) -> pd.DataFrame:
        seen = _spied(lambda: spec.pandas(frame))
        return _rows(frame["ts"].to_numpy(), frame["v"].to_numpy(), seen).to_pandas()

    return run


def _spy_map_pandas(spec: Any) -> Any:
    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        received = list(frames)
        if received:
            seen = _spied(lambda: list(spec.map_pandas(iter(received))))
            first = received[0]
            yield _rows(first["ts"].to_numpy(), first["v"].to_numpy(), seen).to_pandas()

    return run


def _scalar_addresses(rolling: Any, batches: Iterator[tuple[Any, ...]]) -> tuple[list, dict]:
    received = list(batches)
    seen = _spied(lambda: list(rolling(iter(received))))
    ts, values = (np.asarray(c) if isinstance(c, pd.Series) else c for c in received[0][:2])
    return received, _rows(ts, values, seen).to_pylist()[0]


def _spy_scalar(window: str, agg: str, kind: str) -> Any:
    """A scalar UDF giving, on every row, the addresses its partition's kernel call read."""
    if kind == "arrow":
        rolling = udfs.rolling_udf(window, agg).func

        def run(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
            received, row = _scalar_addresses(rolling, batches)
            for batch in received:
                n = len(batch[0])
                yield pa.StructArray.from_arrays(
                    [pa.array([value] * n, pa.int64()) for value in row.values()], names=list(row)
                )

        return run
    rolling_pandas = udfs.rolling_pandas_udf(window, agg).func

    def run_pandas(batches: Iterator[tuple[pd.Series, ...]]) -> Iterator[pd.DataFrame]:
        received, row = _scalar_addresses(rolling_pandas, batches)
        for batch in received:
            yield pd.DataFrame({name: [value] * len(batch[0]) for name, value in row.items()})

    return run_pandas


@pytest.mark.parametrize(
    "form",
    ["mapInArrow", "mapInPandas", "applyInArrow", "applyInPandas", "arrow_udf", "pandas_udf"],
)
def test_kernels_read_the_buffers_spark_hands_to_python(spark: Any, form: str) -> None:
    """With each partition (or group) in one Arrow batch, the ts and value addresses the
    kernels read are the batch's (pandas: the numpy buffers of the frame Spark built)."""
    from pyspark.sql import functions as F

    assert ops.backend() == "mojo", "the address test needs the Mojo kernels"
    rng = np.random.default_rng(3)
    n = 5_000  # below maxRecordsPerBatch (10,000): one batch per partition or group
    table = pa.table(
        {
            "key": rng.integers(0, 40, n),
            "ts": np.sort(rng.integers(0, 10**12, n)),
            "v": pa.array(rng.normal(size=n), mask=rng.random(n) < 0.05),
        }
    )
    spec = udfs.Rolling(ts="ts", value="v", key="key", windows=["1s"], aggs=["sum", "max"])
    df = spark.createDataFrame(table)
    if form == "mapInArrow":
        out = spec.partitioned(df, 2).mapInArrow(_spy_map_arrow(spec), ADDRESSES)
    elif form == "mapInPandas":
        out = spec.partitioned(df, 2).mapInPandas(_spy_map_pandas(spec), ADDRESSES)
    elif form == "applyInArrow":
        out = df.groupBy("key").applyInArrow(_spy_grouped_arrow(spec), ADDRESSES)
    elif form == "applyInPandas":
        out = df.groupBy("key").applyInPandas(_spy_grouped_pandas(spec), ADDRESSES)
    else:
        fields = ", ".join(f"{name}: bigint" for name in ADDRESSES.replace(" long", "").split(", "))
        factory = F.arrow_udf if form == "arrow_udf" else F.pandas_udf
        kind = "arrow" if form == "arrow_udf" else "pandas"
        udf = factory(_spy_scalar("1s", "sum", kind), f"struct<{fields}>")
        out = spec.partitioned(df, 2).select(udf("ts", "v", "key").alias("a")).select("a.*")
        out = out.distinct()
    rows = out.collect()
    assert rows, "no kernel call was seen"
    for row in rows:
        assert row.ts_kernel == row.ts_in, f"{form}: ts was copied before the kernel"
        assert row.values_kernel == row.values_in, f"{form}: values were copied"


def test_a_partition_of_several_batches_is_concatenated_once(spark: Any) -> None:
    """The documented exception: batches of one partition are concatenated (one copy)
    before the kernel call, which the address spy sees."""
    spec = udfs.Rolling(ts="ts", value="v", key="key", windows=["1s"], aggs=["sum"])
    table = pa.table({"key": np.arange(100) % 3, "ts": np.arange(100), "v": np.ones(100)})
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        df = spec.partitioned(spark.createDataFrame(table), 1)
        rows = df.mapInArrow(_spy_map_arrow(spec), ADDRESSES).collect()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert len(rows) == 1
    assert rows[0].ts_kernel != rows[0].ts_in
