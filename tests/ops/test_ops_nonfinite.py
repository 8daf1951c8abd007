"""±inf in the values: IEEE (DuckDB) results per frame, on every kernel path.

A frame holding +inf sums and averages to +inf, -inf to -inf, both to NaN;
var/std of two or more values one of them infinite are NaN; min/max/first/last
and count_distinct take infinities as values. Once an infinity has left the
frame the frame's sums are finite and exact again, and one entity's
infinities never reach another entity's outputs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest
from test_ops_rolling import FIVE, STREAMED, assert_matches

import featureflow.ops as ops

INF = np.inf
SEQ = [1.0, INF, 2.0, -INF, 3.0, 4.0, 0.5, INF, -INF, INF, 0.25, 0.125, None, np.nan, 8.0, 1.5]
"""One key's values at ts 0, 3, 6, ...: with a window of 3 ns a frame is a row and
the key's row before it, so infinities enter and leave."""
DISTINCT = [*STREAMED, "count_distinct"]
FRAME_FUNCS: dict[str, Callable[[np.ndarray], float]] = {
    "count": len,
    "sum": np.sum,
    "mean": np.mean,
    "min": np.min,
    "max": np.max,
    "var": lambda f: float(np.var(f, ddof=1)),
    "std": lambda f: float(np.std(f, ddof=1)),
    "first": lambda f: f[0],
    "last": lambda f: f[-1],
    "count_distinct": lambda f: len(set(f.tolist())),
}
"""Each agg of one frame's non-null, non-NaN values in ts order: numpy's IEEE sums."""


def expected_frames(frames: list[list[float | None]], agg: str) -> list[float | None]:
    out: list[float | None] = []
    for frame in frames:
        f = np.array([v for v in frame if v is not None], dtype=np.float64)
        f = f[~np.isnan(f)]
        enough = len(f) > (1 if agg in ("var", "std") else 0) or agg.startswith("count")
        with np.errstate(invalid="ignore"):
            out.append(float(FRAME_FUNCS[agg](f)) if enough else None)
    return out


def same(got: list[float | None], want: list[float | None], what: str) -> None:
    """Equal element by element: None as null, NaN equal to NaN, exact otherwise
    (var/std: to 1e-12 relative, the kernels' and numpy's roundings differ)."""
    rel = 1e-12 if what.split()[-1] in ("var", "std") else 0.0
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if w is None or g is None:
            assert g is w, f"{what}[{i}]: got {g}, want {w}"
        elif w != w:
            assert g != g, f"{what}[{i}]: got {g}, want NaN"
        else:
            assert g == pytest.approx(w, rel=rel, abs=0.0), f"{what}[{i}]: got {g}, want {w}"


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    ("aggs", "inorder_span", "walk_rows"),
    [
        (DISTINCT, None, None),  # grouped by key (count_distinct)
        (STREAMED, None, None),  # streamed: per-key slots, unkeyed in place
        (FIVE, None, None),  # keyed in order: ring of recent rows
        (FIVE, 0, 10**6),  # bucketed: frames recomputed from the last 8 rows
        (FIVE, 0, 0),  # bucketed: expiry and min/max deques
    ],
)
def test_rolling_sums_are_ieee_and_exact_once_the_inf_has_left(
    keyed: bool,
    shuffled: bool,
    dtype: str,
    aggs: list[str],
    inorder_span: int | None,
    walk_rows: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """+inf in the frame: sum +inf; both: NaN; var NaN; after it left: finite and
    exact (the Mojo kernels gave NaN from there on). Every kernel path."""
    from featureflow.ops._mojo import planning

    if inorder_span is not None:
        monkeypatch.setattr(planning, "INORDER_MAX_SPAN", inorder_span)
    if walk_rows is not None:
        monkeypatch.setattr(planning, "WALK_ROWS", walk_rows)
    nkeys = 3 if keyed else 1
    n = len(SEQ)
    ts = np.array([3 * i + k for i in range(n) for k in range(nkeys)], dtype=np.int64)
    vals = [SEQ[(i + k) % n] for i in range(n) for k in range(nkeys)]  # keys differ
    key = np.array([k for _ in range(n) for k in range(nkeys)])
    order = np.random.default_rng(1).permutation(len(ts)) if shuffled else np.arange(len(ts))
    values = pa.array([vals[j] for j in order], pa.from_numpy_dtype(np.dtype(dtype)))
    table = ops.rolling(ts[order], values, 3, aggs, keys=key[order] if keyed else None)
    frames = [
        [vals[j] for j in range(len(ts)) if key[j] == key[i] and ts[i] - 3 <= ts[j] <= ts[i]]
        for i in order
    ]
    for agg in aggs:
        same(table[f"{agg}_3"].to_pylist(), expected_frames(frames, agg), agg)


def test_explicit_frames() -> None:
    """Frames of two rows: +inf enters, meets -inf, both leave (exact 7.0 and 4.1)."""
    ts = np.arange(7, dtype=np.int64)
    values = pa.array([1.0, INF, -INF, 2.0, 3.0, 4.0, 0.1])
    table = ops.rolling(ts, values, 1, ["sum", "mean", "var", "min", "max", "count"])
    same(table["sum_1"].to_pylist(), [1.0, INF, np.nan, -INF, 5.0, 7.0, 4.1], "sum")
    same(table["mean_1"].to_pylist(), [1.0, INF, np.nan, -INF, 2.5, 3.5, 2.05], "mean")
    var = [None, np.nan, np.nan, np.nan, 0.5, 0.5, float(np.var([4.0, 0.1], ddof=1))]
    same(table["var_1"].to_pylist(), var, "var")
    same(table["min_1"].to_pylist(), [1.0, 1.0, -INF, -INF, 2.0, 3.0, 0.1], "min")
    same(table["max_1"].to_pylist(), [1.0, INF, INF, 2.0, 3.0, 4.0, 4.0], "max")
    assert table["count_1"].to_pylist() == [1, 2, 2, 2, 2, 2, 2]


def test_a_lone_infinity_is_the_frame_and_has_no_variance() -> None:
    table = ops.rolling(np.array([0, 10]), pa.array([INF, None]), 1, ["sum", "std", "count"])
    assert table.to_pydict() == {"sum_1": [INF, None], "std_1": [None, None], "count_1": [1, 0]}


Call = Callable[[np.ndarray, pa.Array, np.ndarray], pa.Table]
CALLS: dict[str, Call] = {
    "rolling": lambda ts, v, k: ops.rolling(ts, v, ["5ns", "40ns"], list(ops.AGGS), keys=k),
    "rolling_five": lambda ts, v, k: ops.rolling(ts, v, ["5ns", "40ns"], FIVE, keys=k),
    "rolling_hop": lambda ts, v, k: ops.rolling(ts, v, 20, list(ops.AGGS), keys=k, hop=7),
    "hopping": lambda ts, v, k: ops.hopping(ts, v, 20, 5, list(ops.AGGS), keys=k),
    "sessions": lambda ts, v, k: ops.sessions(ts, v, 3, list(ops.AGGS), keys=k),
    "sessions_in_order": lambda ts, v, k: ops.sessions(ts, v, 3, FIVE, keys=k),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("shuffled", [False, True])
def test_one_keys_infinities_never_reach_another_key(call: str, shuffled: bool) -> None:
    """Key 1 (sorted first) holds ±inf; key 2's outputs equal those of key 2 alone
    (the numpy backend's prefix sums carried key 1's NaN into key 2)."""
    rng = np.random.default_rng(4)
    n = 400
    ts = np.sort(rng.integers(0, 2_000, n))
    keys = rng.integers(1, 3, n)
    raw = rng.normal(0, 10, n)
    one = keys == 1
    raw[one & (rng.random(n) < 0.3)] = INF
    raw[one & (rng.random(n) < 0.3)] = -INF
    order = rng.permutation(n) if shuffled else np.arange(n)
    ts, keys, raw = ts[order], keys[order], raw[order]
    both = CALLS[call](ts, pa.array(raw), keys)
    alone = CALLS[call](ts[~one[order]], pa.array(raw[~one[order]]), keys[~one[order]])
    if "key" in both.column_names:
        both = both.filter(pa.compute.equal(both["key"], 2))
    else:  # rolling: rows in input order
        both = both.filter(pa.array(keys == 2))
    assert both.num_rows == alone.num_rows
    for name in alone.column_names:
        assert_matches(both[name], alone[name], name)


def test_sessions_and_hopping_frames() -> None:
    ts = np.array([0, 1, 10, 11, 20, 21, 30], dtype=np.int64)
    values = pa.array([INF, 1.0, INF, -INF, 2.0, 0.5, -INF])
    ses = ops.sessions(ts, values, 2, ["sum", "mean", "var", "min", "max", "count_distinct"])
    same(ses["sum"].to_pylist(), [INF, np.nan, 2.5, -INF], "sum")
    same(ses["mean"].to_pylist(), [INF, np.nan, 1.25, -INF], "mean")
    same(ses["var"].to_pylist(), [np.nan, np.nan, 1.125, None], "var")
    same(ses["min"].to_pylist(), [1.0, -INF, 0.5, -INF], "min")
    same(ses["max"].to_pylist(), [INF, INF, 2.0, -INF], "max")
    assert ses["count_distinct"].to_pylist() == [2, 2, 2, 1]
    hop = ops.hopping(ts, values, 10, 10, ["sum", "std"])
    same(hop["sum"].to_pylist(), [INF, np.nan, 2.5, -INF], "hopping sum")
    same(hop["std"].to_pylist(), [np.nan, np.nan, float(np.sqrt(1.125)), None], "hopping std")
