"""Benchmark of the window kernels against DuckDB, Polars, pandas and Spark SQL.

10 M events, 100 k uniform keys, ts uniform over one day (in time order, as a
stream delivers them; ``--shuffle`` times unsorted input instead, written to
kernels_unsorted.*): rolling count/sum/mean/min/max over 1 h; the same over 10 min,
1 h and 24 h at once; sessions with a 30 min gap; and the unkeyed rolling sum
against a memcpy of its inputs and outputs (the physical limit). Prints a
markdown table (also bench/results/kernels.md), writes kernels.json and kernels.png.

Usage: .venv/bin/python bench/kernels.py [--events N] [--keys K] [--skip spark,pandas]
(run by ``make bench``, not by the tests).

A/B of featureflow's own tasks only, a commit against the working tree in one run:
``bench/kernels.py --ab REV [--backends mojo,numpy] [--repeats 5] [--calls 3]`` builds REV's
kernels in a temporary git worktree, then times both sides in turn (alternating
which goes first, each in a fresh process timing each task --calls times) and prints,
per task, the best and the median round on each side, their ratios (after / before)
and the peak memory of each side's calls (written to bench/results/kernels_ab.json).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
# `--worker SRC` times the featureflow found in SRC (the A/B's other side)
_SRC = sys.argv[sys.argv.index("--worker") + 1] if "--worker" in sys.argv else str(ROOT / "src")
sys.path.insert(0, _SRC)

import featureflow.ops as ops  # noqa: E402
from featureflow.ops import _backend  # noqa: E402

RESULTS = ROOT / "bench" / "results"
HOUR = 3_600 * 10**9
AGGS5 = ["count", "sum", "mean", "min", "max"]


def make_events(n: int, keys: int, shuffle: bool = False, seed: int = 42) -> pa.Table:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 24 * HOUR, n))
    if shuffle:
        ts = rng.permutation(ts)
    return pa.table(
        {
            "ts": ts,
            "k": rng.integers(0, keys, n),  # uniform keys, as the issue and the peers' figures
            "v": rng.gamma(2.0, 30.0, n),
        }
    )


def timed(fn: Callable[[], object], repeat: int = 2) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def featureflow(backend: str, ev: pa.Table) -> dict[str, Callable[[], object]]:
    def use() -> None:
        os.environ[_backend.ENV_VAR] = backend
        _backend.reset()

    ts, v, k = ev["ts"], ev["v"], ev["k"]

    def run(fn: Callable[[], object]) -> Callable[[], object]:
        return lambda: (use(), fn())

    return {
        "rolling 1h keyed": run(lambda: ops.rolling(ts, v, "1h", AGGS5, keys=k)),
        "rolling 10m+1h+24h keyed": run(
            lambda: ops.rolling(ts, v, ["10m", "1h", "1d"], AGGS5, keys=k)
        ),
        "sessions 30m keyed": run(
            lambda: ops.sessions(ts, v, "30m", ["count", "sum", "min", "max"], keys=k)
        ),
        "rolling sum 1h unkeyed": run(lambda: ops.rolling(ts, v, "1h", ["sum"])),
    }


def duckdb_tasks(ev: pa.Table) -> dict[str, Callable[[], object]]:
    con = duckdb.connect()
    con.register("ev", ev)

    def frame(w: int, keyed: bool = True) -> str:
        part = "PARTITION BY k " if keyed else ""
        return f"({part}ORDER BY ts RANGE BETWEEN {w} PRECEDING AND CURRENT ROW)"

    def five(w: int) -> str:
        f = frame(w)
        return (
            f"count(v) OVER {f}, sum(v) OVER {f}, avg(v) OVER {f}, min(v) OVER {f}, max(v) OVER {f}"
        )

    def q(sql: str) -> Callable[[], object]:
        return lambda: con.sql(sql).to_arrow_table()

    windows = [600 * 10**9, HOUR, 24 * HOUR]
    return {
        "rolling 1h keyed": q(f"SELECT {five(HOUR)} FROM ev"),
        "rolling 10m+1h+24h keyed": q("SELECT " + ", ".join(five(w) for w in windows) + " FROM ev"),
        "sessions 30m keyed": q(
            "WITH f AS (SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY k ORDER BY ts)"
            " <= 1800000000000 THEN 0 ELSE 1 END AS o FROM ev),"
            " s AS (SELECT *, sum(o) OVER (PARTITION BY k ORDER BY ts) sid FROM f) "
            "SELECT k, min(ts), max(ts), count(v), sum(v), min(v), max(v) FROM s GROUP BY k, sid"
        ),
        "rolling sum 1h unkeyed": q(f"SELECT sum(v) OVER {frame(HOUR, keyed=False)} FROM ev"),
    }


def polars_tasks(ev: pa.Table) -> dict[str, Callable[[], object]]:
    df = pl.from_arrow(ev).with_columns(pl.col("ts").cast(pl.Datetime("ns")))
    assert isinstance(df, pl.DataFrame)

    def five(w: str) -> list[pl.Expr]:
        return [
            getattr(pl.col("v"), f"rolling_{a}_by")("ts", window_size=w, closed="both")
            .over("k")
            .alias(f"{a}_{w}")
            for a in ("sum", "mean", "min", "max")
        ]

    return {
        "rolling 1h keyed": lambda: df.sort("k", "ts").select(five("1h")),
        "rolling 10m+1h+24h keyed": lambda: df.sort("k", "ts").select(
            five("10m") + five("1h") + five("1d")
        ),
        "rolling sum 1h unkeyed": lambda: df.select(
            pl.col("v").rolling_sum_by("ts", window_size="1h", closed="both")
        ),
    }


def pandas_tasks(ev: pa.Table) -> dict[str, Callable[[], object]]:
    df = ev.to_pandas()
    df["t"] = pd.to_datetime(df["ts"])
    # pandas' time rolling excludes later rows with an equal ts (not RANGE); close enough for speed
    return {
        "rolling 1h keyed": lambda: (
            df.set_index("t")
            .groupby("k")["v"]
            .rolling("1h", closed="both")
            .agg(["count", "sum", "mean", "min", "max"])
        ),
        "rolling sum 1h unkeyed": lambda: df.set_index("t")["v"].rolling("1h", closed="both").sum(),
    }


def spark_tasks(ev: pa.Table) -> dict[str, Callable[[], object]]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("featureflow-bench")
        .config("spark.driver.memory", "8g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    import tempfile

    import pyarrow.parquet as papq

    # not under a name starting with "_" or ".": Spark skips those files as hidden
    pq = Path(tempfile.mkdtemp(prefix="featureflow-bench-")) / "events.parquet"
    papq.write_table(ev, pq)
    df = spark.read.parquet(str(pq)).selectExpr(
        "k", "v", "ts", "timestamp_micros(ts div 1000) AS t"
    )
    df.cache().count()
    df.createOrReplaceTempView("ev")

    def five(w: int) -> str:
        f = f"(PARTITION BY k ORDER BY ts RANGE BETWEEN {w} PRECEDING AND CURRENT ROW)"
        return ", ".join(f"{a}(v) OVER {f}" for a in ("count", "sum", "avg", "min", "max"))

    def q(sql: str) -> Callable[[], object]:
        return lambda: spark.sql(sql).write.format("noop").mode("overwrite").save()

    return {
        "rolling 1h keyed": q(f"SELECT {five(HOUR)} FROM ev"),
        "sessions 30m keyed": q(
            "SELECT k, session_window(t, '30 minutes') sw, count(v), sum(v), min(v), max(v)"
            " FROM ev GROUP BY k, sw"
        ),
    }


def memcpy_limit(ev: pa.Table) -> dict[str, Callable[[], object]]:
    ts = ev["ts"].to_numpy()
    v = ev["v"].to_numpy()
    out_ts, out_v, out = np.empty_like(ts), np.empty_like(v), np.empty_like(v)

    def copy() -> None:  # read inputs and write one output column: the unkeyed sum's traffic
        np.copyto(out_ts, ts)
        np.copyto(out_v, v)
        np.copyto(out, v)

    return {"rolling sum 1h unkeyed": copy}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def peak_memory(fn: Callable[[], object], inputs: int) -> dict[str, float] | None:
    """Peak resident memory of one call, against its inputs plus outputs (Linux).

    The high-water mark is reset first (``/proc/self/clear_refs``) and memory the
    Arrow pool keeps for reuse is handed back, so the peak counts what the call
    itself touched on top of the inputs already resident.
    """
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    pa.default_memory_pool().release_unused()
    base = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    out = fn()
    extra = max(_status_kib("VmHWM") - base, 0) * 1024
    outputs = out.nbytes if isinstance(out, pa.Table) else 0
    return {
        "inputs_bytes": inputs,
        "outputs_bytes": outputs,
        "extra_peak_bytes": extra,
        "ratio": (inputs + extra) / max(inputs + outputs, 1),
    }


def worker(backends: list[str], events: int, keys: int, calls: int) -> int:
    """One side of an A/B: each task of each backend, best of `calls` after a warm-up,
    and the peak memory of the mojo calls, as one JSON line on stdout."""
    ev = make_events(events, keys)
    out: dict[str, dict[str, float]] = {}
    for backend in backends:
        for task, fn in featureflow(backend, ev).items():
            fn()  # warm-up (kernel load, pool pages)
            out.setdefault("seconds", {})[f"{backend} {task}"] = timed(fn, calls)
            if backend == "mojo":
                cols = ["ts", "v"] + ([] if "unkeyed" in task else ["k"])
                peak = peak_memory(lambda fn=fn: fn()[1], sum(ev[c].nbytes for c in cols))
                if peak is not None:
                    out.setdefault("peak_ratio", {})[f"{backend} {task}"] = peak["ratio"]
    print(json.dumps(out), flush=True)
    return 0


def build_before(rev: str, tree: Path) -> Path:
    """A worktree of `rev` with its kernels built by its own build script: its src/."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run([sys.executable, str(tree / "scripts" / "build_kernels.py"), "--force"],
                   check=True, cwd=tree)  # fmt: skip
    return tree / "src"


def ab(rev: str, backends: list[str], repeats: int, calls: int, events: int, keys: int) -> int:
    """Time featureflow's tasks at `rev` (before) and in this tree (after), alternating."""
    with tempfile.TemporaryDirectory(prefix="featureflow-ab-") as tmp:
        tree = Path(tmp) / "before"
        try:
            sides = {"before": build_before(rev, tree), "after": ROOT / "src"}
            runs: dict[str, list[dict[str, dict[str, float]]]] = {"before": [], "after": []}
            for r in range(repeats):
                for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    cmd = [sys.executable, __file__, "--worker", str(sides[side]),
                           "--backends", ",".join(backends), "--calls", str(calls),
                           "--events", str(events), "--keys", str(keys)]  # fmt: skip
                    line = subprocess.run(cmd, check=True, capture_output=True, text=True)
                    runs[side].append(json.loads(line.stdout.splitlines()[-1]))
                    print(f"round {r + 1}/{repeats} {side} done", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)  # fmt: skip
    best = {s: {t: min(run["seconds"][t] for run in rs) for t in rs[0]["seconds"]}
            for s, rs in runs.items()}  # fmt: skip
    # the median of the rounds too: a round that found the other core idle is an outlier
    median = {s: {t: float(np.median([run["seconds"][t] for run in rs])) for t in rs[0]["seconds"]}
              for s, rs in runs.items()}  # fmt: skip
    peak = {s: {t: max(run.get("peak_ratio", {}).get(t, 0.0) for run in rs)
                for t in rs[0].get("peak_ratio", {})} for s, rs in runs.items()}  # fmt: skip
    lines = [
        f"A/B, {events / 1e6:g} M events, {keys} keys, best of {repeats} x {calls} (before: {rev})",
        "",
        "| task | best before s | best after s | after/before | median before s "
        "| median after s | after/before | peak mem before | peak mem after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for task, before in best["before"].items():
        after = best["after"][task]
        mb, ma = median["before"][task], median["after"][task]
        pb, pa_ = peak["before"].get(task), peak["after"].get(task)
        mem = f"{pb:.2f}x | {pa_:.2f}x" if pb and pa_ else "- | -"
        lines.append(
            f"| {task} | {before:.3f} | {after:.3f} | {after / before:.3f} | {mb:.3f} "
            f"| {ma:.3f} | {ma / mb:.3f} | {mem} |"
        )
    print("\n".join(lines))
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"before": rev, "events": events, "keys": keys, "repeats": repeats,
              "load_average_1m_at_end": os.getloadavg()[0], "runs": runs}  # fmt: skip
    (RESULTS / "kernels_ab.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--skip", default="", help="comma-separated engines to skip")
    parser.add_argument("--shuffle", action="store_true", help="ts not in time order")
    parser.add_argument("--ab", metavar="REV", help="A/B: featureflow at REV against this tree")
    parser.add_argument("--backends", default="mojo", help="featureflow backends of --ab")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of --ab")
    parser.add_argument("--calls", type=int, default=3, help="timed calls a task a round")
    parser.add_argument("--worker", metavar="SRC", help=argparse.SUPPRESS)
    args = parser.parse_args()
    backends = args.backends.split(",")
    if args.worker:
        return worker(backends, args.events, args.keys, args.calls)
    if args.ab:
        return ab(args.ab, backends, args.repeats, args.calls, args.events, args.keys)
    skip = set(filter(None, args.skip.split(",")))
    RESULTS.mkdir(parents=True, exist_ok=True)
    ev = make_events(args.events, args.keys, args.shuffle)
    engines: dict[str, Callable[[pa.Table], dict[str, Callable[[], object]]]] = {
        "featureflow mojo": lambda e: featureflow("mojo", e),
        "featureflow numpy": lambda e: featureflow("numpy", e),
        "duckdb": duckdb_tasks,
        "polars": polars_tasks,
        "pandas": pandas_tasks,
        "spark": spark_tasks,
        "memcpy": memcpy_limit,
    }
    seconds: dict[str, dict[str, float]] = {}
    for engine, make in engines.items():
        if engine in skip or engine.split()[-1] in skip:
            continue
        tasks = make(ev)
        for task, fn in tasks.items():
            slow = ("spark", "pandas", "featureflow numpy", "duckdb")
            repeat = 1 if engine in slow else 3
            fn()  # warm-up (JIT, caches, kernel load)
            seconds.setdefault(task, {})[engine] = timed(fn, repeat)
            print(
                f"{engine:18s} {task:26s} {seconds[task][engine]:8.3f} s",
                file=sys.stderr,
                flush=True,
            )
    n = args.events
    peaks: dict[str, dict[str, float]] = {}
    if "mojo" not in skip:
        # peak memory of the mojo calls: (inputs + extra) / (inputs + outputs), target < 2
        for task, fn in featureflow("mojo", ev).items():
            cols = ["ts", "v"] + ([] if "unkeyed" in task else ["k"])
            peak = peak_memory(lambda fn=fn: fn()[1], sum(ev[c].nbytes for c in cols))
            if peak is not None:
                peaks[task] = peak
                print(
                    f"peak memory {task:26s} {peak['ratio']:.2f}x inputs+outputs "
                    f"(extra {peak['extra_peak_bytes'] / 2**20:.0f} MiB)",
                    file=sys.stderr,
                    flush=True,
                )
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    lines = [
        "| task | engine | seconds | M events/s | featureflow mojo speed-up |",
        "|---|---|---:|---:|---:|",
    ]
    for task, by_engine in seconds.items():
        ff = by_engine.get("featureflow mojo")
        for engine, s in sorted(by_engine.items(), key=lambda kv: kv[1]):
            ratio = f"{s / ff:.1f}x" if ff else "-"
            lines.append(f"| {task} | {engine} | {s:.3f} | {n / s / 1e6:.1f} | {ratio} |")
    print("\n".join(lines))
    report = {
        "events": n,
        "keys": args.keys,
        "keys_distribution": "uniform",
        "ts_in_order": not args.shuffle,
        "load_average_1m_at_end": os.getloadavg()[0],
        "seconds": seconds,
        "peak_rss_bytes": peak_rss,
        "featureflow_mojo_peak_memory": peaks,
        "backend_reason": ops.backend_reason(),
    }
    stem = "kernels_unsorted" if args.shuffle else "kernels"
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    chart(seconds, n, RESULTS / f"{stem}.png")
    return 0


def chart(seconds: dict[str, dict[str, float]], n: int, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart", file=sys.stderr)
        return
    tasks = list(seconds)
    engines = sorted({e for by in seconds.values() for e in by})
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.8 / len(engines)
    for i, engine in enumerate(engines):
        rates = [n / seconds[t][engine] / 1e6 if engine in seconds[t] else 0 for t in tasks]
        ax.bar([x + i * width for x in range(len(tasks))], rates, width, label=engine)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(tasks))], tasks)
    ax.set_yscale("log")
    ax.set_ylabel("M events/s (log)")
    ax.set_title(f"featureflow window kernels, {n / 1e6:.0f} M events")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
