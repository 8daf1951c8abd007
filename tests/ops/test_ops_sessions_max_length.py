"""sessions(max_length=...): a session is never longer than the cap, on every kernel path.

Differential against the DuckDB oracle's recursive walk (`ops_oracle.sessions` with
``max_length``), under both backends (the `backend` fixture), with fixed and per-row
gaps, unsorted and ts-ordered input, and each path of the kernels forced.
"""

from __future__ import annotations

import numpy as np
import ops_oracle as oracle
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ops_strategies import Rows, rows
from test_ops_windows import assert_sessions_match

import featureflow.ops as ops

ALL = list(ops.AGGS)
MIN = 60 * 10**9
GAPS = st.sampled_from([1, 3, 50, 10**5])
MAX_LENGTHS = st.sampled_from([1, 2, 7, 60, 10**4, 10**6])


def _starts(table: pa.Table) -> list[int]:
    return table["session_start"].cast(pa.int64()).to_pylist()


def test_an_event_exactly_max_length_after_the_start_joins_one_after_it_opens() -> None:
    ts = np.array([0, 10, 20, 30, 31, 40], dtype=np.int64) * MIN
    table = ops.sessions(ts, pa.array(np.ones(6)), "30m", ["count"], max_length="30m")
    assert _starts(table) == [0, 31 * MIN]  # 30 - 0 == max joins; 31 - 0 > max opens
    assert table["count"].to_pylist() == [4, 2]
    # the end stays the last event + gap, as without a cap
    assert table["session_end"].cast(pa.int64()).to_pylist() == [60 * MIN, 70 * MIN]


def test_a_never_idle_key_gets_back_to_back_sessions_of_at_most_max_length() -> None:
    ts = np.arange(0, 10 * 60 * MIN, 5 * MIN, dtype=np.int64)  # every 5 min for 10 h
    keys = pa.array(np.zeros(len(ts), dtype=np.int64))
    uncapped = ops.sessions(ts, pa.array(np.ones(len(ts))), "30m", ["count"], keys=keys)
    assert uncapped.num_rows == 1
    capped = ops.sessions(
        ts, pa.array(np.ones(len(ts))), "30m", ["count"], keys=keys, max_length="2h"
    )
    assert _starts(capped) == [h * 125 * MIN for h in range(5)]  # 25 events of 5 min each
    assert sum(capped["count"].to_pylist()) == len(ts)


def test_max_length_is_a_positive_duration() -> None:
    ts = np.array([0], dtype=np.int64)
    with pytest.raises(ValueError, match="max_length"):
        ops.sessions(ts, pa.array([1.0]), 5, ["count"], max_length=0)


def _gaps(data: Rows, gap: int, dynamic: bool) -> tuple[np.ndarray, object]:
    n = len(data.ts)
    if not dynamic:
        return np.full(n, gap), gap
    gaps = np.random.default_rng(n).integers(-2, 2 * gap, n)
    return gaps, pa.array(gaps)


@settings(max_examples=60, deadline=None)
@given(data=rows(), gap=GAPS, max_length=MAX_LENGTHS, dynamic=st.booleans())
def test_capped_sessions_match_duckdb(data: Rows, gap: int, max_length: int, dynamic: bool) -> None:
    """Unsorted input, every aggregate (count_distinct: the frame-by-frame path)."""
    gaps, arg = _gaps(data, gap, dynamic)
    table = ops.sessions(data.ts, data.values, arg, ALL, keys=data.keys, max_length=max_length)
    expected = oracle.sessions(data.ts, data.values, gaps, ALL, data.keys, max_length)
    assert_sessions_match(table, expected, ALL, keyed=data.keys is not None)


@settings(max_examples=60, deadline=None)
@given(data=rows(), gap=GAPS, max_length=MAX_LENGTHS, dynamic=st.booleans())
def test_capped_sessions_without_count_distinct_match_duckdb(
    data: Rows, gap: int, max_length: int, dynamic: bool
) -> None:
    """The grouping path: each session aggregated over its contiguous rows."""
    aggs = [a for a in ALL if a != "count_distinct"]
    gaps, arg = _gaps(data, gap, dynamic)
    table = ops.sessions(data.ts, data.values, arg, aggs, keys=data.keys, max_length=max_length)
    expected = oracle.sessions(data.ts, data.values, gaps, aggs, data.keys, max_length)
    assert_sessions_match(table, expected, aggs, keyed=data.keys is not None)


@settings(max_examples=40, deadline=None)
@given(data=rows(), gap=GAPS, max_length=MAX_LENGTHS, dynamic=st.booleans())
def test_no_session_is_longer_than_max_length_and_none_is_split_without_cause(
    data: Rows, gap: int, max_length: int, dynamic: bool
) -> None:
    """Properties without the oracle: each session spans at most ``max_length``; a
    session that follows another of its key within the gap starts more than
    ``max_length`` after the previous start; the cap never merges (every uncapped
    session boundary is still one)."""
    _, arg = _gaps(data, gap, dynamic)
    capped = ops.sessions(
        data.ts, data.values, arg, ["count", "max"], keys=data.keys, max_length=max_length
    )
    uncapped = ops.sessions(data.ts, data.values, arg, ["count", "max"], keys=data.keys)
    assert sum(capped["count"].to_pylist()) == sum(uncapped["count"].to_pylist())
    keys = capped["key"].to_pylist() if data.keys is not None else [None] * capped.num_rows
    starts = _starts(capped)
    ends = capped["session_end"].cast(pa.int64()).to_pylist()
    before = {(k, s) for k, s in zip(keys, starts, strict=True)}
    uncapped_keys = (
        uncapped["key"].to_pylist() if data.keys is not None else [None] * uncapped.num_rows
    )
    assert set(zip(uncapped_keys, _starts(uncapped), strict=True)) <= before
    for i in range(1, capped.num_rows):
        if keys[i] == keys[i - 1] and starts[i] <= ends[i - 1]:
            assert starts[i] - starts[i - 1] > max_length
