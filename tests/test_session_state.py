"""A session view's kept sessions, batch after batch: equal to the oracle, and to DuckDB.

``session_step`` (state as runs, open sessions kept as records:
:mod:`featureflow.session_runs`, :mod:`featureflow.session_state`) against
``session_step_in_time_order(touched_only=False)`` (every entity computed from its
events in time order, the former path) on its own chain of states: per micro-batch
the same online rows, the same offline history and the same state events, bit for
bit. The streams have what makes the kept sessions take their other paths: events
out of order (behind an entity's latest one, not behind the watermark), ties,
sessions the length cap closes, batches with no events that only close sessions
(the closer's pass), nulls, NaN and ±inf; the chains lose the kept sessions at
random (a replay, a restart, another executor: they are built from the runs),
replay batches, checkpoint every row or few rows, and compact the runs early. At
the end the watermark passes everything, and the history holds every session once,
as DuckDB's gaps and islands compute them.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from duckdb_oracle import END_NS, SESSIONS_SPEC
from duckdb_oracle import sessions as duckdb_sessions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from featureflow import ops, session_runs, session_state
from featureflow.ops._resume import R_AT, R_KEY, R_START
from featureflow.repo import StreamViewSpec
from featureflow.window_state import (
    StateStep,
    session_step,
    session_step_in_time_order,
    state_events,
)

MINUTE = 60 * 10**9
DELAY = 5 * MINUTE
SPECS = {
    "30m gap, 24h cap": dataclasses.replace(SESSIONS_SPEC, watermark_ns=DELAY),
    "10m gap, 25m cap": dataclasses.replace(
        SESSIONS_SPEC, watermark_ns=DELAY, session_gap_ns=10 * MINUTE,
        session_max_length_ns=25 * MINUTE,
    ),
    "30m gap, 20m cap": dataclasses.replace(
        SESSIONS_SPEC, watermark_ns=DELAY, session_max_length_ns=20 * MINUTE
    ),
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Stream:
    """Events in arrival order and how the chain runs them."""

    events: pa.Table
    cuts: list[int]
    closers: list[bool]
    """Per batch: whether a pass without events follows it (the closer, watermark after)."""
    forget: list[bool]
    """Per pass: whether it runs without the kept sessions (built from the runs)."""
    replay: list[bool]
    """Per batch: whether it runs twice from the same state (the second run is kept)."""
    late_share: float
    """Share of each batch's events the job would dead-letter that the chain keeps."""


@st.composite
def streams(draw: st.DrawFn, *, nonfinite: bool = True) -> Stream:
    """A few users' events: bursts with pauses longer and shorter than the gaps, times
    rounded to a tick (ties), some moved back by up to 6 minutes (out of order)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 400))
    users = draw(st.integers(1, 6))
    tick = draw(st.sampled_from([10**6, 10**9, 30 * 10**9]))
    steps = rng.choice([0, 2, 20, 200, 1500, 2500], size=n, p=[0.1, 0.4, 0.3, 0.1, 0.06, 0.04])
    ts = END_NS + np.cumsum(steps * 10**9 // 2) // tick * tick
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=10)))
    back = rng.random(n) < draw(st.sampled_from([0.0, 0.05, 0.3]))
    back[[c for c in cuts if c < n]] |= draw(st.booleans())  # a batch opening behind its entity
    near = rng.random(n) < 0.5  # just behind its predecessor, or up to 6 minutes
    shift = np.where(near, rng.integers(1, 4, n), rng.integers(0, 6 * MINUTE // tick + 1, n))
    ts = np.where(back, ts - shift * tick, ts)
    if draw(st.booleans()):  # amounts in cents
        amount = np.round(rng.lognormal(3, 1, n), 2)
    else:  # magnitudes far apart: a compensated sum's bits depend on the order of additions
        amount = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-8, 22, n)
    amount[rng.random(n) < 0.1] = rng.choice([0.0, -0.0, 1.5], size=1)[0]
    null = rng.random(n) < 0.05
    if nonfinite and draw(st.booleans()):
        odd = rng.random(n) < 0.05
        amount[odd] = rng.choice([np.nan, np.inf, -np.inf], size=int(odd.sum()))
    events = pa.table({
        "user_id": rng.integers(1, users + 1, n),
        "event_ns": ts.astype(np.int64),
        "amount": pa.array(amount, mask=null),
    })  # fmt: skip
    batches = len(cuts) + 1
    return Stream(
        events, cuts,
        draw(st.lists(st.booleans(), min_size=batches, max_size=batches)),
        draw(st.lists(st.booleans(), min_size=1, max_size=12)),
        draw(st.lists(st.booleans(), min_size=1, max_size=6)),
        draw(st.sampled_from([0.0, 0.0, 0.3])) if nonfinite else 0.0,
    )  # fmt: skip


def _passes(stream: Stream, delay: int) -> Iterator[tuple[pa.Table, int]]:
    """(new events, watermark) per pass, as the job runs them: a batch judged by the
    watermark before it (its earlier events dropped, but ``late_share`` of them kept),
    and after some batches a pass without events under the watermark after it."""
    rng = np.random.default_rng(len(stream.cuts))
    seen: int | None = None
    bounds = [0, *stream.cuts, stream.events.num_rows]
    for number, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        batch = stream.events.slice(lo, hi - lo)
        before = seen - delay if seen is not None else None
        if before is not None:
            late = pc.less(batch.column("event_ns"), before).to_numpy(zero_copy_only=False)
            keep = ~late | (rng.random(len(late)) < stream.late_share)
            batch = batch.filter(pa.array(keep))
        if batch.num_rows:
            top = pc.max(batch.column("event_ns")).as_py()
            seen = top if seen is None else max(seen, top)
        yield batch, before if before is not None else 0
        if stream.closers[number % len(stream.closers)] and seen is not None:
            yield batch.slice(0, 0), seen - delay


def _by_entity_and_time(table: pa.Table, time_column: str) -> pa.Table:
    return table.take(
        pc.sort_indices(table, [("user_id", "ascending"), (time_column, "ascending")])
    )


def _bits(table: pa.Table) -> pa.Table:
    """``table`` with each float column as its values' bits (NaN equal to NaN), nulls kept."""
    columns = []
    for column in table.columns:
        if pa.types.is_floating(column.type):
            values = pc.fill_null(column, 0.0).to_numpy().astype(np.float64).view(np.int64)
            column = pa.array(values, mask=pc.is_null(column).to_numpy(zero_copy_only=False))
        columns.append(column)
    return pa.table(columns, names=table.column_names)


def _same(got: pa.Table, want: pa.Table, what: str) -> None:
    """Equal tables, float values bit for bit."""
    assert got.schema.equals(want.schema), f"{what}: {got.schema} != {want.schema}"
    assert _bits(got).equals(_bits(want)), f"{what}:\n{got.to_pandas()}\n!=\n{want.to_pandas()}"


def _check_runs(kept: pa.Table) -> None:
    """The layout: runs sorted by (entity, time), marked, with the closed watermark."""
    assert session_runs.is_session_runs(kept)
    for run in kept.to_batches():
        keys = run.column("user_id").to_numpy()
        ts = run.column("event_ns").to_numpy()
        assert np.all((np.diff(keys) > 0) | ((np.diff(keys) == 0) & (np.diff(ts) >= 0)))


def _check_records(
    kept: pa.Table, states: session_state.SessionStates, spec: StreamViewSpec
) -> None:
    """The kept records are, word for word (the compensated sum's two words included,
    which another order of additions splits differently even where their total is the
    same), what a pass over the state's rows gives; each checkpoint is its session over
    exactly the rows before its time."""
    runs = session_runs.run_columns(session_runs.runs_of(kept, "user_id"), "user_id", ["amount"])
    built = session_state.build(runs, spec, session_runs.closed_ns(kept))
    words = [w for w in range(states.sessions.shape[1]) if w != R_AT]
    np.testing.assert_array_equal(states.sessions[:, words], built.sessions[:, words])
    for record in states.checkpoints:
        keys = np.array([record[R_KEY]], np.int64)
        rows = session_runs.read_back(runs, keys, np.array([record[R_START]], np.int64))
        before = np.searchsorted(rows.ts, record[R_AT])  # rows of its session before X
        part = ops.KeyedRows(rows.ts[:before], [v[:before] for v in rows.values],
                             np.array([0, before], np.int64))  # fmt: skip
        none = ops.InitialRecords(states.sessions[:0], np.array([-1], np.int64),
                                  states.sessions[:0])  # fmt: skip
        empty = ops.KeyedRows.empty(1, 1)
        assert spec.session_gap_ns is not None
        _, _, last = ops.resume_sessions(none, keys, part, empty, spec.session_gap_ns,
                                         spec.session_max_length_ns, 0)  # fmt: skip
        np.testing.assert_array_equal(last[0, words], record[words])


def run_chains(stream: Stream, spec: StreamViewSpec) -> tuple[pa.Table, pa.Table, int]:
    """Both chains over the stream, compared pass by pass; returns (all history, the
    accepted events, the passes that found kept sessions)."""
    state = ours = stream.events.slice(0, 0)
    carried: session_state.SessionStates | None = None
    forget, replay = itertools.cycle(stream.forget), itertools.cycle(stream.replay)
    histories, accepted, resumed = [], [], 0
    for batch, watermark in _passes(stream, spec.watermark_ns):
        if next(forget):
            carried = None
        resumed += carried is not None
        want = session_step_in_time_order(
            pa.concat_tables([state, batch]), batch.num_rows, spec, watermark,
            touched_only=False,
        )  # fmt: skip
        pending = pa.concat_tables([ours, batch.cast(ours.schema)])
        got: StateStep = session_step(pending, batch.num_rows, spec, watermark, states=carried)
        if next(replay):  # the same batch again, from the same state and kept sessions
            again = session_step(pending, batch.num_rows, spec, watermark, states=carried)
            for a, b in ((again.rows, got.rows), (again.history, got.history),
                         (again.kept, got.kept)):  # fmt: skip
                _same(a, b, "replay")
            got = again
        _same(got.rows, want.rows, "online rows")
        _same(got.history, want.history, "history")
        _check_runs(got.kept)
        if got.delta is not None:  # the state file's delta rebuilds the table
            rebuilt = got.delta.apply(ours if ours.num_rows else None)
            _same(rebuilt, got.kept, "delta")
            assert [b.num_rows for b in rebuilt.to_batches()] == [
                b.num_rows for b in got.kept.to_batches()
            ]
            assert rebuilt.schema.equals(got.kept.schema, check_metadata=True)
        _same(
            _by_entity_and_time(state_events(got.kept, spec), "event_ns"),
            _by_entity_and_time(want.kept, "event_ns"),
            "state events",
        )
        state, ours = want.kept, got.kept
        carried = got.frames if isinstance(got.frames, session_state.SessionStates) else None
        if carried is not None:
            _check_records(ours, carried, spec)
        histories.append(got.history)
        accepted.append(batch)
    # the end of the stream: the watermark passes every session
    final = session_step(ours, 0, spec, np.iinfo(np.int64).max // 2, states=carried)
    assert state_events(final.kept, spec).num_rows == 0
    histories.append(final.history)
    return pa.concat_tables(histories), pa.concat_tables(accepted), resumed


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Checkpoints every few rows and early compactions, so short streams take every path."""
    monkeypatch.setattr(session_state, "CHECKPOINT_EVERY", 3)
    monkeypatch.setattr(session_runs, "MAX_RUNS", 4)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=streams(), spec=st.sampled_from(sorted(SPECS)))
def test_chains_of_batches_equal_the_oracle_batch_for_batch(
    small_steps: None, stream: Stream, spec: str
) -> None:
    run_chains(stream, SPECS[spec])


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=streams(nonfinite=False), spec=st.sampled_from(sorted(SPECS)),
       every=st.sampled_from([1, 2, 64]))  # fmt: skip
def test_every_session_is_emitted_once_as_duckdb_computes_it(
    monkeypatch: pytest.MonkeyPatch, stream: Stream, spec: str, every: int
) -> None:
    """Without events behind the watermark, each session's history row is emitted once
    and is DuckDB's session over all accepted events (sums to rounding)."""
    monkeypatch.setattr(session_state, "CHECKPOINT_EVERY", every)
    view = SPECS[spec]
    history, accepted, _ = run_chains(stream, view)
    assert view.session_gap_ns is not None
    oracle = duckdb_sessions(
        accepted, gap_s=view.session_gap_ns // 10**9,
        max_length_s=view.session_max_length_ns // 10**9,
    )  # fmt: skip
    history = _by_entity_and_time(history, "session_start")
    assert history.column("user_id").to_pylist() == oracle.column("user_id").to_pylist()
    starts = history.column("session_start").cast(pa.int64()).to_numpy() * 1_000
    np.testing.assert_array_equal(starts, oracle.column("start_ns").to_numpy())
    lasts = history.column("event_timestamp").cast(pa.int64()).to_numpy() * 1_000
    np.testing.assert_array_equal(lasts, oracle.column("last_ns").to_numpy())
    for name in ("session_events", "session_amount_sum", "session_amount_mean",
                 "session_amount_max"):  # fmt: skip
        np.testing.assert_allclose(
            np.array(history.column(name).to_pylist(), dtype=float),
            np.array(oracle.column(name).to_pylist(), dtype=float),
            rtol=1e-12, equal_nan=True, err_msg=name,
        )  # fmt: skip


@pytest.mark.parametrize("behind_ns", [1, 10**6, 10**9, 2 * MINUTE])
@pytest.mark.parametrize("every", [1, 3, 64])
def test_an_event_just_behind_its_entity_resumes_before_it(
    monkeypatch: pytest.MonkeyPatch, behind_ns: int, every: int
) -> None:
    """A busy entity's next batch opens with an event just behind its latest one: the
    session's sum is taken again in time order from a point before that event (values
    of magnitudes far apart, so another order of additions gives other bits)."""
    monkeypatch.setattr(session_state, "CHECKPOINT_EVERY", every)
    spec = SPECS["30m gap, 24h cap"]
    rng = np.random.default_rng(every)
    n = 400
    ts = END_NS + np.arange(n, dtype=np.int64) * 10**9 // 8  # busy: 8 events a second
    ts[200] = ts[199] - behind_ns  # the second batch's first event
    amount = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-8, 22, n)
    events = pa.table({"user_id": np.ones(n, np.int64), "event_ns": ts, "amount": amount})
    run_chains(Stream(events, [200], [False], [False], [False], 0.0), spec)


def test_an_event_that_bridges_two_open_sessions_joins_them() -> None:
    """Two open sessions of an entity one gap and a millisecond apart; a late event at
    exactly the first's last event + gap joins it (the gap is inclusive), and the second
    session's first event is then within the gap: one session. The recomputation starts
    at the first session, not at the later start just after the event."""
    spec = SPECS["30m gap, 24h cap"]
    assert spec.session_gap_ns is not None
    last = END_NS + 10 * MINUTE
    first = END_NS + np.arange(0, 11, dtype=np.int64) * MINUTE  # the first session, to `last`
    second = last + spec.session_gap_ns + 10**6 + np.arange(0, 3, dtype=np.int64) * MINUTE
    ts = np.concatenate([first, second, [last + spec.session_gap_ns]])
    events = pa.table({"user_id": np.ones(len(ts), np.int64), "event_ns": ts,
                       "amount": np.arange(len(ts), dtype=np.float64)})  # fmt: skip
    history, _, resumed = run_chains(
        Stream(events, [len(ts) - 1], [False], [False], [False], 0.0), spec
    )
    assert resumed == 1
    assert history.column("session_events").to_pylist() == [len(ts)]


def test_the_numpy_backend_keeps_the_same_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference backend runs the same algorithm (records in Python): the same
    sessions and state as the oracle on it, sums to the rounding of its prefix sums."""
    from featureflow.ops import _backend

    monkeypatch.setenv(_backend.ENV_VAR, "numpy")
    _backend.reset()
    try:
        spec = SPECS["10m gap, 25m cap"]
        rng = np.random.default_rng(3)
        n = 300
        ts = END_NS + np.cumsum(rng.choice([1, 30, 900], n, p=[0.6, 0.35, 0.05])) * 10**9
        ts[rng.random(n) < 0.1] -= MINUTE
        events = pa.table({"user_id": rng.integers(1, 4, n), "event_ns": ts,
                           "amount": np.round(rng.lognormal(3, 1, n), 2)})  # fmt: skip
        state = ours = events.slice(0, 0)
        carried = None
        stream = Stream(events, list(range(30, n, 30)), [True], [False], [False], 0.0)
        for batch, watermark in _passes(stream, spec.watermark_ns):
            want = session_step_in_time_order(pa.concat_tables([state, batch]), batch.num_rows,
                                              spec, watermark, touched_only=False)  # fmt: skip
            got = session_step(pa.concat_tables([ours, batch.cast(ours.schema)]),
                               batch.num_rows, spec, watermark, states=carried)  # fmt: skip
            for a, b in ((got.rows, want.rows), (got.history, want.history)):
                assert a.schema.equals(b.schema)
                for name in a.column_names:
                    x, y = a.column(name).to_pylist(), b.column(name).to_pylist()
                    if pa.types.is_floating(a.schema.field(name).type):
                        np.testing.assert_allclose(np.array(x, float), np.array(y, float),
                                                   rtol=1e-9, err_msg=name)  # fmt: skip
                    else:
                        assert x == y, name
            _same(_by_entity_and_time(state_events(got.kept, spec), "event_ns"),
                  _by_entity_and_time(want.kept, "event_ns"), "state events")  # fmt: skip
            state, ours = want.kept, got.kept
            carried = got.frames if isinstance(got.frames, session_state.SessionStates) else None
            assert carried is not None
    finally:
        _backend.reset()


def test_a_state_saved_in_time_order_continues_as_runs() -> None:
    """A checkpoint of the former layout (the open sessions' events in time order, no
    closed watermark) is read as one run; the next batch's outputs are the oracle's, its
    delta rebuilds the new table from the old one."""
    spec = SPECS["30m gap, 24h cap"]
    rng = np.random.default_rng(11)
    n = 600
    ts = END_NS + np.cumsum(rng.choice([1, 60, 2400], n, p=[0.5, 0.45, 0.05])) * 10**9
    events = pa.table({"user_id": rng.integers(1, 6, n), "event_ns": ts,
                       "amount": np.round(rng.lognormal(3, 1, n), 2)})  # fmt: skip
    first, second = events.slice(0, 400), events.slice(400)
    w1 = int(ts[399]) - spec.watermark_ns
    old = session_step_in_time_order(first, first.num_rows, spec, w1).kept
    assert not session_runs.is_session_runs(old)
    second = second.filter(pc.greater_equal(second.column("event_ns"), w1))
    w2 = int(ts[-1]) - spec.watermark_ns
    pending = pa.concat_tables([old, second])
    got = session_step(pending, second.num_rows, spec, w2)
    want = session_step_in_time_order(pending, second.num_rows, spec, w2, touched_only=False)
    _same(got.rows, want.rows, "online rows")
    _same(got.history, want.history, "history")
    assert got.delta is not None
    _same(got.delta.apply(old), got.kept, "delta")
    _same(_by_entity_and_time(state_events(got.kept, spec), "event_ns"),
          _by_entity_and_time(want.kept, "event_ns"), "state events")  # fmt: skip


def test_the_kept_sessions_take_every_path() -> None:
    """A stream that extends sessions, resumes from checkpoints and session starts, closes
    by gap and by length, compacts, and is rebuilt after losing the kept sessions."""
    spec = SPECS["10m gap, 25m cap"]
    rng = np.random.default_rng(7)
    n = 3000
    ts = END_NS + np.cumsum(rng.choice([1, 5, 60, 900], n, p=[0.5, 0.3, 0.15, 0.05])) * 10**9
    ts[rng.random(n) < 0.05] -= 3 * MINUTE
    events = pa.table({"user_id": rng.integers(1, 5, n), "event_ns": ts,
                       "amount": rng.random(n)})  # fmt: skip
    stream = Stream(events, list(range(100, n, 100)), [False, True], [False] * 5 + [True],
                    [False], 0.0)  # fmt: skip
    calls: dict[str, int] = {"checkpoint": 0, "session start": 0, "compact": 0}
    real_plan, real_compact = session_state._plan_back, session_runs.compact

    def plan(*args: Any) -> np.ndarray:
        extra = real_plan(*args)
        calls["checkpoint"] += len(extra)
        calls["session start"] += len(args[0]) - len(extra)
        return extra

    def compact(*args: Any) -> list[pa.Table]:
        calls["compact"] += 1
        return real_compact(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(session_state, "_plan_back", plan)
        patch.setattr(session_runs, "compact", compact)
        _, _, resumed = run_chains(stream, spec)
    assert resumed > 20
    assert all(count > 0 for count in calls.values()), calls
