"""rolling_at(), merge_runs() and run_segments(): frames at query points over runs, against DuckDB.

The rows arrive in order and are cut into runs (each sorted by key then ts,
stably); DuckDB sees the rows in arrival order plus one NULL row per query at
its (key, t), so its window at that row is the query's frame (a NULL is in no
aggregate). Queries sit at rows, between rows, before and after every row and
at keys without rows; values hold ties, nulls, NaN and ±inf (ops_strategies).
"""

from __future__ import annotations

import itertools

import numpy as np
import ops_oracle as oracle
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ops_strategies import Rows, rows
from test_ops_rolling import assert_matches

import featureflow.ops as ops
from featureflow.ops import _query
from featureflow.ops._backend import current

ALL = list(ops.AGGS)


def int_keys(data: Rows) -> np.ndarray:
    """The rows' keys as int64 codes (string keys encoded; no keys: one key 0)."""
    if data.keys is None:
        return np.zeros(len(data.ts), dtype=np.int64)
    if pa.types.is_string(data.keys.type):
        return np.asarray(data.keys.dictionary_encode().indices.to_numpy()).astype(np.int64)
    return np.asarray(data.keys.to_numpy()).astype(np.int64)


def as_runs(keys: np.ndarray, data: Rows, cuts: list[int]) -> list[tuple[object, object, object]]:
    """Rows in arrival order cut at ``cuts``, each piece sorted by (key, ts) stably."""
    bounds = [0, *sorted({min(c, len(keys)) for c in cuts}), len(keys)]
    runs = []
    for a, b in itertools.pairwise(bounds):
        order = a + np.lexsort((data.ts[a:b], keys[a:b]))
        runs.append((keys[order], data.ts[order], data.values.take(pa.array(order))))
    return runs


def oracle_at(
    keys: np.ndarray, data: Rows, at_keys: np.ndarray, at_ts: np.ndarray, window: int,
    aggs: list[str], hop: int | None = None,
) -> dict[str, pa.ChunkedArray]:  # fmt: skip
    """DuckDB's frames at the queries: the rows plus a NULL row per query, last."""
    ts = np.concatenate([data.ts, at_ts]).astype(np.int64)
    values = pa.concat_arrays([data.values, pa.nulls(len(at_ts), data.values.type)])
    all_keys = pa.array(np.concatenate([keys, at_keys]).astype(np.int64))
    full = oracle.rolling(ts, values, window, aggs, all_keys, hop)
    return {a: full[a].slice(len(data.ts)) for a in aggs}


@st.composite
def queries(draw: st.DrawFn, keys: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Query points: some rows' (key, ts), and (key, t) pairs anywhere."""
    at_rows = draw(st.lists(st.integers(0, max(len(ts) - 1, 0)), max_size=20)) if len(ts) else []
    spread = st.integers(-5, int(ts.max()) + 5 if len(ts) else 5)
    free = draw(st.lists(st.tuples(st.integers(-1, 51), spread), max_size=10))
    at_keys = np.array([keys[r] for r in at_rows] + [k for k, _ in free], dtype=np.int64)
    at_ts = np.array([ts[r] for r in at_rows] + [t for _, t in free], dtype=np.int64)
    return at_keys, at_ts


@settings(max_examples=80, deadline=None)
@given(
    data=rows(),
    cuts=st.lists(st.integers(0, 60), max_size=3),
    window=st.sampled_from([1, 2, 50, 10**4, 2**61]),
    hop=st.sampled_from([None, None, 3]),
    draw=st.data(),
)
def test_matches_duckdb_at_any_query(
    data: Rows, cuts: list[int], window: int, hop: int | None, draw: st.DataObject
) -> None:
    keys = int_keys(data)
    at_keys, at_ts = draw.draw(queries(keys, data.ts))
    got = ops.rolling_at(as_runs(keys, data, cuts), window, ALL, at_keys, at_ts, hop=hop)
    assert got.num_rows == len(at_ts)
    expected = oracle_at(keys, data, at_keys, at_ts, window, ALL, hop)
    for agg in ALL:
        assert_matches(got[f"{agg}_{window}"], expected[agg], agg)


@settings(max_examples=60, deadline=None)
@given(
    data=rows(),
    cuts=st.lists(st.integers(0, 60), max_size=3),
    pieces=st.integers(1, 7),
    draw=st.data(),
)
def test_queries_in_sorted_pieces_match_duckdb(
    data: Rows, cuts: list[int], pieces: int, draw: st.DataObject
) -> None:
    """Queries that come as a few pieces, each sorted by (key, t), as the stream job's do
    (new events by entity, then each entity's latest): up to `SEQUENTIAL_PIECES` pieces
    the kernels write each output at its query's row, beyond it in sorted order and one
    gather puts them back; both give DuckDB's frames in the caller's order."""
    keys = int_keys(data)
    at_keys, at_ts = draw.draw(queries(keys, data.ts))
    bounds = sorted(draw.draw(st.lists(st.integers(0, len(at_ts)), min_size=pieces - 1,
                                       max_size=pieces - 1)))  # fmt: skip
    order = np.concatenate([a + np.lexsort((at_ts[a:b], at_keys[a:b]))
                            for a, b in itertools.pairwise([0, *bounds, len(at_ts)])])  # fmt: skip
    at_keys, at_ts = at_keys[order], at_ts[order]
    runs = as_runs(keys, data, cuts)
    got = ops.rolling_at(runs, 50, ALL, at_keys, at_ts)
    expected = oracle_at(keys, data, at_keys, at_ts, 50, ALL)
    for agg in ALL:
        assert_matches(got[f"{agg}_50"], expected[agg], agg)
    def no_segments(run_keys: np.ndarray, group: np.ndarray) -> np.ndarray:
        return np.zeros((len(group), 2), np.int64)

    parsed = [_query.Run(k, t, v) for k, t, v in runs]
    plan = _query.plan(parsed, at_keys, at_ts, no_segments, current().backend.merge_runs)
    points = list(zip(at_keys.tolist(), at_ts.tolist(), strict=True))
    found = 1 + sum(later < earlier for earlier, later in itertools.pairwise(points))
    assert found <= pieces
    assert (plan.qout is plan.order) == (found <= _query.SEQUENTIAL_PIECES)
    # merged pieces or a lexsort: the stable (key, t) order either way
    assert plan.order.tolist() == np.lexsort((at_ts, at_keys)).tolist()
    assert _query.plan(parsed, at_keys, at_ts, no_segments).order.tolist() == plan.order.tolist()


@settings(max_examples=40, deadline=None)
@given(data=rows(max_rows=80), cuts=st.lists(st.integers(0, 80), max_size=4))
def test_equals_rolling_at_its_rows_for_several_windows(data: Rows, cuts: list[int]) -> None:
    """At every row, the frames `rolling` gives that row, all windows in one call."""
    keys = int_keys(data)
    windows = [1, 50, 10**4]
    got = ops.rolling_at(as_runs(keys, data, cuts), windows, ALL, keys, data.ts)
    want = ops.rolling(data.ts, data.values, windows, ALL, keys=pa.array(keys))
    for name in want.column_names:
        assert_matches(got[name], want[name], name.split("_")[0])


def test_a_late_row_in_a_newer_run_enters_an_older_rows_frame() -> None:
    """Out of order across runs: the newest run holds a row older than the first run's
    latest row, whose frame (queried at its time) must now hold it; equal times
    across runs are peers (RANGE frames)."""
    old = (np.array([7, 7]), np.array([100, 200]), pa.array([1.0, 2.0]))
    new = (np.array([7, 7]), np.array([150, 200]), pa.array([10.0, 20.0]))
    got = ops.rolling_at([old, new], 1000, ["count", "sum", "first", "last"], [7, 7], [200, 150])
    assert got["count_1000"].to_pylist() == [4, 2]
    assert got["sum_1000"].to_pylist() == [33.0, 11.0]
    assert got["first_1000"].to_pylist() == [1.0, 1.0]
    assert got["last_1000"].to_pylist() == [20.0, 10.0]  # ties at 200: the newer run last


def test_rejects_string_keys_and_mixed_value_types() -> None:
    with pytest.raises(TypeError, match="integers"):
        ops.rolling_at([(pa.array(["a"]), [1], pa.array([1.0]))], 10, ["sum"], [0], [1])
    runs = [([1], [1], pa.array([1.0])), ([1], [2], pa.array([1], pa.int64()))]
    with pytest.raises(TypeError, match="one type"):
        ops.rolling_at(runs, 10, ["sum"], [1], [1])


def test_no_runs_and_no_queries() -> None:
    assert ops.rolling_at([], 10, ["count", "sum"], [1], [5]).to_pylist() == [
        {"count_10": 0, "sum_10": None}
    ]
    assert ops.rolling_at([([1], [1], pa.array([1.0]))], 10, ["sum"], [], []).num_rows == 0


@settings(max_examples=60, deadline=None)
@given(
    data=rows(dtypes=("float64",)),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    cut_ns=st.integers(-1, 10**6),
)
def test_merge_runs_is_a_stable_sort_without_the_rows_before_the_cut(
    data: Rows, cuts: list[int], cut_ns: int
) -> None:
    keys = int_keys(data)
    runs = as_runs(keys, data, cuts)
    merged = ops.merge_runs([(k, t) for k, t, _ in runs], cut_ns)
    all_keys = np.concatenate([np.asarray(k) for k, _, _ in runs] or [np.zeros(0, np.int64)])
    all_ts = np.concatenate([np.asarray(t) for _, t, _ in runs] or [np.zeros(0, np.int64)])
    order = np.lexsort((all_ts, all_keys))
    np.testing.assert_array_equal(merged, order[all_ts[order] >= cut_ns])


INT64 = st.one_of(st.sampled_from([-(2**63), 2**63 - 1]), st.integers(-(2**63), 2**63 - 1))
"""Any int64, its limits often (the searches' edge cases)."""


@settings(max_examples=80, deadline=None)
@given(
    run_keys=st.lists(st.one_of(st.integers(-5, 5), INT64), max_size=60),
    asked=st.lists(st.one_of(st.integers(-6, 6), INT64), max_size=30),
    ascending=st.booleans(),
)
def test_run_segments_are_each_keys_rows_in_the_run(
    run_keys: list[int], asked: list[int], ascending: bool
) -> None:
    """Against numpy's binary searches: keys present, absent, below and above every
    row, repeated, at the int64 limits; asked in ascending order (the one pass) or not
    (a key below its predecessor starts again)."""
    run = np.sort(np.array(run_keys, dtype=np.int64))
    keys = np.array(sorted(asked) if ascending else asked, dtype=np.int64)
    got = ops.run_segments(run, keys)
    assert got.shape == (len(keys), 2)
    np.testing.assert_array_equal(got[:, 0], np.searchsorted(run, keys, side="left"))
    np.testing.assert_array_equal(got[:, 1], np.searchsorted(run, keys, side="right"))
