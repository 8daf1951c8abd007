"""Micro-batch state of the stream job: features over batches equal features over all events.

The executor-side functions (``rolling_outputs``, ``session_outputs``) run here
without Spark, fed micro-batch by micro-batch the way the job feeds them (state
of earlier batches + new events, watermark = max event time seen - delay, late
events dropped). Whatever the batch boundaries and arrival order:
- rolling history: each event's features equal a one-pass computation over all
  events accepted up to its micro-batch (what the online store served then);
- session history: every session exactly once, equal to a one-pass computation
  over all accepted events (a session is only emitted once final).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from duckdb_oracle import END_NS, EXAMPLE_SPEC, SESSIONS_SPEC, events_table
from hypothesis import given, settings
from hypothesis import strategies as st

from featureflow import features
from featureflow.events import sample
from featureflow.repo import StreamViewSpec
from featureflow.spark.online_sink import rolling_outputs, session_outputs

DELAY_NS = 5 * 60 * 10**9
TILED_SPEC = dataclasses.replace(EXAMPLE_SPEC, tile_hop_ns=5 * 60 * 10**9)


def _run_batches(
    events: pa.Table, cuts: list[int], spec: StreamViewSpec, *, per_batch: bool = False
) -> tuple[Any, pa.Table, list[pa.Table]]:
    """Feed ``events`` (arrival order) in batches cut at ``cuts``; returns
    (accepted events — a list per batch with ``per_batch`` —, concatenated offline
    history, online rows per batch)."""
    outputs = session_outputs if spec.is_session_view else rolling_outputs
    state = events.slice(0, 0)
    seen_max: int | None = None
    accepted, history, online = [], [], []
    bounds = [0, *sorted(set(cuts)), events.num_rows]
    for lo, hi in itertools.pairwise(bounds):
        batch = events.slice(lo, hi - lo)
        if seen_max is not None:  # the pipeline's mark_late: these go to the dead letters
            batch = batch.filter(pc.greater_equal(batch.column("event_ns"), seen_max - DELAY_NS))
        if batch.num_rows:
            seen_max = max(seen_max or 0, pc.max(batch.column("event_ns")).as_py())
        accepted.append(batch)
        watermark = (seen_max or 0) - DELAY_NS
        rows, batch_history, state = outputs(
            pa.concat_tables([state, batch]), batch.num_rows, spec, watermark
        )
        history.append(batch_history)
        online.append(rows)
    if spec.is_session_view:  # end of stream: the watermark passes every session
        _, batch_history, state = outputs(state, 0, spec, np.iinfo(np.int64).max // 2)
        history.append(batch_history)
        assert state.num_rows == 0
    return (
        accepted if per_batch else pa.concat_tables(accepted),
        pa.concat_tables(history),
        online,
    )


def _events(seed: int, n: int = 600, users: int = 12) -> pa.Table:
    return events_table(sample.generate(n, users=users, seed=seed, end_ns=END_NS))


def _timestamps_ns(table: pa.Table) -> np.ndarray:
    return table.column("event_timestamp").cast(pa.int64()).to_numpy() * 1_000


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    cuts=st.lists(st.integers(0, 600), max_size=8),
    tiled=st.booleans(),
)
def test_rolling_history_equals_one_pass_over_what_had_arrived(
    seed: int, cuts: list[int], tiled: bool
) -> None:
    spec = TILED_SPEC if tiled else EXAMPLE_SPEC
    events = _events(seed)
    accepted, history, _ = _run_batches(events, cuts, spec)
    # Oracle: per micro-batch, one pass over everything accepted so far; keep that batch's rows.
    expected_parts, seen = [], 0
    for batch in _run_batches(events, cuts, spec, per_batch=True)[0]:
        upto = accepted.slice(0, seen + batch.num_rows)
        expected_parts.append(features.event_features(upto, spec).slice(seen))
        seen += batch.num_rows
    expected = pa.concat_tables(expected_parts)
    assert history.num_rows == accepted.num_rows
    np.testing.assert_array_equal(_timestamps_ns(history), expected.column("event_ns").to_numpy())
    for name in spec.feature_names:
        np.testing.assert_allclose(
            np.array(history.column(name).to_pylist(), dtype=float),
            np.array(expected.column(name).to_pylist(), dtype=float),
            rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name,
        )  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(0, 600), max_size=8))
def test_every_session_is_emitted_once_and_equals_one_pass(seed: int, cuts: list[int]) -> None:
    accepted, history, online = _run_batches(_events(seed), cuts, SESSIONS_SPEC)
    expected = features.session_features(accepted, SESSIONS_SPEC)
    order = pc.sort_indices(history, [("user_id", "ascending"), ("session_start", "ascending")])
    history = history.take(order)
    assert history.num_rows == expected.num_rows
    assert history.column("user_id").to_pylist() == expected.column("user_id").to_pylist()
    np.testing.assert_array_equal(_timestamps_ns(history), expected.column("event_ns").to_numpy())
    for name in SESSIONS_SPEC.feature_names:
        assert history.column(name).to_pylist() == expected.column(name).to_pylist(), name
    # Online: after the last batch, each user's row is the user's latest session.
    latest = features.latest_per_entity(expected, "user_id")
    final: dict[int, dict[str, object]] = {}
    for rows in online:
        for row in rows.to_pylist():
            final[row["user_id"]] = row
    touched = sorted(final)
    assert touched == sorted(latest.column("user_id").to_pylist())
    for row in latest.to_pylist():
        assert final[row["user_id"]]["session_start"] == row["session_start"]
        assert final[row["user_id"]]["session_events"] == row["session_events"]


def test_late_events_are_dropped_before_they_reach_the_state() -> None:
    events = pa.table(
        {
            "user_id": [1, 1, 1],
            "event_ns": [10 * DELAY_NS, 20 * DELAY_NS, 10 * DELAY_NS + 1],
            "amount": [1.0, 2.0, 3.0],
        }
    )
    accepted, history, _ = _run_batches(events, [1, 2], EXAMPLE_SPEC)
    assert accepted.column("amount").to_pylist() == [1.0, 2.0]
    assert history.column("count_amount_86400s").to_pylist() == [1, 2]
