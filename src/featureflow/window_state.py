"""A stream view's window state across micro-batches: what to emit and what to keep.

Pure functions of Arrow tables (no Spark, Kafka or Feast I/O), shared by the
stream job's executors (:mod:`featureflow.spark.online_sink`), the backfill
and the tests. Each takes the partition's state (events of earlier
micro-batches) followed by the new events, computes the view's features with
:mod:`featureflow.features` (rolling, tiled, sessions), and returns:

- the online rows: per entity touched by new events, its features as of its
  latest event (rolling) or its latest session (sessions), with the view's
  timestamp field as ``timestamp[us, UTC]``;
- the offline history: every new event's features (rolling), or every session
  the watermark closed (sessions);
- the state to keep: what a frame of a future on-time event (time >= the
  watermark, epoch ns) can still reach.

A plain rolling view with an integer join key keeps its state as runs sorted by
(entity, time) (:mod:`featureflow.state_runs`) and computes only the frames it
emits, at query points (:func:`featureflow.features.features_at`): each new
event's and each touched entity's latest, reading only the touched entities'
events that those frames reach. Otherwise (tiled views keeping tile partials,
session views, other keys) the state stays in event-time order and the
kernels see only the events (state and new) of the entities the new events
touch — plus, for a session view, those whose oldest session the watermark may
close — since an entity's frames and sessions hold its own events only; the
other entities' state is carried over as it is (pruned by time alone). Outputs
equal one computation over every entity (``touched_only=False``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow import features, ops, session_runs, session_state, state_runs, tiles
from featureflow.columns import EVENT_NS
from featureflow.features import FrameStatesByColumn, aggregated_columns
from featureflow.ops import KeyedRows
from featureflow.ops._resume import float_values
from featureflow.repo import SESSION_START, StreamViewSpec
from featureflow.session_state import SessionStates
from featureflow.state_delta import (
    RUNS,
    SESSIONS,
    TIME,
    StateDelta,
    in_time_order,
    keep_from_table,
    runs_with,
)


def with_event_timestamp(table: pa.Table, spec: StreamViewSpec) -> pa.Table:
    """Replace the epoch-ns column by the view's timestamp field, timestamp[us, UTC] (Feast's)."""
    # Event times arrive with millisecond precision: truncating ns to us loses nothing.
    stamps = (
        table.column(EVENT_NS)
        .cast(pa.timestamp("ns", tz="UTC"))
        .cast(pa.timestamp("us", tz="UTC"), safe=False)
    )
    return table.drop_columns([EVENT_NS]).add_column(1, spec.timestamp_field, stamps)


def online_rows(
    per_event: pa.Table, spec: StreamViewSpec, entities: pa.ChunkedArray | None = None
) -> pa.Table:
    """The online-store rows: per entity, its features as of its latest event.

    Args:
        per_event: :func:`featureflow.features.event_features` of the events.
        entities: only the rows of these entities (the ones new events touched).
    Returns:
        Columns: the join key, the view's timestamp field, the features.
    """
    latest = features.latest_per_entity(per_event, spec.join_key)
    if entities is not None:
        latest = latest.filter(pc.is_in(latest.column(spec.join_key), pc.unique(entities)))
    return with_event_timestamp(latest, spec)


def touched_rows(
    events: pa.Table, is_new: np.ndarray, join_key: str, also: pa.Array | None = None
) -> np.ndarray:
    """Which rows (bool per row) belong to an entity of a new event (``is_new``) or of ``also``."""
    keys = events.column(join_key)
    wanted = pc.unique(keys.filter(pa.array(is_new)))
    if also is not None:
        wanted = pc.unique(pa.concat_arrays([wanted, also.cast(wanted.type)]))
    return np.asarray(pc.is_in(keys, value_set=wanted).to_numpy(zero_copy_only=False))


@dataclass(frozen=True)
class StateStep:
    """A view's results for a partition's micro-batch, with its state's change.

    ``kept`` (and ``kept_tiles``) is the new state; ``delta`` (``tiles_delta``) is how
    it follows from the state the batch read (:class:`featureflow.state_delta.StateDelta`:
    ``delta.apply(prior)`` rebuilds ``kept`` exactly).
    """

    rows: pa.Table
    history: pa.Table
    kept: pa.Table
    delta: StateDelta | None
    """None: ``kept`` is to be saved whole (a session batch that rewrote its state)."""
    kept_tiles: pa.Table | None = None
    tiles_delta: StateDelta | None = None
    frames: FrameStatesByColumn | SessionStates | None = None
    """A runs-ordered view's frame states for ``kept`` (:func:`rolling_step`), or a
    session view's kept sessions (:func:`session_step`)."""


def rolling_outputs(
    events: pa.Table,
    new_rows: int,
    spec: StreamViewSpec,
    watermark_ns: int,
    tile_state: pa.Table | None = None,
    *,
    touched_only: bool = True,
) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table | None]:
    """Rolling (or tiled) view: (online rows, offline history, events to keep, tiles to keep).

    ``events`` are the partition's state followed by its ``new_rows`` new events.
    Online: the touched entities as of their latest event; offline: every new
    event's features, in event-time order (a view whose state is runs, below: by
    entity, then event time, equal times in arrival order). State, in event-time
    order: what a frame of a future on-time event (time >= ``watermark_ns``) can
    reach. A plain view keeps the events at or after ``watermark - W`` and no tiles
    (None). A tiled view whose aggregates merge (:func:`featureflow.tiles.compactable`)
    keeps per-entity tile partials of the events before the compaction bound and
    the raw events after it, so its state is bounded by W / hop tiles per
    entity; ``tile_state`` is its earlier tiles.

    A view whose join key is an integer and that keeps no tiles holds its state as
    runs sorted by (entity, time) (:mod:`featureflow.state_runs`) and computes only
    the frames it emits (:func:`featureflow.features.features_at`): each new event's
    and each touched entity's latest, reading only the touched entities' events within
    reach (``touched_only`` False: also every other entity's latest frame, then
    dropped; the same outputs). Other views: the kernels compute the touched entities'
    events only (``touched_only``; False: every entity's, the same outputs).
    """
    step = rolling_step(events, new_rows, spec, watermark_ns, tile_state, touched_only=touched_only)
    return step.rows, step.history, step.kept, step.kept_tiles


def rolling_step(
    events: pa.Table,
    new_rows: int,
    spec: StreamViewSpec,
    watermark_ns: int,
    tile_state: pa.Table | None = None,
    *,
    touched_only: bool = True,
    frames: FrameStatesByColumn | None = None,
    frames_owned: bool = False,
) -> StateStep:
    """:func:`rolling_outputs` with the state's deltas: the new events appended, then the
    runs compacted at the earliest time a future frame reaches (runs), or the events
    before it (time order; tiled: before the compaction bound) dropped, and for a tiled
    view the closed tiles' partials appended and the tiles no frame reaches dropped.

    A runs-ordered view also returns its frame states (``StateStep.frames``: each
    entity's frames at its latest event, on the Mojo backend); given back as ``frames``
    with the state table they came with (``kept``) as the next batch's state, they let
    its frames resume instead of summing each touched entity's window again, so the
    batch costs what enters and leaves the frames. Other ``frames`` are wrong inputs.
    ``frames_owned``: the caller needs ``frames`` no more (the job took them from its
    state store), so the step may update them in place into ``StateStep.frames``."""
    key_type = events.schema.field(spec.join_key).type
    if not tiles.compactable(spec) and pa.types.is_integer(key_type):
        return _rolling_at_queries(
            events, new_rows, spec, watermark_ns, touched_only, frames, frames_owned
        )
    appended = events.slice(events.num_rows - new_rows)
    events, is_new = in_time_order(events, new_rows)
    computed = events
    if touched_only:
        touched = touched_rows(events, is_new, spec.join_key)
        computed, is_new = events.filter(pa.array(touched)), is_new[touched]
    new_mask = pa.array(is_new)
    kept_tiles, tiles_delta = None, None
    if tiles.compactable(spec):
        key_type = events.schema.field(spec.join_key).type
        earlier = tile_state if tile_state is not None else tiles.empty_tiles(spec, key_type)
        theirs = pc.is_in(
            earlier.column(spec.join_key), value_set=pc.unique(computed.column(spec.join_key))
        )
        per_event = tiles.event_features(computed, earlier.filter(theirs), spec)
        bound, tiles_delta = tiles.compaction(events, spec, watermark_ns)
        delta = StateDelta(appended, TIME, cut=bound)
        kept_tiles = tiles_delta.apply(tile_state)
    else:
        per_event = features.event_features(computed, spec)
        delta = StateDelta(appended, TIME, cut=_keep_from_ns(spec, watermark_ns))
    rows = online_rows(per_event, spec, entities=computed.column(spec.join_key).filter(new_mask))
    history = with_event_timestamp(per_event.filter(new_mask), spec)
    return StateStep(rows, history, delta.evict(events), delta, kept_tiles, tiles_delta)


def _keep_from_ns(spec: StreamViewSpec, watermark_ns: int) -> int:
    """The earliest event time a frame of an on-time event (time >= the watermark) reaches."""
    keep_from_ns = watermark_ns - max(spec.windows_ns)
    if spec.tile_hop_ns:  # a tiled frame starts at floor((t - W) / hop) * hop
        keep_from_ns = (keep_from_ns // spec.tile_hop_ns) * spec.tile_hop_ns
    return keep_from_ns


def _rolling_at_queries(
    events: pa.Table, new_rows: int, spec: StreamViewSpec, watermark_ns: int,
    touched_only: bool, frames: FrameStatesByColumn | None, frames_owned: bool = False,
) -> StateStep:  # fmt: skip
    """:func:`rolling_step` of a view whose state is runs (see :func:`rolling_outputs`)."""
    key = spec.join_key
    state_rows = events.num_rows - new_rows
    new = events.slice(state_rows)
    runs = runs_with(events.slice(0, state_rows), new, key)
    # the history comes in the new events' run order, by entity, then event time (ties
    # in arrival order): with the online queries (one per entity, in key order) the
    # queries are two sorted pieces, whose outputs the kernels write in place
    # (`ops._query.plan`), and the offline files compress better than in time order
    new_run = runs[-1] if new.num_rows else new
    new_keys = np.asarray(new_run.column(key).to_numpy())
    new_ts = np.asarray(new_run.column(EVENT_NS).to_numpy())
    touched = np.unique(new_keys)
    online = touched if touched_only else state_runs.entity_keys(runs, key)
    at_keys = np.concatenate([new_keys, online]).astype(np.int64)
    at_ts = np.concatenate([new_ts, state_runs.latest_times(runs, key, online)])
    cut = _keep_from_ns(spec, watermark_ns)
    delta = StateDelta(new, RUNS, cut=cut, key=key)
    kept = delta.from_runs(runs)
    # no row left the runs: the other entities' frames still hold only rows the runs
    # have, so they stay resumable, and the batch's are written among them
    all_stay = kept.num_rows == sum(run.num_rows for run in runs)
    # the new events are the last run (runs_with); each touched entity's last query is
    # at its latest event, as keeping its frame requires
    computed, kept_frames = features.features_at_resuming(
        runs, spec, at_keys, at_ts, frames=frames, clip_ns=cut,
        added_run=len(runs) - 1 if new.num_rows else None,
        in_place=frames_owned and all_stay,
    )  # fmt: skip
    history = with_event_timestamp(computed.slice(0, new_rows), spec)
    latest = computed.slice(new_rows)
    if not touched_only:
        latest = latest.filter(
            pc.is_in(latest.column(key), pa.array(touched, latest.column(key).type))
        )
    rows = with_event_timestamp(latest, spec)
    if frames and all_stay and not frames_owned:  # in place, they hold every key already
        kept_frames = {
            column: frames[column].updated_by(states) if column in frames else states
            for column, states in kept_frames.items()
        }
    return StateStep(rows, history, kept, delta, frames=kept_frames or None)


def session_outputs(
    events: pa.Table,
    new_rows: int,
    spec: StreamViewSpec,
    watermark_ns: int,
    *,
    touched_only: bool = True,
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Session view: (online rows, offline history, state to keep).

    A session is final once the watermark passes its end (last event + gap <
    ``watermark_ns``) or its length cap (first event + max length <
    ``watermark_ns``): the job accepts only events at or after the watermark, and
    none of those can join it (each is past the gap, or more than the max length
    after its first event; it opens the next session, whatever the closed one held).
    So a session closes by length as soon as the watermark allows, not only when its
    entity's next event arrives, and the state of an entity that is never idle for a
    gap holds at most max length + watermark delay of its events. Online: each
    touched entity's latest session, open or not, updated every batch; offline:
    the sessions that closed in this batch (each session exactly once, since a
    closed session's events leave the state); state: the events of open sessions.

    The kernels compute the sessions of the entities new events touch and of those
    with an event before ``watermark - min(gap, max length)`` (``touched_only``;
    False: every entity's, the same outputs): any other entity has only open
    sessions (each ends at or after its first event + gap >= the watermark, and
    its first event + max length >= the watermark) that no new event changed, so
    its events stay in the state as they are.
    """
    step = session_step(events, new_rows, spec, watermark_ns, touched_only=touched_only)
    return step.rows, step.history, step.kept


def session_step(
    events: pa.Table,
    new_rows: int,
    spec: StreamViewSpec,
    watermark_ns: int,
    *,
    touched_only: bool = True,
    states: SessionStates | None = None,
) -> StateStep:
    """:func:`session_outputs` with the state's delta.

    A view whose sessions :mod:`featureflow.session_state` can keep (integer join key,
    float64 values, count/sum/mean/min/max) holds its state as runs sorted by (entity,
    time) (:mod:`featureflow.session_runs`) and its open sessions as records
    (``StateStep.frames``, a :class:`~featureflow.session_state.SessionStates`): given
    back as ``states`` with the state table they came with (``kept``), the next batch
    extends its entities' sessions from them and reads back from the runs only what an
    out-of-order event needs; without them it first builds them from the runs (one
    pass). The delta appends the new events as a run, raises the state's closed
    watermark and, once the runs hold more closed sessions' events than open ones'
    (or too many runs), compacts them. Other views, and ``touched_only=False`` (the
    oracle: every entity computed from its events), take
    :func:`session_step_in_time_order`. Both give the same online rows, offline history
    and state events (:func:`state_events`), for event times in whole microseconds
    (the job's are milliseconds: a session's start is kept to the microsecond).
    """
    key = spec.join_key
    if not touched_only or not session_state.supported(spec, events.schema):
        state_rows = events.num_rows - new_rows
        if session_runs.is_session_runs(events.slice(0, state_rows)):
            events = pa.concat_tables([
                state_events(events.slice(0, state_rows), spec),
                events.slice(state_rows).cast(session_runs.plain_schema(events.schema)),
            ])  # fmt: skip
        return session_step_in_time_order(
            events, new_rows, spec, watermark_ns, touched_only=touched_only
        )
    state_rows = events.num_rows - new_rows
    prior, new = events.slice(0, state_rows), events.slice(state_rows)
    closed_before = session_runs.closed_ns(prior)
    new_keys = session_runs.numpy_int64(new.column(key))
    new_ts = session_runs.numpy_int64(new.column(EVENT_NS))
    if closed_before is not None and new_rows and int(new_ts.min()) < closed_before:
        return _session_step_rewritten(events, new_rows, spec, watermark_ns)
    columns = aggregated_columns(spec)
    runs = session_runs.runs_of(prior, key)
    run_columns = session_runs.run_columns(runs, key, columns)
    if states is None or states.signature != session_state.signature(spec):
        states = session_state.build(run_columns, spec, closed_before)
    order, touched, offsets = ops.sort_run(new_keys, new_ts)
    new_run = new.take(pa.array(order)).combine_chunks() if new_rows else new
    arrived = KeyedRows(
        new_ts[order], [float_values(new_run.column(c)) for c in columns], offsets
    )
    advanced = session_state.advance(
        states, run_columns, touched, arrived, spec, watermark_ns
    )
    key_type = events.schema.field(key).type
    rows = session_state.feature_rows(advanced.latest, spec, key_type)
    history = session_state.feature_rows(advanced.closed, spec, key_type)
    closed = watermark_ns if closed_before is None else max(closed_before, watermark_ns)
    if new_rows:
        runs.append(new_run)
        run_columns += session_runs.run_columns([new_run], key, [])
    held = sum(run.num_rows for run in runs)
    live = advanced.states.live_rows
    keep_from = None
    if session_runs.compaction_due(held, live, len(runs)):
        bound_keys, bounds = advanced.states.bounds()
        keep_from = keep_from_table(pa.array(bound_keys), bounds, key)
        runs = session_runs.compact(runs, run_columns, bound_keys, bounds, live)
    delta = StateDelta(new, SESSIONS, key=key, keep_from=keep_from, closed=closed)
    kept = session_runs.state_table(runs, new.schema, closed)
    return StateStep(rows, history, kept, delta, frames=advanced.states)


def _session_step_rewritten(
    events: pa.Table, new_rows: int, spec: StreamViewSpec, watermark_ns: int
) -> StateStep:
    """A batch with an event before the watermark the state closed its sessions under
    (the job never has one: it dead-letters them): such an event may fall among closed
    sessions' rows still in the runs, so the batch computes in time order over the
    state's events (:func:`state_events`) and the new ones, and writes its state whole
    (no delta): one run of exactly its open sessions' events, closed under the batch's
    watermark."""
    state_rows = events.num_rows - new_rows
    plain = session_runs.plain_schema(events.schema)
    logical = pa.concat_tables([
        state_events(events.slice(0, state_rows), spec),
        events.slice(state_rows).cast(plain),
    ])  # fmt: skip
    step = session_step_in_time_order(logical, new_rows, spec, watermark_ns)
    run = session_runs.runs_of(step.kept, spec.join_key)
    kept = session_runs.state_table(run, plain, watermark_ns)
    return StateStep(step.rows, step.history, kept, None)


def state_events(state: pa.Table, spec: StreamViewSpec) -> pa.Table:
    """The events a session view's state table holds, in time order (ties in arrival
    order per entity): a table in runs (:mod:`featureflow.session_runs`) without the rows
    of its closed sessions; any other table as it is."""
    if not session_runs.is_session_runs(state):
        return state
    key = spec.join_key
    runs = session_runs.runs_of(state, key)
    columns = session_runs.run_columns(runs, key, aggregated_columns(spec))
    states = session_state.build(columns, spec, session_runs.closed_ns(state))
    bound_keys, bounds = states.bounds()
    live = session_runs.compact(runs, columns, bound_keys, bounds)
    plain = session_runs.plain_schema(state.schema)
    table = pa.concat_tables(live).cast(plain) if live else plain.empty_table()
    events, _ = in_time_order(table, 0)
    return events


def session_step_in_time_order(
    events: pa.Table,
    new_rows: int,
    spec: StreamViewSpec,
    watermark_ns: int,
    *,
    touched_only: bool = True,
) -> StateStep:
    """:func:`session_outputs` over a state kept in time order (the views
    :func:`session_step` keeps no sessions of, and its oracle): the new events appended,
    the state sorted by time, and of each entity the kernels computed, the events
    before its first open session dropped (all of them when it has none open)."""
    assert spec.session_gap_ns is not None
    gap, max_length = spec.session_gap_ns, spec.session_max_length_ns
    appended = events.slice(events.num_rows - new_rows)
    everything, is_new = in_time_order(events, new_rows)
    events = everything
    if touched_only:
        may_close = pc.less(everything.column(EVENT_NS), watermark_ns - min(gap, max_length))
        closing = everything.column(spec.join_key).filter(may_close).combine_chunks()
        computed_rows = touched_rows(everything, is_new, spec.join_key, closing)
        events, is_new = everything.filter(pa.array(computed_rows)), is_new[computed_rows]
    sessions = features.session_features(events, spec)
    new_keys = events.column(spec.join_key).filter(pa.array(is_new))
    # Without new events no entity is touched: no rows, but in the online rows' schema
    # (a partition can close sessions in a batch that brought it nothing).
    rows = online_rows(sessions, spec, entities=new_keys)
    last_ns = sessions.column(EVENT_NS).to_numpy()
    start_ns = sessions.column(SESSION_START).cast(pa.int64()).to_numpy() * 1_000
    closed = pa.array((last_ns + gap < watermark_ns) | (start_ns + max_length < watermark_ns))
    history = with_event_timestamp(sessions.filter(closed), spec)
    open_sessions = sessions.filter(pc.invert(closed))
    # Keep an entity's events from its first open session's start on (none: drop them all).
    computed = pc.unique(events.column(spec.join_key))
    starts = open_sessions.column(SESSION_START).cast(pa.int64()).to_numpy() * 1_000
    at = pc.index_in(computed, open_sessions.column(spec.join_key))
    has_open = pc.is_valid(at).to_numpy(zero_copy_only=False)
    keep_from = np.full(len(computed), np.iinfo(np.int64).max, dtype=np.int64)
    keep_from[has_open] = starts[at.filter(pc.is_valid(at)).to_numpy()]
    delta = StateDelta(
        appended, TIME, key=spec.join_key,
        keep_from=keep_from_table(computed, keep_from, spec.join_key),
    )  # fmt: skip
    return StateStep(rows, history, delta.evict(everything), delta)
