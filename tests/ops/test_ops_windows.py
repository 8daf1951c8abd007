"""hopping() and sessions(): Spark semantics, differential against DuckDB."""

from __future__ import annotations

import numpy as np
import ops_oracle as oracle
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ops_strategies import Rows, rows
from test_ops_rolling import assert_matches, in_ts_order

import featureflow.ops as ops

ALL = list(ops.AGGS)
MIN = 60 * 10**9


def _bounds(table: pa.Table, start: str, end: str) -> list[tuple[int, int]]:
    s = table[start].cast(pa.int64()).to_pylist()
    e = table[end].cast(pa.int64()).to_pylist()
    return list(zip(s, e, strict=True))


def _keys(table: pa.Table) -> list[object]:
    return table["key"].to_pylist() if "key" in table.column_names else []


def test_session_end_is_inclusive_like_spark() -> None:
    ts = np.array([0, 10 * MIN, 19 * MIN + 59 * 10**9], dtype=np.int64)
    table = ops.sessions(ts, pa.array([1.0, 2.0, 3.0]), "10m", ["count", "sum"])
    assert _bounds(table, "session_start", "session_end") == [(0, 29 * MIN + 59 * 10**9)]
    assert table["count"].to_pylist() == [3]
    assert table.schema.field("session_start").type == pa.timestamp("ns", tz="UTC")


def test_hopping_row_falls_in_every_overlapping_window_like_spark() -> None:
    table = ops.hopping(np.array([0], dtype=np.int64), pa.array([1.0]), "10m", "5m", ["count"])
    assert _bounds(table, "window_start", "window_end") == [(-5 * MIN, 5 * MIN), (0, 10 * MIN)]


def test_sessions_drop_rows_with_non_positive_dynamic_gap() -> None:
    ts = np.array([0, 5, 100], dtype=np.int64)
    gaps = pa.array([10, -1, 0], pa.int64())
    table = ops.sessions(ts, pa.array([1, 2, 3], pa.int64()), gaps, ["count", "max"])
    assert _bounds(table, "session_start", "session_end") == [(0, 10)]
    assert table["max"].to_pylist() == [1]


@settings(max_examples=40, deadline=None)
@given(data=rows(), size=st.sampled_from([1, 3, 10, 1000]), step=st.sampled_from([1, 2, 7, 500]))
def test_hopping_matches_duckdb(data: Rows, size: int, step: int) -> None:
    table = ops.hopping(data.ts, data.values, size, step, ALL, keys=data.keys)
    expected = oracle.hopping(data.ts, data.values, size, step, ALL, data.keys)
    assert table.num_rows == expected.num_rows
    assert [s for s, _ in _bounds(table, "window_start", "window_end")] == expected[
        "ws"
    ].to_pylist()
    if data.keys is not None:
        assert _keys(table) == expected["k"].to_pylist()
    for agg in ALL:
        assert_matches(table[agg], expected[agg], agg)


def assert_sessions_match(
    table: pa.Table, expected: pa.Table, aggs: list[str], *, keyed: bool
) -> None:
    """``ops.sessions`` output equals the DuckDB oracle's: bounds, keys and every agg."""
    assert table.num_rows == expected.num_rows
    assert _bounds(table, "session_start", "session_end") == list(
        zip(expected["s"].to_pylist(), expected["e"].to_pylist(), strict=True)
    )
    if keyed:
        assert _keys(table) == expected["k"].to_pylist()
    for agg in aggs:
        assert_matches(table[agg], expected[agg], agg)


@settings(max_examples=40, deadline=None)
@given(data=rows(), gap=st.sampled_from([1, 3, 50, 10**5]), dynamic=st.booleans())
def test_sessions_match_duckdb(data: Rows, gap: int, dynamic: bool) -> None:
    n = len(data.ts)
    gaps = np.random.default_rng(n).integers(-2, 2 * gap, n) if dynamic else np.full(n, gap)
    arg = pa.array(gaps) if dynamic else gap
    table = ops.sessions(data.ts, data.values, arg, ALL, keys=data.keys)
    expected = oracle.sessions(data.ts, data.values, gaps, ALL, data.keys)
    assert_sessions_match(table, expected, ALL, keyed=data.keys is not None)


@settings(max_examples=40, deadline=None)
@given(data=rows(), gap=st.sampled_from([1, 3, 50, 10**5]), dynamic=st.booleans())
def test_sessions_without_count_distinct_match_duckdb(data: Rows, gap: int, dynamic: bool) -> None:
    """Without count_distinct the kernel aggregates each session directly."""
    aggs = [a for a in ALL if a != "count_distinct"]
    n = len(data.ts)
    gaps = np.random.default_rng(n).integers(-2, 2 * gap, n) if dynamic else np.full(n, gap)
    arg = pa.array(gaps) if dynamic else gap
    table = ops.sessions(data.ts, data.values, arg, aggs, keys=data.keys)
    expected = oracle.sessions(data.ts, data.values, gaps, aggs, data.keys)
    assert_sessions_match(table, expected, aggs, keyed=data.keys is not None)


def test_empty_inputs_have_the_schema() -> None:
    empty_ts = np.array([], dtype=np.int64)
    hop = ops.hopping(
        empty_ts,
        pa.array([], pa.float32()),
        "1h",
        "10m",
        ["min", "count"],
        keys=pa.array([], pa.int64()),
    )
    assert hop.schema.names == ["key", "window_start", "window_end", "min", "count"]
    assert hop.schema.field("min").type == pa.float32()
    ses = ops.sessions(empty_ts, pa.array([], pa.float64()), "30m", ["sum"])
    assert ses.num_rows == 0
    assert ses.schema.names == ["session_start", "session_end", "sum"]


IN_ORDER_AGGS = ["count", "sum", "mean", "min", "max", "first", "last"]


@settings(max_examples=80, deadline=None)
@given(
    data=rows(),
    gap=st.sampled_from([1, 3, 50, 10**5]),
    aggs=st.lists(st.sampled_from(IN_ORDER_AGGS), min_size=1, max_size=7, unique=True),
    grouped=st.booleans(),
    by_close=st.booleans(),
    max_length=st.none() | st.sampled_from([1, 2, 7, 60, 10**4, 10**6]),
)
def test_sessions_over_ts_ordered_input_match_duckdb(
    data: Rows, gap: int, aggs: list[str], grouped: bool, by_close: bool, max_length: int | None
) -> None:
    """Keyed input in ts order with a fixed gap and no std/var/count_distinct takes
    an in-order sessions pass over per-key states, no grouping copy: without
    first/last (`by_close`) one pass writes sessions as they close, then sorts
    them by key; with first or last, two passes (count each key's sessions, then
    aggregate into its slots). `grouped` forces the grouping path (its scratch is
    the only one offered). ``max_length``: sessions capped at that length (ns), or
    not at all (None)."""
    from featureflow.ops._mojo import NativeBackend

    ends = ("first", "last")
    if by_close:
        aggs = [a for a in aggs if a not in ends] or ["min"]
    elif not set(ends) & set(aggs):
        aggs = [*aggs, "last"]
    data = in_ts_order(data)
    n = len(data.ts)
    with pytest.MonkeyPatch.context() as mp:
        if grouped:
            scratch = NativeBackend._scratch

            def no_in_order(self: NativeBackend, kind: str, *sizes: int) -> int:
                return 0 if kind == "sessions_in_order" else scratch(self, kind, *sizes)

            mp.setattr(NativeBackend, "_scratch", no_in_order)
        table = ops.sessions(data.ts, data.values, gap, aggs, keys=data.keys, max_length=max_length)
    expected = oracle.sessions(data.ts, data.values, np.full(n, gap), aggs, data.keys, max_length)
    assert_sessions_match(table, expected, aggs, keyed=data.keys is not None)
