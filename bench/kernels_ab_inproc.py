"""A/B of two kernel builds in one process: REV's library and this tree's, loaded side by side.

On the shared 2-core machine the wall-clock A/B of `bench/kernels.py --ab` (fresh processes,
alternating) moves by 5-40 % between rounds with the other engineers' load; a code change of
a few percent hides in it. Here both libraries are loaded into one process (each is its own
extension module object; the Python side is this tree's), and the calls alternate A, B, B, A,
... on the same inputs, each timed in wall-clock and in CPU time of the calling thread
(`time.thread_time`: the single-threaded kernels' work, without the time spent waiting for a
core). Prints, per task, the median over the rounds of B/A of each pair and the ratio of the
fastest calls. An A/A run (REV = HEAD with an unchanged tree) measured 0.97-1.00 (median of
pairs) and 0.997-1.004 (fastest calls) in CPU time at load average 6-8.

Usage: .venv/bin/python bench/kernels_ab_inproc.py REV [--tasks by_close,in_order] [--rounds 20]
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import featureflow.ops as ops  # noqa: E402
from featureflow.ops import _backend, _mojo  # noqa: E402
from featureflow.ops._mojo import loader, planning  # noqa: E402

HOUR = 3_600 * 10**9
AGGS5 = ["count", "sum", "mean", "min", "max"]
AGGS9 = [*AGGS5, "std", "var", "first", "last"]


def forced(
    fn: Callable[[], object], span: int | None = None, walk: int | None = None
) -> Callable[[], object]:
    """`fn` on one thread (the calling one, whose CPU time is measured), its rolling
    path forced through `planning`'s thresholds as tests/ops do (span: the in-order
    ring's limit, 0 for the bucketed path; walk: the bucketed path's WALK_ROWS)."""

    def call() -> object:
        saved = (planning.parts, planning.INORDER_MAX_SPAN, planning.WALK_ROWS)
        planning.parts = lambda rows: 1
        planning.INORDER_MAX_SPAN = saved[1] if span is None else span
        planning.WALK_ROWS = saved[2] if walk is None else walk
        try:
            return fn()
        finally:
            planning.parts, planning.INORDER_MAX_SPAN, planning.WALK_ROWS = saved

    return call


def load_library(native: Path) -> _backend.Choice:
    """The kernels in `native` (a _native/ directory) as a backend choice, unchecked."""
    for lib in loader.RUNTIME_LIBS:
        ctypes.CDLL(str(native / lib), mode=ctypes.RTLD_GLOBAL)
    path = native / "kernels.so"
    ext = importlib.machinery.ExtensionFileLoader(loader.MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(loader.MODULE_NAME, path, loader=ext)
    assert spec is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    ext.exec_module(module)
    loader._restore_environment()
    return _backend.Choice(_mojo.NativeBackend(module), str(path), str(path))


def tasks(n: int, keys: int) -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(42)
    ts = pa.array(np.sort(rng.integers(0, 24 * HOUR, n)))
    v = pa.array(rng.normal(100, 30, n))
    k = pa.array(rng.integers(0, keys, n))
    shuffle = pa.array(rng.permutation(n))
    ts_s, v_s, k_s = ts.take(shuffle), v.take(shuffle), k.take(shuffle)
    by_key = pa.array(np.lexsort((ts.to_numpy(), k.to_numpy())))
    run = (k.take(by_key), ts.take(by_key), v.take(by_key))  # the stream job's state layout
    return {
        "by_close": lambda: ops.sessions(ts, v, "30m", ["count", "sum", "min", "max"], keys=k),
        "in_order": lambda: ops.sessions(ts, v, "30m", [*AGGS5, "first", "last"], keys=k),
        "grouped": lambda: ops.sessions(ts, v, "30m", ["count", "sum", "std"], keys=k),
        "rolling_1h": lambda: ops.rolling(ts, v, "1h", AGGS5, keys=k),
        "rolling_3w": lambda: ops.rolling(ts, v, ["10m", "1h", "1d"], AGGS5, keys=k),
        "unkeyed_sum": lambda: ops.rolling(ts, v, "1h", ["sum"]),
        "hopping": lambda: ops.hopping(ts, v, "1h", "20m", AGGS5, keys=k),
        # frames at every row over one run (rolling/_query's walk, Sliding): only
        # against a build of the same ABI (its descriptor grew in ABI 4)
        "query": lambda: ops.rolling_at([run], ["10m", "1h", "1d"], AGGS5, k, ts),
        "distinct": lambda: ops.rolling(ts, v, "1h", ["count_distinct"], keys=k),
        # one rolling path each, on one thread
        "inorder": forced(lambda: ops.rolling(ts, v, ["10m", "1h"], AGGS5, keys=k)),
        "inorder_sum": forced(lambda: ops.rolling(ts, v, "1h", ["count", "sum", "mean"], keys=k)),
        "region": forced(lambda: ops.rolling(ts, v, "1h", AGGS9, keys=k)),
        "stream": forced(lambda: ops.rolling(ts, v, "1h", AGGS9)),
        "stream_sum": forced(lambda: ops.rolling(ts, v, "1h", ["count", "sum", "mean"])),
        "bucketed": forced(lambda: ops.rolling(ts, v, "1h", AGGS5, keys=k), span=0, walk=0),
        "slots": forced(lambda: ops.rolling(ts, v, "1h", AGGS5, keys=k), span=0, walk=16),
        "rolling_grouped": forced(lambda: ops.rolling(ts_s, v_s, "1h", AGGS9, keys=k_s)),
        "rolling_grouped_3w": forced(
            lambda: ops.rolling(ts_s, v_s, ["10m", "1h", "1d"], AGGS9, keys=k_s)
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev")
    parser.add_argument("--tasks", default="by_close,in_order,grouped")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    args = parser.parse_args()
    from kernels import build_before  # the --ab worktree build: one way to build a side

    with tempfile.TemporaryDirectory(prefix="featureflow-abi-") as tmp:
        tree = Path(tmp) / "before"
        try:
            before = build_before(args.rev, tree)
            sides = {
                "A": load_library(before / "featureflow" / "ops" / "_native"),
                "B": load_library(loader.NATIVE_DIR),
            }
        finally:
            import subprocess

            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)  # fmt: skip
    os.environ[_backend.ENV_VAR] = "mojo"
    calls = tasks(args.events, args.keys)
    print(f"A = {args.rev}, B = this tree; {args.events} events, {args.keys} keys, "
          f"{args.rounds} rounds")  # fmt: skip
    for name in args.tasks.split(","):
        fn = calls[name]

        def timed(side: str, fn: Callable[[], object] = fn) -> tuple[float, float]:
            _backend._choice = sides[side]
            c0, w0 = time.thread_time(), time.perf_counter()
            fn()
            return time.perf_counter() - w0, time.thread_time() - c0

        timed("A")  # warm-up
        timed("B")
        runs: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
        for r in range(args.rounds):
            for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
                runs[side].append(timed(side))
        wall = {s: np.array([x[0] for x in rs]) for s, rs in runs.items()}
        cpu = {s: np.array([x[1] for x in rs]) for s, rs in runs.items()}
        wa, wb, ca, cb = wall["A"], wall["B"], cpu["A"], cpu["B"]
        print(
            f"{name:12s} cpu A {ca.min():.4f} s B {cb.min():.4f} s: B/A median of pairs "
            f"{np.median(cb / ca):.3f}, fastest {cb.min() / ca.min():.3f} | wall B/A median "
            f"of pairs {np.median(wb / wa):.3f}, fastest {wb.min() / wa.min():.3f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
