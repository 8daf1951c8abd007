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
from featureflow.window_state import (
    rolling_outputs,
    rolling_step,
    session_outputs,
    state_events,
)

DELAY_NS = 5 * 60 * 10**9
TILED_SPEC = dataclasses.replace(EXAMPLE_SPEC, tile_hop_ns=5 * 60 * 10**9, watermark_ns=DELAY_NS)
CAPPED_SPECS = [
    dataclasses.replace(SESSIONS_SPEC, session_max_length_ns=minutes * 60 * 10**9)
    for minutes in (20, 90)
]
"""Session views whose cap the sample's busy users reach: shorter than the gap, and longer."""


def _run_batches(
    events: pa.Table, cuts: list[int], spec: StreamViewSpec, *, per_batch: bool = False,
    resume: bool = True,
) -> tuple[Any, pa.Table, list[pa.Table]]:  # fmt: skip
    """Feed ``events`` (arrival order) in batches cut at ``cuts``; returns
    (accepted events — a list per batch with ``per_batch`` —, concatenated offline
    history, online rows per batch). ``resume``: each rolling batch resumes the frame
    states the one before kept (as a worker that holds them does)."""
    state, tile_state, frames = events.slice(0, 0), None, None
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
        pending = pa.concat_tables([state, batch])
        if spec.is_session_view:
            rows, batch_history, state = session_outputs(pending, batch.num_rows, spec, watermark)
        else:
            step = rolling_step(
                pending, batch.num_rows, spec, watermark, tile_state,
                frames=frames if resume else None,
            )  # fmt: skip
            rows, batch_history, state, tile_state = (
                step.rows, step.history, step.kept, step.kept_tiles,
            )  # fmt: skip
            frames = step.frames
        history.append(batch_history)
        online.append(rows)
    if spec.is_session_view:  # end of stream: the watermark passes every session
        _, batch_history, state = session_outputs(state, 0, spec, np.iinfo(np.int64).max // 2)
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
    resume=st.booleans(),
)
def test_rolling_history_equals_one_pass_over_what_had_arrived(
    seed: int, cuts: list[int], tiled: bool, resume: bool
) -> None:
    """With frame states resumed batch after batch (a worker holding them) or not (each
    batch on a fresh worker), the same history."""
    spec = TILED_SPEC if tiled else EXAMPLE_SPEC
    events = _events(seed)
    accepted, history, _ = _run_batches(events, cuts, spec, resume=resume)
    # Oracle: per micro-batch, one pass over everything accepted so far; keep that batch's rows.
    expected_parts, seen = [], 0
    for batch in _run_batches(events, cuts, spec, per_batch=True)[0]:
        upto = accepted.slice(0, seen + batch.num_rows)
        expected_parts.append(features.event_features(upto, spec).slice(seen))
        seen += batch.num_rows
    # History comes in event-time order: compare per (user, time); rows tied on
    # both have the same frame, hence the same features.
    expected = pa.concat_tables(expected_parts)
    expected = expected.take(pc.sort_indices(expected, [("user_id", "ascending"),
                                                        ("event_ns", "ascending")]))  # fmt: skip
    history = history.take(
        pc.sort_indices(history, [("user_id", "ascending"), ("event_timestamp", "ascending")])
    )
    assert history.num_rows == accepted.num_rows
    np.testing.assert_array_equal(_timestamps_ns(history), expected.column("event_ns").to_numpy())
    for name in spec.feature_names:
        np.testing.assert_allclose(
            np.array(history.column(name).to_pylist(), dtype=float),
            np.array(expected.column(name).to_pylist(), dtype=float),
            rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name,
        )  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    cuts=st.lists(st.integers(0, 600), max_size=8),
    spec=st.sampled_from([SESSIONS_SPEC, *CAPPED_SPECS]),
)
def test_every_session_is_emitted_once_and_equals_one_pass(
    seed: int, cuts: list[int], spec: StreamViewSpec
) -> None:
    """Also with a max length: a session the watermark closes by length is final."""
    accepted, history, online = _run_batches(_events(seed), cuts, spec)
    expected = features.session_features(accepted, spec)
    order = pc.sort_indices(history, [("user_id", "ascending"), ("session_start", "ascending")])
    history = history.take(order)
    assert history.num_rows == expected.num_rows
    assert history.column("user_id").to_pylist() == expected.column("user_id").to_pylist()
    np.testing.assert_array_equal(_timestamps_ns(history), expected.column("event_ns").to_numpy())
    for name in spec.feature_names:
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


def test_tiled_state_is_bounded_by_window_over_hop_per_entity() -> None:
    """Dense events over three days, 48 batches: the tiled state holds at most
    W / hop (+1) tiles per entity plus the raw events of the open tiles, while a
    plain view keeps every event of the last 24 h."""
    users, hop = 4, TILED_SPEC.tile_hop_ns
    assert hop is not None
    events = events_table(
        sample.generate(
            20_000, users=users, seed=7, end_ns=END_NS, span_s=3 * 86_400, out_of_order_share=0
        )
    )
    events = events.take(pc.sort_indices(events, [("event_ns", "ascending")]))
    state, tile_state, seen_max = events.slice(0, 0), None, 0
    step = events.num_rows // 48
    for lo in range(0, events.num_rows, step):
        batch = events.slice(lo, step)
        seen_max = max(seen_max, pc.max(batch.column("event_ns")).as_py())
        watermark = seen_max - DELAY_NS
        _, _, state, tile_state = rolling_outputs(
            pa.concat_tables([state, batch]), batch.num_rows, TILED_SPEC, watermark, tile_state
        )
        assert tile_state is not None
        per_entity = -(-max(TILED_SPEC.windows_ns) // hop) + 1
        assert tile_state.num_rows <= users * per_entity
        bound = (watermark // hop) * hop
        assert pc.min(state.column("event_ns")).as_py() >= bound
        arrived = events.slice(0, lo + step).column("event_ns")
        assert state.num_rows == pc.sum(pc.greater_equal(arrived, bound)).as_py()
    day = pc.sum(pc.greater_equal(events.column("event_ns"), seen_max - 86_400 * 10**9)).as_py()
    assert state.num_rows + tile_state.num_rows < day / 5


def test_tiles_merge_std_without_cancellation_near_1e9() -> None:
    """Values near 1e9 with a spread of 1e-3 across many tiles: the merged std equals
    the one-pass kernel's (no sum-of-squares cancellation in the tile moments)."""
    rng = np.random.default_rng(3)
    n = 2_000
    event_ns = np.sort(rng.integers(END_NS - 86_400 * 10**9, END_NS, n))
    events = pa.table(
        {
            "user_id": rng.integers(1, 3, n),
            "event_ns": event_ns,
            "amount": 1e9 + rng.uniform(0, 1e-3, n),
        }
    )
    cut = n // 2
    watermark = int(event_ns[cut])
    _, _, state, tile_state = rolling_outputs(events.slice(0, cut), cut, TILED_SPEC, watermark)
    assert tile_state is not None and tile_state.num_rows > 0
    _, history, _, _ = rolling_outputs(
        pa.concat_tables([state, events.slice(cut)]), n - cut, TILED_SPEC, watermark, tile_state
    )
    expected = features.event_features(events, TILED_SPEC).slice(cut)
    for name in ("std_amount_86400s", "mean_amount_86400s", "std_amount_3600s"):
        np.testing.assert_allclose(
            history.column(name).to_numpy(), expected.column(name).to_numpy(), rtol=1e-6,
            err_msg=name,
        )  # fmt: skip


def test_a_batch_without_new_events_closes_sessions_with_online_rows_of_the_online_schema() -> None:
    """A shuffle partition that gets no events in a batch still closes its sessions once the
    watermark passes them; its (empty) online rows keep the online schema, which the schema
    gate checks (they had the raw sessions' columns, and the gate stopped the job)."""
    events = events_table(sample.generate(200, users=5, seed=3, end_ns=END_NS, span_s=3600))
    rows, history, kept = session_outputs(events, 0, SESSIONS_SPEC, END_NS + 10 * 3600 * 10**9)
    with_new, _, _ = session_outputs(events, events.num_rows, SESSIONS_SPEC, END_NS)
    assert rows.num_rows == 0 and rows.schema == with_new.schema
    assert history.num_rows > 0 and kept.num_rows == 0


def _by_entity_and_time(table: pa.Table, time_column: str) -> pa.Table:
    """Rows sorted (stably) by user then time: the order-free form of an output."""
    return table.take(
        pc.sort_indices(table, [("user_id", "ascending"), (time_column, "ascending")])
    )


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    cuts=st.lists(st.integers(0, 600), min_size=1, max_size=6),
    view=st.sampled_from(["rolling", "tiled", "sessions", "capped"]),
    quiet=st.lists(st.integers(1, 12), max_size=8),
)
def test_computing_the_touched_entities_only_gives_the_outputs_of_all_entities(
    seed: int, cuts: list[int], view: str, quiet: list[int]
) -> None:
    """Batch after batch, the restricted computation (rolling: the touched entities'
    events; sessions: the touched entities' kept sessions extended, every session tested
    against the watermark) gives exactly the online rows, history and state of one
    computation over every entity in the state (sessions: the state's events,
    ``state_events``; its closed sessions' rows leave the runs lazily). Users in
    ``quiet`` send nothing in odd batches (entities without new events); the sample has
    out-of-order events. Each batch starts without kept sessions here (they are built
    from the runs); tests/test_session_state.py chains them."""
    spec = {
        "rolling": EXAMPLE_SPEC, "tiled": TILED_SPEC, "sessions": SESSIONS_SPEC,
        "capped": CAPPED_SPECS[0],
    }[view]  # fmt: skip
    events = _events(seed)
    state, tile_state, seen_max = events.slice(0, 0), None, None
    bounds = [0, *sorted(set(cuts)), events.num_rows]
    for number, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        batch = events.slice(lo, hi - lo)
        if number % 2:
            batch = batch.filter(pc.invert(pc.is_in(batch.column("user_id"), pa.array(quiet))))
        if seen_max is not None:
            batch = batch.filter(pc.greater_equal(batch.column("event_ns"), seen_max - DELAY_NS))
        if batch.num_rows:
            seen_max = max(seen_max or 0, pc.max(batch.column("event_ns")).as_py())
        watermark = (seen_max or 0) - DELAY_NS
        pending = pa.concat_tables([state, batch])
        if spec.is_session_view:
            outputs = [
                session_outputs(pending, batch.num_rows, spec, watermark, touched_only=only)
                for only in (True, False)
            ]
            time_columns = ("event_timestamp", "event_timestamp", "event_ns")
        else:
            outputs = [
                rolling_outputs(
                    pending, batch.num_rows, spec, watermark, tile_state, touched_only=only
                )
                for only in (True, False)
            ]
            time_columns = ("event_timestamp", "event_timestamp", "event_ns", "tile_start_ns")
        restricted, everything = outputs
        state = restricted[2]
        if spec.is_session_view:  # the events the runs hold for open sessions
            restricted = (*restricted[:2], state_events(state, spec))
        for got, want, time_column in zip(restricted, everything, time_columns, strict=False):
            if want is None:
                assert got is None
                continue
            assert _by_entity_and_time(got, time_column).equals(
                _by_entity_and_time(want, time_column)
            )
        if view != "tiled":  # runs sorted by (entity, time) (state_runs, session_runs)
            for run in state.to_batches():
                keys = run.column("user_id").to_numpy()
                ts = run.column("event_ns").to_numpy()
                assert np.all((np.diff(keys) > 0) | ((np.diff(keys) == 0) & (np.diff(ts) >= 0)))
        else:
            assert np.all(np.diff(state.column("event_ns").to_numpy()) >= 0)  # time-ordered
        if not spec.is_session_view:
            tile_state = restricted[3]


def test_a_never_idle_entity_keeps_at_most_max_length_and_delay_of_state() -> None:
    """An entity with an event every 3 minutes for 60 hours never pauses for the gap: its
    sessions close by length (24 h), each as soon as the watermark passes start + 24 h,
    so the state never holds more than 24 h + the delay of its events (with ten events
    per micro-batch) and the history holds every session once."""
    step = 3 * 60 * 10**9
    ts = END_NS - np.arange(60 * 20, 0, -1, dtype=np.int64) * step
    events = pa.table({"user_id": np.full(len(ts), 7), "event_ns": ts, "amount": np.ones(len(ts))})
    _, history, _ = _run_batches(events, list(range(10, len(ts), 10)), SESSIONS_SPEC)
    expected = features.session_features(events, SESSIONS_SPEC)
    assert history.num_rows == expected.num_rows == 3
    assert history.column("session_events").to_pylist() == [481, 481, 238]
    state, most = events.slice(0, 0), 0
    for lo in range(0, len(ts), 10):
        batch = events.slice(lo, 10)
        watermark = pc.max(batch.column("event_ns")).as_py() - DELAY_NS
        _, _, state = session_outputs(
            pa.concat_tables([state, batch]), 10, SESSIONS_SPEC, watermark
        )
        most = max(most, state.num_rows)
    assert most <= (SESSIONS_SPEC.session_max_length_ns + DELAY_NS) // step + 10
