"""Feature values of the example view vs DuckDB (an independent SQL engine) on the same events."""

from __future__ import annotations

import dataclasses

import duckdb_oracle
import numpy as np
import pyarrow as pa
import pytest
from duckdb_oracle import END_NS, EXAMPLE_SPEC, SESSIONS_SPEC, events_table, per_event_features

from featureflow import features
from featureflow.events import sample
from featureflow.repo import SESSION_DURATION, SESSION_START


def _assert_close(actual: pa.ChunkedArray, expected: pa.ChunkedArray, name: str) -> None:
    a = np.array(actual.to_pylist(), dtype=float)
    e = np.array(expected.to_pylist(), dtype=float)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=f"{name}: nulls differ")
    np.testing.assert_allclose(a, e, rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name)


@pytest.mark.parametrize(("n", "users", "seed"), [(3000, 40, 1), (500, 3, 2), (1, 1, 3)])
def test_event_features_equal_duckdb_range_windows(n: int, users: int, seed: int) -> None:
    events = events_table(sample.generate(n, users=users, seed=seed, end_ns=END_NS))
    ours = features.event_features(events, EXAMPLE_SPEC)
    oracle = per_event_features(events)
    assert ours.column_names[:2] == ["user_id", "event_ns"]
    assert ours.num_rows == n
    for aggregation in EXAMPLE_SPEC.aggregations:
        name = aggregation.output_name
        _assert_close(ours.column(name), oracle.column(name), name)


def test_latest_per_entity_takes_the_latest_event_and_the_later_row_on_ties() -> None:
    table = pa.table(
        {
            "user_id": [1, 2, 1, 1, 2],
            "event_ns": [5, 1, 9, 9, 0],
            "value": [10, 20, 30, 40, 50],
        }
    )
    latest = features.latest_per_entity(table, "user_id")
    assert latest.to_pydict() == {"user_id": [1, 2], "event_ns": [9, 1], "value": [40, 20]}


@pytest.mark.parametrize(
    ("n", "users", "seed", "max_length_s"),
    [(3000, 40, 4, 86_400), (400, 2, 5, 86_400), (1, 1, 6, 86_400), (3000, 3, 7, 1_800),
     (3000, 5, 8, 3_600)],
)  # fmt: skip
def test_session_features_equal_duckdb_gaps_and_islands(
    n: int, users: int, seed: int, max_length_s: int
) -> None:
    """Sessions of the sample events (a short max length: busy users' islands are cut)."""
    events = events_table(sample.generate(n, users=users, seed=seed, end_ns=END_NS))
    spec = dataclasses.replace(SESSIONS_SPEC, session_max_length_ns=max_length_s * 10**9)
    ours = features.session_features(events, spec)
    oracle = duckdb_oracle.sessions(events, max_length_s=max_length_s)
    uncapped = duckdb_oracle.sessions(events, max_length_s=10**9)
    if max_length_s < 86_400:
        assert oracle.num_rows > uncapped.num_rows, "the cap cut some island"
    assert ours.num_rows == oracle.num_rows
    assert ours.column("user_id").to_pylist() == oracle.column("user_id").to_pylist()
    assert ours.column("event_ns").to_pylist() == oracle.column("last_ns").to_pylist()
    start_us = ours.column(SESSION_START).cast(pa.int64()).to_numpy()
    np.testing.assert_array_equal(start_us * 1_000, oracle.column("start_ns").to_numpy())
    duration = (oracle.column("last_ns").to_numpy() - oracle.column("start_ns").to_numpy()) / 1e9
    np.testing.assert_allclose(ours.column(SESSION_DURATION).to_numpy(), duration)
    for name in duckdb_oracle.SESSION_AGGREGATES:
        _assert_close(ours.column(name), oracle.column(name), name)


def test_an_event_exactly_one_gap_after_the_last_joins_the_session() -> None:
    gap = SESSIONS_SPEC.session_gap_ns
    assert gap is not None
    events = pa.table(
        {
            "user_id": [7, 7, 7, 7],
            "event_ns": [0, gap, 2 * gap + 1, 2 * gap + 1],
            "amount": [1.0, None, 2.0, 4.0],
        }
    )
    out = features.session_features(events, SESSIONS_SPEC).to_pydict()
    assert out["event_ns"] == [gap, 2 * gap + 1]
    assert out["session_events"] == [1, 2]  # count skips the null amount
    assert out["session_amount_max"] == [1.0, 4.0]
    assert out[SESSION_DURATION] == [gap / 1e9, 0.0]


def test_a_never_idle_user_closes_a_session_every_max_length() -> None:
    minute = 60 * 10**9
    ts = np.arange(0, 30 * 3600 * 10**9, 3 * minute, dtype=np.int64)  # every 3 min for 30 h
    events = pa.table({"user_id": np.full(len(ts), 7), "event_ns": ts, "amount": np.ones(len(ts))})
    out = features.session_features(events, SESSIONS_SPEC).to_pydict()
    day = SESSIONS_SPEC.session_max_length_ns
    assert out["session_events"] == [day // (3 * minute) + 1, len(ts) - day // (3 * minute) - 1]
    assert out[SESSION_DURATION][0] == day / 1e9  # an event exactly max length in joins


def test_a_session_view_has_no_per_event_rolling_features() -> None:
    with pytest.raises(ValueError, match="session view"):
        features.event_features(pa.table({"user_id": [1], "event_ns": [1], "amount": [1.0]}),
                                SESSIONS_SPEC)  # fmt: skip
