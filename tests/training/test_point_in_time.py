"""Point-in-time features: exact boundaries, ties, late events, no leakage, DuckDB as oracle.

``features_as_of`` is the math of ``featureflow.training_set`` (probes through
the stream job's kernels); these tests need no Spark and no repo.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from duckdb_oracle import END_NS, EXAMPLE_SPEC, FEATURE_NAMES, events_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pit_oracle import probe_features

from featureflow.events import sample
from featureflow.training import features_as_of

S = 10**9
HOUR = 3600 * S


def _events(users: list[int], times: list[int], amounts: list[float | None]) -> pa.Table:
    return pa.table(
        {
            "user_id": pa.array(users, pa.int64()),
            "event_ns": pa.array(times, pa.int64()),
            "amount": pa.array(amounts, pa.float64()),
        }
    )


def _as_of(events: pa.Table, users: list[int], times: list[int]) -> pa.Table:
    return features_as_of(
        events, pa.array(users, pa.int64()), pa.array(times, pa.int64()), EXAMPLE_SPEC
    )


def _assert_equals_oracle(events: pa.Table, users: list[int], times: list[int]) -> None:
    got = _as_of(events, users, times)
    want = probe_features(events, pa.table({"user_id": users, "event_ns": times}))
    assert got.num_rows == len(users)
    for name in FEATURE_NAMES:
        np.testing.assert_allclose(
            np.array(got.column(name).to_pylist(), dtype=float),
            np.array(want.column(name).to_pylist(), dtype=float),
            rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name,
        )  # fmt: skip


def test_event_exactly_at_the_timestamp_is_included_and_one_after_is_not() -> None:
    t = END_NS - HOUR
    events = _events([1, 1, 1], [t - 1, t, t + 1], [1.0, 10.0, 100.0])
    got = _as_of(events, [1, 1, 1], [t - 1, t, t + 1]).to_pydict()
    assert got["sum_amount_600s"] == [1.0, 11.0, 111.0]
    assert got["count_amount_600s"] == [1, 2, 3]
    assert got["max_amount_3600s"] == [1.0, 10.0, 100.0]
    _assert_equals_oracle(events, [1, 1, 1], [t - 1, t, t + 1])


def test_window_start_is_included_exactly_w_before_and_excluded_one_ns_earlier() -> None:
    t = END_NS - HOUR
    w = 600 * S
    events = _events([1, 1, 1], [t - w - 1, t - w, t], [1.0, 10.0, 100.0])
    got = _as_of(events, [1, 1], [t, t + 1]).to_pydict()
    assert got["sum_amount_600s"] == [110.0, 100.0]
    assert got["sum_amount_3600s"] == [111.0, 111.0]


def test_ties_every_event_at_the_timestamp_counts_whatever_the_input_order() -> None:
    t = END_NS - HOUR
    events = _events([1, 2, 1, 1], [t, t, t, t - S], [2.0, 50.0, 3.0, None])
    got = _as_of(events, [1, 1, 2], [t, t, t]).to_pydict()
    assert got["count_amount_600s"] == [2, 2, 1]  # the null amount is skipped
    assert got["sum_amount_600s"] == [5.0, 5.0, 50.0]
    _assert_equals_oracle(events, [1, 1, 2], [t, t, t])


def test_late_events_count_by_event_time_not_arrival_order() -> None:
    t = END_NS - HOUR
    # Arrival order: on-time events, then one that happened 5 min earlier (late).
    events = _events([1, 1, 1], [t - 60 * S, t, t - 300 * S], [1.0, 2.0, 4.0])
    got = _as_of(events, [1, 1], [t - 1, t - 120 * S]).to_pydict()
    assert got["sum_amount_600s"] == [5.0, 4.0]
    _assert_equals_oracle(events, [1, 1], [t - 1, t - 120 * S])


def test_entity_without_events_gets_empty_aggregates() -> None:
    t = END_NS - HOUR
    got = _as_of(_events([1], [t], [1.0]), [2], [t]).to_pydict()
    assert got["count_amount_3600s"] == [0]
    assert got["sum_amount_3600s"] == [None]


def test_sample_events_at_random_times_equal_duckdb() -> None:
    events = sample.generate(3000, users=40, seed=4, end_ns=END_NS, span_s=8 * 3600)
    rng = np.random.default_rng(1)
    users = rng.integers(1, 45, 500).tolist()
    times = rng.integers(END_NS - 9 * HOUR, END_NS + HOUR, 500).tolist()
    # Half the probes sit exactly on, 1 ns before or 1 ns after an event.
    picks = rng.integers(0, len(events), 250)
    users[:250] = events.user_id[picks].tolist()
    times[:250] = (events.event_ns[picks] + rng.integers(-1, 2, 250)).tolist()
    _assert_equals_oracle(events_table(events), users, times)


@st.composite
def _history(draw: st.DrawFn) -> tuple[pa.Table, list[int], list[int]]:
    n = draw(st.integers(1, 60))
    users = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    # Times on a coarse grid (many ties) plus windows' edges.
    offsets = draw(st.lists(st.integers(0, 48), min_size=n, max_size=n))
    jitter = draw(st.lists(st.sampled_from([-1, 0, 1]), min_size=n, max_size=n))
    times = [END_NS - o * 300 * S + j for o, j in zip(offsets, jitter, strict=True)]
    amounts = draw(
        st.lists(
            st.one_of(st.none(), st.floats(-1e3, 1e3, allow_nan=False)), min_size=n, max_size=n
        )
    )
    probes = draw(st.lists(st.tuples(st.integers(1, 3), st.sampled_from(times)), min_size=1,
                           max_size=10))  # fmt: skip
    return (
        _events(users, times, amounts),
        [user for user, _ in probes],
        [time + draw(st.sampled_from([-1, 0, 1])) for _, time in probes],
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_history(), st.integers(1, 40), st.integers(1, 10 * 3600))
def test_no_leakage_adding_later_events_never_changes_a_result(
    history: tuple[pa.Table, list[int], list[int]], extra: int, later_s: int
) -> None:
    events, users, times = history
    before = _as_of(events, users, times)
    rng = np.random.default_rng(extra)
    # For each probe, events strictly after its time (1 ns to hours later), same and other users.
    future = pa.concat_tables(
        [
            _events(
                [user, user % 3 + 1],
                [t + 1 + int(rng.integers(0, later_s)) * S, t + 1],
                [1e6, -1e6],
            )
            for user, t in zip(users, times, strict=True)
        ]
    )
    # Each probe only compared to what the events up to its own time allow.
    for i, (user, t) in enumerate(zip(users, times, strict=True)):
        later = future.filter(pa.compute.greater(future.column("event_ns"), t))
        after = _as_of(pa.concat_tables([events, later]), [user], [t])
        assert after.slice(0, 1).to_pylist()[0] == pytest.approx(
            before.slice(i, 1).to_pylist()[0], nan_ok=True
        )
    _assert_equals_oracle(events, users, times)
