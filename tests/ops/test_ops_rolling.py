"""rolling(): differential against DuckDB window functions, plus the edge cases."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import ops_oracle as oracle
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ops_strategies import Rows, rows

import featureflow.ops as ops

ALL = list(ops.AGGS)


def assert_matches(
    actual: pa.ChunkedArray | pa.Array, expected: pa.ChunkedArray | pa.Array, agg: str
) -> None:
    """Same nulls, then the same NaN, the same infinities (with sign) and close
    finite values at the non-null rows."""
    got_null = actual.is_null().to_numpy(zero_copy_only=False)
    want_null = expected.is_null().to_numpy(zero_copy_only=False)
    np.testing.assert_array_equal(got_null, want_null, err_msg=f"{agg}: nulls differ")
    valid = ~got_null
    got = np.asarray(actual.to_numpy(zero_copy_only=False), dtype=np.float64)[valid]
    want = np.asarray(expected.to_numpy(zero_copy_only=False), dtype=np.float64)[valid]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{agg}: NaN differ")
    tol = 1e-6 if agg in ("std", "var") else 1e-9  # DuckDB's own var is the looser one
    np.testing.assert_allclose(got, want, rtol=tol, atol=1e-6, equal_nan=True, err_msg=agg)


def assert_windows_match(data: Rows, windows: list[int], aggs: list[str]) -> None:
    """Several windows in one call, each against DuckDB."""
    table = ops.rolling(data.ts, data.values, windows, aggs, keys=data.keys)
    for w in windows:
        expected = oracle.rolling(data.ts, data.values, w, aggs, data.keys)
        for agg in aggs:
            assert_matches(table[f"{agg}_{w}"], expected[agg], agg)


@settings(max_examples=60, deadline=None)
@given(data=rows(), window=st.sampled_from([1, 2, 50, 10**4, 10**9, 2**61]))
def test_matches_duckdb(data: Rows, window: int) -> None:
    table = ops.rolling(data.ts, data.values, window, ALL, keys=data.keys)
    expected = oracle.rolling(data.ts, data.values, window, ALL, data.keys)
    assert table.num_rows == len(data.ts)
    for agg in ALL:
        assert_matches(table[f"{agg}_{window}"], expected[agg], agg)


STREAMED = [a for a in ALL if a != "count_distinct"]  # the specialised kernel passes
FIVE = ["count", "sum", "mean", "min", "max"]


def in_ts_order(data: Rows) -> Rows:
    """The same rows sorted by ts, stably (ties keep their input order)."""
    order = pa.array(np.argsort(data.ts, kind="stable"), pa.int64())
    keys = None if data.keys is None else data.keys.take(order)
    return Rows(data.ts[order.to_numpy()], data.values.take(order), keys)


@settings(max_examples=60, deadline=None)
@given(
    data=rows(),
    window=st.sampled_from([1, 2, 50, 10**4, 2**61]),
    in_order=st.booleans(),
)
def test_grouped_pass_matches_duckdb(data: Rows, window: int, in_order: bool) -> None:
    """Without count_distinct the kernels take a specialised pass, several windows at
    once: over input already in ts order (streamed: keyed through per-key slots,
    unkeyed in place) and over unsorted input (grouped by key, keys merge-sorted)."""
    if in_order:
        data = in_ts_order(data)
    assert_windows_match(data, [window, window + 3], STREAMED)


@settings(max_examples=60, deadline=None)
@given(
    data=rows(),
    window=st.sampled_from([1, 2, 50, 10**4, 2**61]),
    aggs=st.lists(st.sampled_from(FIVE), min_size=1, max_size=5, unique=True),
    bucketed=st.booleans(),
    walk_rows=st.sampled_from([0, 1, 16, 10**6]),
)
def test_in_order_keyed_five_aggs_match_duckdb(
    data: Rows, window: int, aggs: list[str], bucketed: bool, walk_rows: int
) -> None:
    """Keyed input in ts order with only count/sum/mean/min/max takes the in-order
    path (per-key state and a ring of recent rows) when a window's frames span at
    most `INORDER_MAX_SPAN` rows, else the bucketed path (partition by key bucket,
    windows per bucket, results back in input order): both sides of the threshold.
    The bucketed path recomputes frames of at most about `WALK_ROWS` rows from a
    key's recent rows (0: never; 1: a bucket's walks go over budget and fall back to
    the deques mid-way; 10**6: always) and maintains longer ones with deques."""
    from featureflow.ops._mojo import planning

    data = in_ts_order(data)
    with pytest.MonkeyPatch.context() as mp:
        if bucketed:
            mp.setattr(planning, "INORDER_MAX_SPAN", 0)
            mp.setattr(planning, "WALK_ROWS", walk_rows)
        assert_windows_match(data, [window, window + 3], aggs)


@pytest.mark.parametrize("backend", ["mojo"], indirect=True)
@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("walk_rows", [0, 1, 16, 10**6])
def test_in_order_ring_agrees_with_bucketed(
    backend: str, parts: int, walk_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-order path's ring wraps many times; keys fall silent for longer than
    the ring (their state must not read overwritten records), values have nulls,
    NaN and long monotone runs (deep min/max deques), ts has runs of equal values.
    The bucketed side recomputes frames from each key's recent rows (frames of a
    hot key overflow the inline slots and walk back along the row links), keeps
    deques, or switches from one to the other mid-bucket (`WALK_ROWS`)."""
    from featureflow.ops._mojo import planning

    rng = np.random.default_rng(11)
    n = 60_000
    ts = np.sort(rng.integers(0, 10**7, n))
    ts[30_000:30_300] = ts[30_000]
    keys = rng.integers(0, 50, n)
    keys[rng.random(n) < 0.3] = 7  # a hot key
    quiet = (ts > 2 * 10**6) & (ts < 6 * 10**6)
    keys[quiet & (keys < 10)] = 10  # keys 0..9 fall silent for 4e6 ns
    raw = rng.normal(0, 1, n)
    raw[10_000:20_000] = np.arange(10_000.0)  # increasing: min deque of one, max grows
    raw[40_000:50_000] = -np.arange(10_000.0)
    raw[rng.random(n) < 0.05] = np.nan
    values = pa.array(raw, mask=rng.random(n) < 0.05)
    windows = [1, 1_000, 50_000, 400_000]
    monkeypatch.setattr(planning, "parts", lambda rows: parts)
    in_order = ops.rolling(ts, values, windows, FIVE, keys=keys)
    monkeypatch.setattr(planning, "INORDER_MAX_SPAN", 0)
    monkeypatch.setattr(planning, "WALK_ROWS", walk_rows)
    bucketed = ops.rolling(ts, values, windows, FIVE, keys=keys)
    for name in in_order.column_names:
        assert in_order[name].is_null().equals(bucketed[name].is_null()), name
        a = np.asarray(in_order[name].to_numpy(zero_copy_only=False), dtype=np.float64)
        b = np.asarray(bucketed[name].to_numpy(zero_copy_only=False), dtype=np.float64)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-9, equal_nan=True, err_msg=name)


@pytest.mark.parametrize("backend", ["mojo"], indirect=True)
@pytest.mark.parametrize("walk_rows", [0, 1, 10**6])
def test_bucketed_walks_over_budget_fall_back(
    backend: str, walk_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bursts: frames are short on average over a bucket's ts range (so the bucket
    starts by recomputing frames) but hold hundreds of a key's rows inside a burst,
    so walking them back goes over budget and the bucket falls back to the deques
    (walk_rows 1); 10**6 walks them all, 0 never walks: each against DuckDB."""
    from featureflow.ops._mojo import planning

    rng = np.random.default_rng(5)
    bursts, per = 60, 300
    ts = (np.arange(bursts)[:, None] * 10**6 + rng.integers(0, 300, (bursts, per))).ravel()
    ts = np.sort(ts)
    keys = rng.integers(0, 3, len(ts))
    raw = rng.normal(0, 100, len(ts))
    raw[rng.random(len(ts)) < 0.05] = np.nan
    values = pa.array(raw)
    monkeypatch.setattr(planning, "INORDER_MAX_SPAN", 0)
    monkeypatch.setattr(planning, "WALK_ROWS", walk_rows)
    assert_windows_match(Rows(ts, values, pa.array(keys)), [100, 1000], FIVE)


@settings(max_examples=40, deadline=None)
@given(
    data=rows(max_rows=40),
    hop=st.sampled_from([1, 3, 10, 1000]),
    window=st.sampled_from([1, 7, 100]),
    in_order=st.booleans(),
)
def test_hop_is_the_sawtooth_frame(data: Rows, hop: int, window: int, in_order: bool) -> None:
    """With hop the frame is [floor((t - W) / hop) * hop, t]: DuckDB with a per-row
    RANGE offset, every agg, over unsorted and ts-ordered input."""
    if in_order:
        data = in_ts_order(data)
    table = ops.rolling(data.ts, data.values, window, ALL, keys=data.keys, hop=hop)
    expected = oracle.rolling(data.ts, data.values, window, ALL, data.keys, hop=hop)
    for agg in ALL:
        assert_matches(table[f"{agg}_{window}"], expected[agg], agg)


def test_equal_timestamps_are_in_each_others_frame() -> None:
    table = ops.rolling(
        np.array([0, 5, 5, 10]), pa.array([1.0, 2.0, 4.0, 8.0]), "5ns", ["sum", "first", "last"]
    )
    assert table["sum_5ns"].to_pylist() == [1.0, 7.0, 7.0, 14.0]
    assert table["first_5ns"].to_pylist() == [1.0, 1.0, 1.0, 2.0]
    assert table["last_5ns"].to_pylist() == [1.0, 4.0, 4.0, 8.0]


def test_one_nanosecond_window_and_input_order() -> None:
    ts = np.array([3, 1, 2, 2, 0], dtype=np.int64)
    table = ops.rolling(ts, pa.array([1, 2, 3, 4, 5], pa.int32()), "1ns", ["count", "sum", "max"])
    assert table["count_1ns"].to_pylist() == [3, 2, 3, 3, 1]
    assert table["sum_1ns"].to_pylist() == [8.0, 7.0, 9.0, 9.0, 5.0]
    assert table["max_1ns"].to_pylist() == [4, 5, 4, 4, 5]
    assert table.schema.field("max_1ns").type == pa.int32()


def test_column_names_keep_the_window_as_written() -> None:
    table = ops.rolling(
        np.array([0]), pa.array([1.0]), ["10s", 5, timedelta(minutes=1)], ["count", "mean"]
    )
    assert table.column_names == [
        "count_10s",
        "mean_10s",
        "count_5",
        "mean_5",
        "count_0:01:00",
        "mean_0:01:00",
    ]


def test_nulls_and_nan_are_skipped() -> None:
    values = pa.array([1.0, None, np.nan, 4.0])
    table = ops.rolling(np.array([0, 1, 2, 3]), values, "1d", ["count", "sum", "std", "min"])
    assert table["count_1d"].to_pylist() == [1, 1, 1, 2]
    assert table["sum_1d"].to_pylist() == [1.0, 1.0, 1.0, 5.0]
    assert table["std_1d"].to_pylist()[:3] == [None, None, None]
    assert table["std_1d"][3].as_py() == pytest.approx(np.std([1.0, 4.0], ddof=1))
    assert table["min_1d"].to_pylist() == [1.0, 1.0, 1.0, 1.0]


def test_all_null_frame_is_null_and_count_zero() -> None:
    table = ops.rolling(
        np.array([0, 10]), pa.array([None, 2.0], pa.float64()), 1, ["count", "sum", "first"]
    )
    assert table.to_pydict() == {
        "count_1": [0, 1],
        "sum_1": [None, 2.0],
        "first_1": [None, 2.0],
    }


def test_variance_is_accurate_with_a_large_offset() -> None:
    rng = np.random.default_rng(3)
    n = 5_000
    values = 1e9 + rng.normal(0, 1e-3, n)
    ts = np.arange(n, dtype=np.int64)
    table = ops.rolling(ts, values, 999, ["var"])  # 1000-row frames once warmed up
    got = table["var_999"].to_numpy()
    from fractions import Fraction

    for i in (999, 2500, n - 1):
        window = [Fraction(x) for x in values[i - 999 : i + 1]]
        mean = sum(window) / len(window)
        exact = float(sum((x - mean) ** 2 for x in window) / (len(window) - 1))
        assert abs(got[i] - exact) <= 1e-6 * exact


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize("aggs", [["var", "std"], ["var", "std", "count_distinct"]])
def test_variance_stays_exact_after_a_far_value_leaves(
    keyed: bool, shuffled: bool, aggs: list[str]
) -> None:
    """A far value opens the frame (the sums' shift) and leaves while the frame
    stays non-empty; the small values after it must still get their exact variance
    (the plain formula S2 - S1^2/n cancelled ~1e16 against ~1 here). Every kernel
    path: unkeyed and keyed, in ts order and shuffled, with and without count_distinct."""
    small = [0.0, -1.0, 0.0, 2.0, 1.0, -1.0, 0.0, 3.0]
    values = np.array([1e8, *small] * 3)
    ts = np.arange(len(values), dtype=np.int64)
    keys = np.repeat([7, 8, 9], len(values) // 3) if keyed else None
    order = np.random.default_rng(0).permutation(len(ts)) if shuffled else np.arange(len(ts))
    table = ops.rolling(
        ts[order], values[order], 3, aggs, keys=None if keys is None else keys[order]
    )
    got = np.empty(len(ts))
    got[order] = table["var_3"].to_numpy(zero_copy_only=False)
    for i in range(len(ts)):
        frame = [
            values[j] for j in range(len(ts))
            if ts[i] - 3 <= ts[j] <= ts[i] and (keys is None or keys[j] == keys[i])
        ]  # fmt: skip
        if len(frame) > 1 and 1e8 not in frame:
            assert got[i] == pytest.approx(np.var(frame, ddof=1), rel=1e-12, abs=1e-12), i


def test_timestamp_types_of_any_unit_and_zone() -> None:
    base = np.array([0, 1, 2, 3], dtype=np.int64)
    expected = ops.rolling(base * 1_000_000_000, pa.array([1.0, 2, 3, 4]), "1s", ["sum"])
    for unit, scale in [("s", 1), ("ms", 1000), ("us", 10**6), ("ns", 10**9)]:
        ts = pa.array(base * scale, pa.timestamp(unit, tz="Europe/Paris"))
        got = ops.rolling(
            pa.chunked_array([ts[:2], ts[2:]]), pa.array([1.0, 2, 3, 4]), "1s", ["sum"]
        )
        assert got.equals(expected), unit


def test_empty_input_has_the_schema() -> None:
    table = ops.rolling(
        np.array([], dtype=np.int64),
        pa.array([], pa.int32()),
        "1h",
        ["count", "min", "mean"],
        keys=pa.array([], pa.string()),
    )
    assert table.num_rows == 0
    assert table.schema == pa.schema(
        [("count_1h", pa.int64()), ("min_1h", pa.int32()), ("mean_1h", pa.float64())]
    )


def test_many_windows_in_one_call_equal_separate_calls() -> None:
    rng = np.random.default_rng(5)
    ts = rng.integers(0, 10**6, 2000)
    values = pa.array(rng.normal(size=2000))
    keys = rng.integers(0, 30, 2000)
    together = ops.rolling(ts, values, ["1us", "10us", "1ms"], ["sum", "max"], keys=keys)
    for w in ["1us", "10us", "1ms"]:
        alone = ops.rolling(ts, values, w, ["sum", "max"], keys=keys)
        assert together.select([f"sum_{w}", f"max_{w}"]).equals(alone)


# The split is a property of the Mojo backend: run under it alone.
@pytest.mark.parametrize("backend", ["mojo"], indirect=True)
@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("five", [False, True])
def test_parts_on_threads_agree_with_one_thread(
    backend: str, keyed: bool, parts: int, five: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large calls are split over threads (keys, or rows with a warm-up when unkeyed)."""
    assert backend == "mojo"
    from featureflow.ops._mojo import planning

    rng = np.random.default_rng(7)
    n = 20_000
    ts = np.sort(rng.integers(0, 10**6, n))
    ts[n // 2 - 50 : n // 2 + 50] = ts[n // 2]  # a run of equal ts across the cut
    if not keyed and parts == 3:
        ts[:200] = ts[:200][::-1].copy()  # not in order: the sorted copy is split
    nulls = rng.random(n) < 0.1 if parts == 3 else None  # parts=2: values used in place
    values = pa.array(rng.normal(5, 3, n), mask=nulls)
    keys = pa.array(rng.integers(0, 7, n)) if keyed else None
    windows, aggs = [10, 5_000, 10**9], FIVE if five else STREAMED

    one = ops.rolling(ts, values, windows, aggs, keys=keys)
    monkeypatch.setattr(planning, "parts", lambda rows: parts)
    split = ops.rolling(ts, values, windows, aggs, keys=keys)
    for name in one.column_names:
        a = np.asarray(one[name].to_numpy(zero_copy_only=False), dtype=np.float64)
        b = np.asarray(split[name].to_numpy(zero_copy_only=False), dtype=np.float64)
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name)
