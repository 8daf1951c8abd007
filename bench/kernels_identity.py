"""Bit-identity check of the Mojo kernels: every path's outputs at a commit against this tree.

"Change no algorithm while moving code" (#17): a refactoring of mojo_ops/ must give the
same bits. The worker calls every kernel path on the mojo backend — rolling (RANGE and
sawtooth frames; the in-order ring, bucketed with walks and with deques, per-key slots,
unkeyed stream, grouped for shuffled input, count_distinct), rolling_at, hopping and
sessions (in-order with first/last, by close, grouped, capped); keyed and unkeyed,
sorted and shuffled, one and two threads, four value types with nulls, NaN and ±inf —
forcing each path through the thresholds of `featureflow.ops._mojo.planning`, and saves
every output column (values and validity) to one .npz. The driver builds REV's kernels
in a temporary worktree (as `bench/kernels.py --ab` does), runs the worker on both
sides and compares the arrays byte for byte.

Usage: .venv/bin/python bench/kernels_identity.py REV   (exit 1 when any array differs)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
SEC = 10**9
AGGS = ["count", "sum", "mean", "min", "max", "std", "var", "first", "last"]
AGG_SETS = [
    ["count", "sum", "mean", "min", "max"],  # in-order ring / bucketed
    AGGS,  # regions / slots / unkeyed stream
    ["sum"],
    ["min", "max", "last"],
    ["first", "std"],
    ["count_distinct", "sum"],  # generic
]
SESSION_AGGS = [
    AGGS,  # grouped
    ["count", "sum", "mean", "min", "max"],  # in order, written as they close
    ["count", "sum", "mean", "min", "max", "first", "last"],  # in order, two passes
    ["last", "sum"],
    ["count_distinct", "std", "last"],  # generic
]
TYPES = [pa.float64(), pa.float32(), pa.int64(), pa.int32()]


def values(rng: np.random.Generator, n: int, typ: pa.DataType, nonfinite: bool) -> pa.Array:
    v = np.round(rng.normal(0, 1000, n) * rng.choice([1e-3, 1.0, 1e6], n), 3)
    if pa.types.is_integer(typ):
        arr = pa.array(v.astype(np.int64) % 100_000, mask=rng.random(n) < 0.05).cast(typ)
        return arr
    if nonfinite:
        v[rng.random(n) < 0.01] = np.nan
        v[rng.random(n) < 0.002] = np.inf
        v[rng.random(n) < 0.002] = -np.inf
    return pa.array(v, mask=rng.random(n) < 0.05).cast(typ)


def cases() -> Iterator[tuple[str, dict[str, object]]]:
    """(name, call) for every path; a call names the ops function and its arguments."""
    rng = np.random.default_rng(17)
    n, nkeys = 30_000, 150
    ts_sorted = np.sort(rng.integers(0, 3_000 * SEC, n))
    ts_sorted[rng.random(n) < 0.05] = ts_sorted[0]  # ties
    ts_sorted.sort()
    keys = rng.integers(0, nkeys, n)
    perm = rng.permutation(n)
    for typ in TYPES:
        for nonfinite in (False, True) if pa.types.is_floating(typ) else (False,):
            v = values(rng, n, typ, nonfinite)
            for order in ("sorted", "shuffled"):
                ts = ts_sorted if order == "sorted" else ts_sorted[perm]
                vv = v if order == "sorted" else v.take(pa.array(perm))
                for keyed in (True, False):
                    k = keys if keyed else None
                    tag = f"{typ}-{'nf' if nonfinite else 'f'}-{order}-{'k' if keyed else 'u'}"
                    base = {"ts": ts, "values": vv, "keys": k}
                    for a, aggs in enumerate(AGG_SETS):
                        for hop in (None, "7s"):
                            yield f"rolling-{tag}-a{a}-h{hop}", {
                                "fn": "rolling", **base, "windows": ["10s", "100s", "1000s"],
                                "aggs": aggs, "hop": hop,
                            }  # fmt: skip
                    yield f"hopping-{tag}", {"fn": "hopping", **base, "size": "60s",
                                             "step": "20s", "aggs": AGGS}  # fmt: skip
                    for s, aggs in enumerate(SESSION_AGGS):
                        for cap in (None, "200s"):
                            yield f"sessions-{tag}-a{s}-c{cap}", {
                                "fn": "sessions", **base, "gap": "30s", "aggs": aggs,
                                "max_length": cap,
                            }  # fmt: skip
            # rolling_at over two runs sorted by (key, ts)
            by_key = np.lexsort((ts_sorted, keys))
            half = n // 2
            runs = [
                (keys[rows], ts_sorted[rows], v.take(pa.array(rows)))
                for rows in (by_key[:half], by_key[half:])
            ]
            at_keys = rng.integers(0, nkeys, 2_000)
            at_ts = rng.integers(0, 3_000 * SEC, 2_000)
            for a, aggs in enumerate(AGG_SETS[:5]):
                for hop in (None, "7s"):
                    yield f"rolling_at-{typ}-{nonfinite}-a{a}-h{hop}", {
                        "fn": "rolling_at", "runs": runs, "windows": ["10s", "100s", "1000s"],
                        "aggs": aggs, "at_keys": at_keys, "at_ts": at_ts, "hop": hop,
                    }  # fmt: skip


# (name, parts, INORDER_MAX_SPAN, WALK_ROWS): the planning settings that force each path
PLANS = [("default", None, None, None), ("p1", 1, None, None), ("p2", 2, None, None),
         ("bucket-walk", 2, 0, 16), ("bucket-deque", 1, 0, 0),
         ("bucket-walk1", 1, 0, 1 << 20)]  # fmt: skip


def dump(src: str, out: str) -> int:
    sys.path.insert(0, src)
    os.environ["FEATUREFLOW_BACKEND"] = "mojo"
    import featureflow.ops as ops
    from featureflow.ops._mojo import planning

    assert ops.backend() == "mojo", ops.backend_reason()
    default_parts = planning.parts
    arrays: dict[str, np.ndarray] = {}
    for plan, parts, span, walk in PLANS:
        planning.parts = default_parts if parts is None else (lambda rows, p=parts: p)
        planning.INORDER_MAX_SPAN = 1 << 19 if span is None else span
        planning.WALK_ROWS = 16 if walk is None else walk
        for name, call in cases():
            if plan != "default" and call["fn"] not in ("rolling", "rolling_at"):
                continue
            args = {k: v for k, v in call.items() if k != "fn"}
            table = getattr(ops, str(call["fn"]))(**args)
            for col in table.column_names:
                arr = table[col].combine_chunks()
                for i, buf in enumerate(arr.buffers()):
                    if buf is not None:
                        arrays[f"{plan}/{name}/{col}/{i}"] = np.frombuffer(buf, np.uint8).copy()
                meta = [len(arr), arr.offset, arr.null_count]
                arrays[f"{plan}/{name}/{col}/meta"] = np.array(meta)
    np.savez(out, **arrays)  # type: ignore[arg-type]
    print(f"{len(arrays)} arrays", file=sys.stderr)
    return 0


def compare(rev: str) -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    from kernels import build_before  # the --ab worktree build: one way to build a side

    with tempfile.TemporaryDirectory(prefix="featureflow-ident-") as tmp:
        tree = Path(tmp) / "before"
        try:
            sides = {"before": build_before(rev, tree), "after": ROOT / "src"}
            files = {}
            for side, src in sides.items():
                files[side] = Path(tmp) / f"{side}.npz"
                subprocess.run([sys.executable, __file__, "--dump", str(src), str(files[side])],
                               check=True)  # fmt: skip
            before, after = np.load(files["before"]), np.load(files["after"])
            differ = [k for k in before.files if k not in after.files
                      or before[k].tobytes() != after[k].tobytes()]  # fmt: skip
            differ += [k for k in after.files if k not in before.files]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)  # fmt: skip
    print(f"{len(before.files)} arrays before, {len(after.files)} after, {len(differ)} differ"
          f" (before: {rev})")  # fmt: skip
    for k in differ[:20]:
        print("  differs:", k)
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", nargs="?", help="the commit to compare this tree against")
    parser.add_argument("--dump", nargs=2, metavar=("SRC", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dump:
        return dump(*args.dump)
    if not args.rev:
        parser.error("give a REV")
    return compare(args.rev)


if __name__ == "__main__":
    raise SystemExit(main())
