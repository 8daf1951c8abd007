"""A rolling view's state as runs (featureflow.state_runs) through rolling_outputs, vs DuckDB.

Batch after batch (late events dropped as the job does), the online rows equal
DuckDB's features as of each touched entity's latest accepted event — also
when a new event is older than the entity's latest state event, whose frame it
changes — and the state stays a few runs sorted by (entity, time) holding every
event a future frame can reach.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from duckdb_oracle import END_NS, EXAMPLE_SPEC, events_table, latest_features
from hypothesis import given, settings
from hypothesis import strategies as st

from featureflow import state_runs
from featureflow.events import sample
from featureflow.window_state import rolling_outputs

DELAY_NS = 5 * 60 * 10**9


def _check_online(rows: pa.Table, accepted: pa.Table, touched: set[int]) -> None:
    expected = latest_features(accepted)
    assert sorted(rows.column("user_id").to_pylist()) == sorted(touched)
    for row in rows.to_pylist():
        want = expected[row["user_id"]]
        for name, value in want.items():
            got = row[name]
            if value is None:
                assert got is None, name
            else:
                assert got is not None and np.isclose(got, value, rtol=1e-9, atol=1e-9), name


def _feed(events: pa.Table, cuts: list[int]) -> None:
    state = events.slice(0, 0)
    seen_max: int | None = None
    accepted: list[pa.Table] = []
    for lo, hi in itertools.pairwise([0, *sorted(set(cuts)), events.num_rows]):
        batch = events.slice(lo, hi - lo)
        if seen_max is not None:
            batch = batch.filter(pc.greater_equal(batch.column("event_ns"), seen_max - DELAY_NS))
        if batch.num_rows:
            seen_max = max(seen_max or 0, pc.max(batch.column("event_ns")).as_py())
        accepted.append(batch)
        watermark = (seen_max or 0) - DELAY_NS
        pending = pa.concat_tables([state, batch.cast(state.schema)])
        rows, _, state, tiles = rolling_outputs(pending, batch.num_rows, EXAMPLE_SPEC, watermark)
        assert tiles is None
        _check_online(rows, pa.concat_tables(accepted), set(batch.column("user_id").to_pylist()))
        runs = state_runs.runs_of(state, "user_id")
        assert len(runs) <= 1 + np.log(max(state.num_rows, 1)) / np.log(state_runs.FANOUT) + 1
        keep_from = watermark - max(EXAMPLE_SPEC.windows_ns)
        everything = pa.concat_tables(accepted)
        reachable = pc.sum(pc.greater_equal(everything.column("event_ns"), keep_from)).as_py()
        held = pc.sum(pc.greater_equal(state.column("event_ns"), keep_from)).as_py() or 0
        assert held == (reachable or 0)  # every event a future frame can reach, once


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(0, 500), max_size=10))
def test_online_rows_equal_duckdb_batch_after_batch(seed: int, cuts: list[int]) -> None:
    _feed(events_table(sample.generate(500, users=8, seed=seed, end_ns=END_NS)), cuts)


def test_an_older_new_event_changes_the_latest_state_events_frame() -> None:
    """User 1's latest event (t = 100 s) is in the state; a new event at t = 90 s,
    on time, enters its frame, equal times (t = 100 s twice) are peers."""
    s = 10**9
    events = pa.table(
        {
            "user_id": pa.array([1, 1, 2, 1, 1], pa.int64()),
            "event_ns": pa.array(
                [END_NS + 10 * s, END_NS + 100 * s, END_NS, END_NS + 90 * s, END_NS + 100 * s],
                pa.int64(),
            ),
            "amount": pa.array([1.0, 2.0, 5.0, 4.0, 8.0]),
        }
    )
    _feed(events, [3, 4])


def test_a_state_in_time_order_is_taken_as_one_run() -> None:
    """A state saved before this layout (time order, no metadata) gives the same outputs."""
    events = events_table(sample.generate(300, users=5, seed=3, end_ns=END_NS))
    watermark = pc.max(events.column("event_ns")).as_py() - DELAY_NS
    old, new = events.slice(0, 200), events.slice(200)
    in_time = old.take(pc.sort_indices(old, [("event_ns", "ascending")]))
    as_runs = rolling_outputs(old, 200, EXAMPLE_SPEC, watermark - 10**12)[2]
    assert (as_runs.schema.metadata or {}).get(state_runs.LAYOUT_KEY) == state_runs.LAYOUT
    outputs = [
        rolling_outputs(
            pa.concat_tables([state, new.cast(state.schema)]), 100, EXAMPLE_SPEC, watermark
        )
        for state in (in_time, as_runs)
    ]
    for got, want in zip(outputs[0][:2], outputs[1][:2], strict=True):
        assert got.equals(want)


@settings(max_examples=60, deadline=None)
@given(
    runs=st.lists(
        st.lists(st.tuples(st.integers(-3, 12), st.integers(-50, 50)), max_size=30),
        min_size=1,
        max_size=4,
    ),
    data=st.data(),
)
def test_latest_times_are_each_keys_latest_event_over_the_runs(
    runs: list[list[tuple[int, int]]], data: st.DataObject
) -> None:
    tables = [
        pa.table(
            {
                "user_id": pa.array([k for k, _ in sorted(rows)], pa.int64()),
                "event_ns": pa.array([t for _, t in sorted(rows)], pa.int64()),
            }
        )
        for rows in runs
    ]
    latest: dict[int, int] = {}
    for key, ts in itertools.chain.from_iterable(runs):
        latest[key] = max(ts, latest.get(key, ts))
    held = sorted(latest)
    asked = sorted(data.draw(st.sets(st.sampled_from(held))) if held else [])
    got = state_runs.latest_times(tables, "user_id", np.array(asked, dtype=np.int64))
    assert got.tolist() == [latest[k] for k in asked]


def _run(rows: list[tuple[int, int, float]]) -> pa.Table:
    rows = sorted(rows, key=lambda row: (row[0], row[1]))
    return pa.table({
        "user_id": pa.array([k for k, _, _ in rows], pa.int64()),
        "event_ns": pa.array([t for _, t, _ in rows], pa.int64()),
        "amount": pa.array([a for _, _, a in rows], pa.float64()),
    })  # fmt: skip


def _rows(tables: list[pa.Table]) -> list[tuple[int, int, float]]:
    return sorted(itertools.chain.from_iterable(
        zip(*(t.column(c).to_pylist() for c in ("user_id", "event_ns", "amount")), strict=True)
        for t in tables
    ))  # fmt: skip


_EVENT = st.tuples(st.integers(0, 6), st.integers(0, 400), st.floats(-5, 5))


@settings(max_examples=80, deadline=None)
@given(
    batches=st.lists(st.lists(_EVENT, min_size=1, max_size=25), min_size=1, max_size=12),
    step=st.integers(0, 60),
)
def test_compaction_keeps_every_reachable_event_once_and_drops_wholly_stale_runs(
    batches: list[list[tuple[int, int, float]]], step: int
) -> None:
    """Batch after batch, the cut advancing: the runs hold exactly the events at or
    after the cut (pruning may lag: older rows may stay), each run sorted by (entity,
    time), and no run lies wholly before the cut."""
    runs: list[pa.Table] = []
    given_rows: list[tuple[int, int, float]] = []
    for index, batch in enumerate(batches):
        cut = index * step
        runs = state_runs.compact([*runs, _run(batch)], "user_id", cut)
        given_rows += batch
        assert [row for row in _rows(runs) if row[1] >= cut] == sorted(
            row for row in given_rows if row[1] >= cut
        )
        for run in runs:
            keys = run.column("user_id").to_numpy()
            ts = run.column("event_ns").to_numpy()
            assert np.all((keys[1:] > keys[:-1]) | ((keys[1:] == keys[:-1]) & (ts[1:] >= ts[:-1])))
            assert int(ts.max()) >= cut


@settings(max_examples=40, deadline=None)
@given(
    runs=st.lists(st.lists(_EVENT, max_size=20), min_size=1, max_size=4),
    data=st.data(),
)
def test_take_rows_equals_a_take_of_the_concatenation(
    runs: list[list[tuple[int, int, float]]], data: st.DataObject
) -> None:
    """Rows gathered column by column from several runs (some of several chunks) are
    those of one take over the runs' concatenation, in the order asked."""
    tables = [_run(rows) for rows in runs]
    tables = [pa.concat_tables([t.slice(0, t.num_rows // 2), t.slice(t.num_rows // 2)])
              for t in tables]  # fmt: skip
    total = sum(t.num_rows for t in tables)
    rows = np.array(
        data.draw(st.lists(st.integers(0, total - 1), max_size=40)) if total else [],
        dtype=np.int64,
    )
    got = state_runs.take_rows(tables, rows)
    assert got.equals(pa.concat_tables(tables).take(pa.array(rows)).combine_chunks())
    assert all(column.num_chunks <= 1 for column in got.columns)


def test_the_stale_share_of_a_large_run_is_estimated_and_a_wholly_stale_one_confirmed() -> None:
    """Runs larger than the sample: one wholly before the cut is dropped, one mostly
    before it rewritten without those rows, one barely before it kept as it is; a run
    whose rows all lie before the cut but one is not dropped: that row stays."""
    n = 10 * state_runs.STALE_SAMPLE
    keys = np.repeat(np.arange(n // 10), 10)
    ts = np.tile(np.arange(10), n // 10) * 100  # each key: times 0, 100, ..., 900

    def run(times: np.ndarray) -> pa.Table:
        return pa.table({"user_id": keys, "event_ns": times, "amount": np.ones(n)})

    assert state_runs.compact([run(ts)], "user_id", 1_000) == []
    mostly = state_runs.compact([run(ts)], "user_id", 500)  # half of the rows stale
    assert len(mostly) == 1 and mostly[0].num_rows == n // 2
    assert int(pc.min(mostly[0].column("event_ns")).as_py()) == 500
    barely = run(ts)
    assert state_runs.compact([barely], "user_id", 100) == [barely]  # 10 %: left alone
    one_left = ts.copy()
    one_left[10 * (n // 30) + 9] = 5_000  # a key's latest row after the cut: it stays
    kept = state_runs.compact([run(one_left)], "user_id", 1_000)
    assert [t.num_rows for t in kept] == [1]
