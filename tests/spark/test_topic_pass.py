"""The topic pass's executor side, without Spark: counts, dead letters, session closing.

- ``count_rows``/``dead_letter_rows``: what the driver advances the watermarks with
  and sends to the dead-letter topic, checked against a plain Python count.
- Session closing: the pass runs a session view under the watermark before the
  batch, so a session the watermark after batch ``b`` finalises closes in the pass
  of ``b + 1``, and :class:`SessionCloser`'s task closes the last ones at the end
  of the run. The oracle is a single step per batch under the watermark after it:
  over a stream cut into micro-batches, the offline history (every session exactly
  once) and the open sessions' events in the state the run ends with must be the
  same, and each batch's state holds the oracle's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from duckdb_oracle import END_NS, SESSIONS_SPEC, events_table
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from micro_batches import micro_batches

from featureflow.events import sample
from featureflow.spark.offline_sink import CLOSED_SUFFIX, OfflineFeatureLog, read_history
from featureflow.spark.online_sink import ViewTask
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON
from featureflow.spark.state import StateStore, drop_resident
from featureflow.spark.topic_pass import COUNT, DEAD, count_rows, dead_letter_rows
from featureflow.window_state import state_events

DELAY_NS = 5 * 60 * 10**9
SPEC = dataclasses.replace(SESSIONS_SPEC, watermark_ns=DELAY_NS)


def _records() -> pa.Table:
    reasons = [None, "not a JSON object", None, "in the future", None, None]
    return pa.table({
        "user_id": pa.array([1, None, 2, 3, 1, 4], pa.int64()),
        "event_ns": pa.array([10, None, 30, 99, 20, 5], pa.int64()),
        "partition": pa.array([0, 0, 1, 1, 0, 1], pa.int32()),
        "topic": ["t"] * 6,
        "offset": pa.array([5, 6, 7, 8, 9, 10], pa.int64()),
        "key": pa.array([None, b"k", None, b"k3", None, None], pa.binary()),
        "value": pa.array([None, b"{x", None, b"{}", None, None], pa.binary()),
        ERROR_FIELD: [None, "value", None, "event_timestamp", None, None],
        ERROR_REASON: reasons,
    })  # fmt: skip


def test_counts_per_kafka_partition_and_reason_with_the_latest_usable_time() -> None:
    rows = count_rows(_records()).to_pylist()
    assert {r["kind"] for r in rows} == {COUNT}
    got = {(r["partition"], r["reason"]): (r["rows"], r["max_ns"]) for r in rows}
    assert got == {
        (0, None): (2, 20), (0, "not a JSON object"): (1, None),
        (1, None): (2, 30), (1, "in the future"): (1, None),
    }  # fmt: skip


def test_dead_letter_rows_keep_bytes_coordinates_field_and_reason() -> None:
    records = _records()
    bad = records.filter(pc.is_valid(records.column(ERROR_REASON)))
    rows = dead_letter_rows(bad).to_pylist()
    assert [(r["kind"], r["key"], r["value"], r["topic"], r["partition"], r["offset"],
             r["field"], r["reason"]) for r in rows] == [
        (DEAD, b"k", b"{x", "t", 0, 6, "value", "not a JSON object"),
        (DEAD, b"k3", b"{}", "t", 1, 8, "event_timestamp", "in the future"),
    ]  # fmt: skip


def _live_events(state: StateStore, batch_id: int) -> pa.Table | None:
    """The events of the open sessions the state holds after ``batch_id``, sorted: the
    rows of closed sessions a state keeps until compaction is due are left out (when
    each run compacts depends on the watermark it ran under, not on what it holds)."""
    kept = state.load_events(0, before_batch=batch_id + 1)
    if kept is None:
        return None
    live = state_events(kept, SPEC)
    return live.sort_by([("user_id", "ascending"), ("event_ns", "ascending")])


def _run(root: Path, events: pa.Table, cuts: list[int], lagged: bool
         ) -> tuple[pa.Table, list[pa.Table]]:
    """Feed ``events`` in batches cut at ``cuts`` through the view's tasks; returns the
    offline history and the state after each batch (lagged: after the final close)."""
    drop_resident()
    state = StateStore(str(root / "state"), 1)
    offline = OfflineFeatureLog(str(root / "offline"), SPEC.name)
    before: int | None = None
    states = []
    batch_id = 0
    for batch_id, (batch, before, after) in enumerate(micro_batches(events, cuts, DELAY_NS)):
        task = ViewTask(SPEC, batch_id, state, (before if lagged else after) or 0, offline)
        outputs = task.compute(0, batch.to_batches() if batch.num_rows else [])
        if outputs is not None:
            task.finish(0, outputs)
        states.append(_live_events(state, batch_id))
        before = after
    if lagged:  # the close at the end of the run, twice (the second closes nothing)
        for _ in range(2):
            closer = ViewTask(SPEC, batch_id, state, before or 0, offline,
                              reads_before=batch_id + 1, offline_suffix=CLOSED_SUFFIX)
            outputs = closer.compute(0, [])
            if outputs is not None:
                closer.finish(0, outputs)
        states[-1] = _live_events(state, batch_id)
    history = read_history(str(root / "offline"), SPEC.name).drop_columns(["batch"])
    return history.sort_by([(c, "ascending") for c in ("user_id", "event_timestamp")]), states


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(1, 599), max_size=6))
@example(seed=349, cuts=[476])  # compacted in the first batch's step only when it closes
def test_closing_in_the_next_pass_and_at_the_end_equals_closing_under_the_watermark_after(
    tmp_path_factory: pytest.TempPathFactory, seed: int, cuts: list[int]
) -> None:
    generated = sample.generate(600, users=12, seed=seed, end_ns=END_NS, span_s=4 * 3600)
    events = events_table(generated)
    lagged = _run(tmp_path_factory.mktemp("lagged"), events, cuts, lagged=True)
    one = _run(tmp_path_factory.mktemp("one"), events, cuts, lagged=False)
    assert lagged[0].equals(one[0]), "the same sessions closed, each once"
    assert len(lagged[1]) == len(one[1])
    got, want = lagged[1][-1], one[1][-1]  # the state the run ends with
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert got.equals(want.cast(got.schema))
    for got, want in zip(lagged[1], one[1], strict=True):  # open sessions wait one batch
        if got is not None and want is not None:
            assert pc.all(pc.is_in(want.column("event_ns"), got.column("event_ns"))).as_py()
