"""The kernels as Spark UDFs: a pandas UDF, the same UDF on the Mojo kernel, Spark's own.

One function, the unkeyed rolling sum over an ordered column: per row, the sum
of the values with ts in ``[t − 1 h, t]`` (ns; ts one second apart, so 3,601
values a frame), over 10 M float64 values in one Spark partition (local[2]),
all in one run:

- Spark's built-in ``sum(v) OVER (ORDER BY ts RANGE BETWEEN 1 h PRECEDING AND
  CURRENT ROW)``;
- a plain pandas UDF (iterator form, the partition gathered) computing it with
  pandas (``rolling("3600s", closed="both")``) and with numpy (cumsum +
  searchsorted);
- `featureflow.spark.udfs.rolling_pandas_udf` and `rolling_udf` (pandas and
  Arrow UDFs calling the kernel), with the Mojo kernels, the Arrow one also
  with the numpy reference and with Spark's default 10,000-row Arrow batches;
- an identity Arrow UDF: what moving the values to Python and back costs.

Per form: the time inside the UDF's Python function (its own work, the time
spent waiting for Spark's input batches taken out; measured in the worker and
summed through an accumulator), the wall time of the whole query (a noop-like
``sum``/``count`` of the result on the JVM over the cached input), best of
``--repeats``, and the copies of each value on its way in and out of the
function. Copies are measured, not assumed: the pandas conversions are run
through pyspark's own converters and checked with ``np.shares_memory``; the
kernel's reading in place is the address test of tests/spark/test_udfs.py.
Spark's JVM -> Arrow IPC -> Python transfer counts as one copy each way.

Run: ``.venv/bin/python bench/udfs.py [--values N] [--repeats R]``; writes
``bench/results/udfs.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from featureflow import ops
from featureflow.ops import _backend
from featureflow.ops._backend import ENV_VAR
from featureflow.spark import udfs
from featureflow.spark.session import build_session

RESULTS = Path(__file__).parent / "results"
WINDOW = "1h"
WINDOW_NS = 3_600 * 10**9
QUOTED = (
    "Figures users quote for this approach (10 M float64, not measured here): 182 ms for a "
    "legacy pandas UDF, 47 ms for a native zero-copy function."
)


# The functions under test, each an iterator UDF over one partition's batches --------------


def _gather_series(batches: Iterator[tuple[pd.Series, pd.Series]]) -> tuple[list[int], Any, Any]:
    parts = list(batches)
    lengths = [len(ts) for ts, _ in parts]
    if len(parts) == 1:
        return lengths, parts[0][0], parts[0][1]
    ts = pd.concat([p[0] for p in parts], ignore_index=True)
    return lengths, ts, pd.concat([p[1] for p in parts], ignore_index=True)


def _split(result: np.ndarray, lengths: list[int]) -> Iterator[pd.Series]:
    start = 0
    for n in lengths:
        yield pd.Series(result[start : start + n])
        start += n


def pandas_rolling(batches: Iterator[tuple[pd.Series, pd.Series]]) -> Iterator[pd.Series]:
    """pandas' own time-based rolling: frame [t − 1 h, t] (closed="both"), ts unique."""
    lengths, ts, v = _gather_series(batches)
    series = pd.Series(v.to_numpy(), index=pd.to_datetime(ts.to_numpy(), unit="ns"))
    yield from _split(series.rolling("3600s", closed="both").sum().to_numpy(), lengths)


def numpy_rolling(batches: Iterator[tuple[pd.Series, pd.Series]]) -> Iterator[pd.Series]:
    """numpy: prefix sums and a binary search for each frame's first row (ts sorted)."""
    lengths, ts, v = _gather_series(batches)
    t = ts.to_numpy()
    sums = np.concatenate([[0.0], np.cumsum(v.to_numpy())])
    first = np.searchsorted(t, t - WINDOW_NS, side="left")
    yield from _split(sums[1:] - sums[first], lengths)


def identity(batches: Iterator[tuple[pa.Array, pa.Array]]) -> Iterator[pa.Array]:
    """No work: the values back as they came."""
    for _, values in batches:
        yield values


# In-worker timing -------------------------------------------------------------------------


_END = object()


def _clocked(items: Iterator[Any], spent: list[float]) -> Iterator[Any]:
    """``items``, adding the time each ``next`` takes to ``spent[0]``."""
    it = iter(items)
    while True:
        start = time.perf_counter()
        item = next(it, _END)
        spent[0] += time.perf_counter() - start
        if item is _END:
            return
        yield item


def timed(function: Callable[[Iterator[Any]], Iterator[Any]], seconds: Any) -> Callable[..., Any]:
    """``function`` with the time spent in it, less the time spent waiting for Spark's
    input batches, added to the accumulator ``seconds``."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        waited, total = [0.0], [0.0]
        yield from _clocked(function(_clocked(batches, waited)), total)
        seconds.add(total[0] - waited[0])

    return run


def _annotated(run: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """``run`` with the type hints Spark reads to pick the UDF form."""
    if kind == "arrow":

        def arrow_form(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
            return run(batches)  # type: ignore[no-any-return]

        return arrow_form

    def pandas_form(batches: Iterator[tuple[pd.Series, ...]]) -> Iterator[pd.Series]:
        return run(batches)  # type: ignore[no-any-return]

    return pandas_form


# The same functions without Spark ----------------------------------------------------------


def alone_ms(form: dict[str, Any], n: int, repeats: int = 3) -> float:
    """Best time of the form's function in this process, on what Spark would hand it: one
    batch of ``n`` rows (or ``form["batch"]``-row slices), as pyspark converts it."""
    from pyspark.sql.conversion import ArrowBatchTransformer

    v = np.random.default_rng(7).random(n)
    batch = pa.record_batch({"ts": np.arange(n, dtype=np.int64) * 10**9, "v": v})
    size = form.get("batch", n)
    slices = [batch.slice(start, size) for start in range(0, n, size)]
    if form["kind"] == "pandas":
        inputs = [tuple(ArrowBatchTransformer.to_pandas(b, timezone="UTC")) for b in slices]
    else:
        inputs = [(b.column(0), b.column(1)) for b in slices]
    env = form.get("env", {})
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    _backend.reset()  # the backend is chosen again from the environment
    try:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _out in form["function"](iter(inputs)):
                pass
            best = min(best, time.perf_counter() - start)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _backend.reset()
    return best * 1e3


# Copies, measured with pyspark's own converters --------------------------------------------


def _pandas_copies(n: int = 1_000_000) -> dict[str, int]:
    """Copies of a float64 column (no nulls) from Arrow to pandas (a pandas UDF's input)
    and of a float64 pandas result back to Arrow, as pyspark 4 converts them."""
    from pyspark.sql.conversion import ArrowBatchTransformer, PandasToArrowConversion
    from pyspark.sql.types import DoubleType, StructField, StructType

    batch = pa.record_batch({"v": np.random.default_rng(0).random(n)})
    arrow_data = np.frombuffer(batch.column(0).buffers()[1], dtype=np.float64)
    series = ArrowBatchTransformer.to_pandas(batch, timezone="UTC")[0]
    to_pandas = 0 if np.shares_memory(series.to_numpy(), arrow_data) else 1
    result = pd.Series(np.random.default_rng(1).random(n))
    schema = StructType([StructField("_0", DoubleType())])
    back = PandasToArrowConversion.convert([result], schema, timezone="UTC", arrow_cast=True)
    out = np.frombuffer(back.column(0).buffers()[1], dtype=np.float64)
    from_pandas = 0 if np.shares_memory(result.to_numpy(), out) else 1
    kernel_result = ops.rolling(np.arange(n), batch.column(0), WINDOW, "sum").column(0)
    as_series = kernel_result.to_numpy(zero_copy_only=False)
    kernel_data = np.frombuffer(kernel_result.chunk(0).buffers()[1], dtype=np.float64)
    result_to_pandas = 0 if np.shares_memory(as_series, kernel_data) else 1
    return {
        "to_pandas": to_pandas,
        "from_pandas": from_pandas,
        "result_to_pandas": result_to_pandas,
    }


# The run --------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--values", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--builtin-values",
        type=int,
        default=1_000_000,
        help="rows for Spark's built-in window, scaled to --values (it recomputes each "
        "frame: O(rows x frame), 58 s for 1 M rows here)",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="where udfs.{json,md} go")
    args = parser.parse_args()
    n = args.values
    load_at_start = os.getloadavg()

    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = build_session(
        "featureflow-bench-udfs",
        master="local[2]",
        shuffle_partitions=2,
        extra_conf={
            "spark.driver.memory": "6g",
            # one Arrow batch per partition: nothing to gather (the 10k form sets it back)
            "spark.sql.execution.arrow.maxRecordsPerBatch": str(n),
        },
    )
    sc = spark.sparkContext

    def make_events(rows: int) -> Any:
        events = (
            spark.range(0, rows, 1, numPartitions=1)
            .select((F.col("id") * 10**9).alias("ts"), F.rand(7).alias("v"))
            .cache()
        )
        events.count()
        return events

    events = make_events(n)
    builtin_rows = min(n, args.builtin_values)
    few = make_events(builtin_rows)
    copies = _pandas_copies()
    ipc = 1  # Spark's JVM -> Arrow IPC -> Python transfer, one copy each way

    def udf_form(name: str, kind: str, function: Any, env: dict[str, str] | None = None) -> Any:
        seconds = sc.accumulator(0.0)
        for key, value in (env or {}).items():  # the workers of UDFs built now get it
            sc.environment[key] = value
        try:
            factory = F.arrow_udf if kind == "arrow" else F.pandas_udf
            udf = factory(_annotated(timed(function, seconds), kind), "double")  # type: ignore[call-overload]
            column = udf("ts", "v")
        finally:
            for key in env or {}:
                sc.environment.pop(key, None)
        return column, seconds

    mojo_arrow = udfs.rolling_udf(WINDOW, "sum").func
    mojo_pandas = udfs.rolling_pandas_udf(WINDOW, "sum").func
    numpy_env = {ENV_VAR: "numpy"}
    forms: list[dict[str, Any]] = [
        {
            "form": f"Spark built-in window sum (run on {builtin_rows:,} rows, scaled)",
            "copies_in": 1,
            "copies_out": 0,
            "rows": builtin_rows,
            "column": F.sum("v").over(Window.orderBy("ts").rangeBetween(-WINDOW_NS, 0)),
        },
        {
            "form": "pandas UDF, pandas rolling",
            "kind": "pandas",
            "function": pandas_rolling,
            "copies_in": ipc + copies["to_pandas"],
            "copies_out": copies["from_pandas"] + ipc,
        },
        {
            "form": "pandas UDF, numpy cumsum",
            "kind": "pandas",
            "function": numpy_rolling,
            "copies_in": ipc + copies["to_pandas"],
            "copies_out": copies["from_pandas"] + ipc,
        },
        {
            "form": "pandas UDF, Mojo kernel (rolling_pandas_udf)",
            "kind": "pandas",
            "function": mojo_pandas,
            "copies_in": ipc + copies["to_pandas"],
            "copies_out": copies["result_to_pandas"] + copies["from_pandas"] + ipc,
        },
        {
            "form": "Arrow UDF, Mojo kernel (rolling_udf)",
            "kind": "arrow",
            "function": mojo_arrow,
            "copies_in": ipc,
            "copies_out": ipc,
        },
        {
            "form": "Arrow UDF, Mojo kernel, 10k-row batches",
            "kind": "arrow",
            "function": mojo_arrow,
            "copies_in": ipc + 1,
            "copies_out": ipc,
            "batch": 10_000,
        },
        {
            "form": "Arrow UDF, numpy reference (rolling_udf)",
            "kind": "arrow",
            "function": mojo_arrow,
            "env": numpy_env,
            "copies_in": ipc,
            "copies_out": ipc,
        },
        {
            "form": "Arrow UDF, identity (transfer only)",
            "kind": "arrow",
            "function": identity,
            "copies_in": ipc,
            "copies_out": ipc,
        },
    ]
    for form in forms:  # warm-up on a few rows: Python workers started, code paths loaded
        if "function" in form:
            column, _ = udf_form("u", form["kind"], form["function"], form.get("env"))
            few.limit(10_000).select(column).count()
    reference: float | None = None
    for form in forms:
        data = few if "rows" in form else events
        if "batch" in form:
            spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(form["batch"]))
        best_wall, best_fn, checksum = float("inf"), float("inf"), 0.0
        for _ in range(args.repeats):
            if "function" in form:
                column, seconds = udf_form("u", form["kind"], form["function"], form.get("env"))
            else:
                column, seconds = form["column"], None
            query = data.select(column.alias("u")).agg(F.sum("u").alias("s"), F.count("u"))
            start = time.perf_counter()
            row = query.collect()[0]
            best_wall = min(best_wall, time.perf_counter() - start)
            if seconds is not None:
                best_fn = min(best_fn, seconds.value)
            checksum = float(row["s"])
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(n))
        if "rows" in form:  # Spark's own result equals the kernel's on the same rows
            column, _ = udf_form("u", "arrow", mojo_arrow)
            ours = float(few.select(column.alias("u")).agg(F.sum("u")).collect()[0][0])
            assert abs(ours - checksum) <= 1e-9 * abs(checksum), ("built-in", ours, checksum)
        elif "identity" not in form["form"]:  # every UDF form: the same sums
            reference = reference if reference is not None else checksum
            assert abs(checksum - reference) <= 1e-9 * abs(reference), (form["form"], checksum)
        scale = n / form.get("rows", n)
        form.update(
            alone_ms=round(alone_ms(form, n), 1) if "function" in form else None,
            wall_ms=round(best_wall * scale * 1e3, 1),
            function_ms=None if best_fn == float("inf") else round(best_fn * 1e3, 1),
            checksum=checksum,
        )
        print(
            f"{form['form']}: function {form['function_ms']} ms in Spark, "
            f"{form['alone_ms']} ms alone, query {form['wall_ms']} ms",
            flush=True,
        )
    spark.stop()
    write_results(forms, n, args.repeats, copies, load_at_start, args.results)


def write_results(
    forms: list[dict[str, Any]],
    n: int,
    repeats: int,
    copies: dict,
    load_at_start: Any,
    results: Path = RESULTS,
) -> None:
    kernel = next(f for f in forms if f["form"].startswith("Arrow UDF, Mojo kernel ("))
    rows = []
    for f in forms:
        scale = 10_000_000 / n
        fn = None if f["function_ms"] is None else f["function_ms"] * scale
        alone = None if f["alone_ms"] is None else f["alone_ms"] * scale
        rows.append(
            {
                "form": f["form"],
                "function_alone_ms_per_10M": None if alone is None else round(alone, 1),
                "alone_vs_kernel": None
                if alone is None
                else round(f["alone_ms"] / kernel["alone_ms"], 2),
                "function_ms_per_10M": None if fn is None else round(fn, 1),
                "query_ms_per_10M": round(f["wall_ms"] * scale, 1),
                "copies_in": f["copies_in"],
                "copies_out": f["copies_out"],
                "function_vs_kernel": None
                if fn is None or not kernel["function_ms"]
                else round(f["function_ms"] / kernel["function_ms"], 2),
                "query_vs_kernel": round(f["wall_ms"] / kernel["wall_ms"], 2),
            }
        )
    meta = {
        "values": n,
        "load_average_at_start": load_at_start,
        "window": WINDOW,
        "repeats": repeats,
        "spark_master": "local[2]",
        "backend": ops.backend(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "pyspark_conversions_copies": copies,
        "quoted": QUOTED,
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / "udfs.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    load = ", ".join(f"{x:.1f}" for x in (load_at_start[0], meta["load_average_at_end"][0]))
    lines = [
        f"{n:,} float64 values, rolling sum over {WINDOW}, one partition, local[2], best of "
        f"{repeats}, {meta['backend']} backend; load average (start, end): {load}. "
        "ms per 10 M values; in brackets: against the Mojo Arrow UDF.",
        "",
        "| form | copies per value (in + out) | function alone, ms | function in Spark, ms "
        "| whole query, ms |",
        "|---|---|---:|---:|---:|",
    ]

    def cell(ms: float | None, ratio: float | None) -> str:
        return "–" if ms is None else f"{ms:,.0f} ({ratio:.1f}×)"

    for r in rows:
        lines.append(
            f"| {r['form']} | {r['copies_in']} + {r['copies_out']} "
            f"| {cell(r['function_alone_ms_per_10M'], r['alone_vs_kernel'])} "
            f"| {cell(r['function_ms_per_10M'], r['function_vs_kernel'])} "
            f"| {cell(r['query_ms_per_10M'], r['query_vs_kernel'])} |"
        )
    lines += ["", QUOTED, ""]
    (results / "udfs.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
