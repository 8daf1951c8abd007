"""The executor side of the stream job: features of a partition's events -> Feast online store.

Runs inside ``mapInArrow`` on Spark's Python workers: it receives the Arrow
record batches of one partition (all events of the entities hashed to it),
computes the view's rolling or session features with :mod:`featureflow.features`
(Mojo kernels reading the Arrow buffers in place), upserts the latest row per
entity into the online store and appends the history to the offline log. It
yields one small stats row per partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow import features, ops, tiles
from featureflow.repo import SESSION_START, StreamViewSpec
from featureflow.spark import failpoints
from featureflow.spark.metrics import freshness_histogram
from featureflow.spark.offline_sink import OfflineFeatureLog
from featureflow.spark.parse import EVENT_NS
from featureflow.spark.state import StateStore

if TYPE_CHECKING:
    from feast import FeatureStore

    from featureflow.schema import FeatureSchema

log = logging.getLogger(__name__)

STATS_SCHEMA = (
    "rows long, entities long, state_rows long, backend string, freshness array<long>, "
    "seconds array<double>"
)
"""Spark DDL of what each partition reports back to the driver."""
EXECUTOR_PHASES = ("state_load", "compute", "online_write", "offline_write", "state_save")
"""The phases of a partition's work, in order: ``seconds`` of the stats row, one per phase."""

_stores: dict[str, FeatureStore] = {}


def _store(repo_path: str) -> FeatureStore:
    # Python workers are reused across tasks: open each repo once per worker.
    if repo_path not in _stores:
        from featureflow.repo import load_store

        _stores[repo_path] = load_store(repo_path)
    return _stores[repo_path]


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


def write_online(store: FeatureStore, spec: StreamViewSpec, rows: pa.Table) -> None:
    """Upsert ``rows`` into the view's online store; rows older than the stored ones are skipped."""
    from featureflow import online

    online.write(store, spec.name, rows)


def in_time_order(events: pa.Table, new_rows: int) -> tuple[pa.Table, np.ndarray]:
    """``events`` (state, then ``new_rows`` new events) sorted by event time, and which
    rows are new (bool per sorted row).

    The sort is stable: equal times keep their order, state before new events.
    The kernels take their in-order passes on time-ordered input, and state saved
    from sorted events stays sorted, so the next batch's sort only merges it with
    the (nearly sorted) new events.
    """
    ts = events.column(EVENT_NS).to_numpy()
    first_new = events.num_rows - new_rows
    if len(ts) < 2 or bool(np.all(ts[1:] >= ts[:-1])):
        return events, np.arange(events.num_rows) >= first_new
    order = np.argsort(ts, kind="stable")
    return events.take(order), order >= first_new


def rolling_outputs(
    events: pa.Table,
    new_rows: int,
    spec: StreamViewSpec,
    watermark_ns: int,
    tile_state: pa.Table | None = None,
) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table | None]:
    """Rolling (or tiled) view: (online rows, offline history, events to keep, tiles to keep).

    ``events`` are the partition's state followed by its ``new_rows`` new events.
    Online: the touched entities as of their latest event; offline: every new
    event's features, in event-time order. State, in event-time order: what a
    frame of a future on-time event (time >= ``watermark_ns``) can reach. A plain
    view keeps the events at or after ``watermark - W`` and no tiles (None). A
    tiled view whose aggregates merge (:func:`featureflow.tiles.compactable`)
    keeps per-entity tile partials of the events before the compaction bound and
    the raw events after it, so its state is bounded by W / hop tiles per
    entity; ``tile_state`` is its earlier tiles.
    """
    events, is_new = in_time_order(events, new_rows)
    new_mask = pa.array(is_new)
    if tiles.compactable(spec):
        key_type = events.schema.field(spec.join_key).type
        earlier = tile_state if tile_state is not None else tiles.empty_tiles(spec, key_type)
        per_event = tiles.event_features(events, earlier, spec)
        kept, kept_tiles = tiles.compact(events, earlier, spec, watermark_ns)
    else:
        per_event = features.event_features(events, spec)
        keep_from_ns = watermark_ns - max(spec.windows_ns)
        if spec.tile_hop_ns:  # a tiled frame starts at floor((t - W) / hop) * hop
            keep_from_ns = (keep_from_ns // spec.tile_hop_ns) * spec.tile_hop_ns
        kept = events.filter(pc.greater_equal(events.column(EVENT_NS), keep_from_ns))
        kept_tiles = None
    rows = online_rows(per_event, spec, entities=events.column(spec.join_key).filter(new_mask))
    history = with_event_timestamp(per_event.filter(new_mask), spec)
    return rows, history, kept, kept_tiles


def session_outputs(
    events: pa.Table, new_rows: int, spec: StreamViewSpec, watermark_ns: int
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Session view: (online rows, offline history, state to keep).

    A session is final once the watermark passes its end (last event + gap <
    ``watermark_ns``): no event the job still accepts can join it. Online: each
    touched entity's latest session, open or not, updated every batch; offline:
    the sessions that closed in this batch (each session exactly once, since a
    closed session's events leave the state); state: the events of open sessions.
    """
    assert spec.session_gap_ns is not None
    events, is_new = in_time_order(events, new_rows)
    sessions = features.session_features(events, spec)
    new_keys = events.column(spec.join_key).filter(pa.array(is_new))
    # Without new events no entity is touched: no rows, but in the online rows' schema
    # (a partition can close sessions in a batch that brought it nothing).
    rows = online_rows(sessions, spec, entities=new_keys)
    last_ns = sessions.column(EVENT_NS)
    closed = pc.less(pc.add(last_ns, spec.session_gap_ns), watermark_ns)
    history = with_event_timestamp(sessions.filter(closed), spec)
    open_sessions = sessions.filter(pc.invert(closed))
    # Keep an event when its entity has an open session that started at or before it.
    starts = open_sessions.column(SESSION_START).cast(pa.int64()).to_numpy() * 1_000
    at = pc.index_in(events.column(spec.join_key), open_sessions.column(spec.join_key))
    has_open = pc.is_valid(at).to_numpy(zero_copy_only=False)
    start_of_event = np.full(events.num_rows, np.iinfo(np.int64).max, dtype=np.int64)
    start_of_event[has_open] = starts[at.filter(pc.is_valid(at)).to_numpy()]
    kept = events.filter(pa.array(events.column(EVENT_NS).to_numpy() >= start_of_event))
    return rows, history, kept


class _PhaseClock:
    """Wall seconds per phase of a partition's work (:data:`EXECUTOR_PHASES`)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(EXECUTOR_PHASES, 0.0)
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] += now - self._last
        self._last = now


@dataclass(frozen=True)
class OnlineFeatureWriter:
    """``mapInArrow`` function of batch ``batch_id``: one partition's features -> online store.

    The partition's events from earlier batches (its ``state``) and the new
    ones are computed together, so windows and sessions span micro-batches
    (:func:`rolling_outputs`, :func:`session_outputs`); the online rows go to
    the online store, the history to the ``offline`` log, and the state keeps
    what future on-time events (time >= ``watermark_ns``) still need. With a
    ``feature_schema`` every batch's Arrow schema passes the schema gate before
    anything is written.
    """

    spec: StreamViewSpec
    repo_path: str
    batch_id: int
    state: StateStore
    watermark_ns: int
    offline: OfflineFeatureLog
    feature_schema: FeatureSchema | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        received = [batch for batch in batches if batch.num_rows]
        # A session view also runs without new events: the watermark may close sessions.
        if not received and not self.spec.is_session_view:
            return  # nothing new: the newest state version stays valid
        context = TaskContext.get()
        assert context is not None, "runs inside a Spark task"
        partition = context.partitionId()
        clock = _PhaseClock()
        prior = self.state.load_events(partition, before_batch=self.batch_id)
        if not received and prior is None:
            return
        prior_tiles = (
            self.state.load_tiles(partition, before_batch=self.batch_id)
            if tiles.compactable(self.spec)
            else None
        )
        new_events = pa.Table.from_batches(received) if received else None
        parts = [table for table in (prior, new_events) if table is not None]
        events = pa.concat_tables([parts[0], *(t.cast(parts[0].schema) for t in parts[1:])])
        new_rows = 0 if new_events is None else new_events.num_rows
        clock.lap("state_load")
        if self.spec.is_session_view:
            rows, history, kept = session_outputs(events, new_rows, self.spec, self.watermark_ns)
            kept_tiles = None
        else:
            rows, history, kept, kept_tiles = rolling_outputs(
                events, new_rows, self.spec, self.watermark_ns, prior_tiles
            )
        clock.lap("compute")
        if not new_rows and not history.num_rows:
            return  # no session closed: the newest state version stays valid
        if self.feature_schema is not None:
            from featureflow.schema import check_batch

            check_batch(rows.schema, self.feature_schema)
            check_batch(history.schema, self.feature_schema)
        if rows.num_rows:
            store = _store(str(Path(self.repo_path)))
            if failpoints.armed("mid_online_write", self.batch_id):
                write_online(store, self.spec, rows.slice(0, rows.num_rows // 2))
                failpoints.reach("mid_online_write", self.batch_id)
            write_online(store, self.spec, rows)
        clock.lap("online_write")
        new_ns = events.column(EVENT_NS).slice(events.num_rows - new_rows).to_numpy()
        freshness = freshness_histogram(new_ns, time.time_ns())
        if history.num_rows:
            self.offline.write(self.batch_id, partition, history)
        clock.lap("offline_write")
        if kept_tiles is not None:  # before the events: a reader takes both of one version
            self.state.save_tiles(partition, self.batch_id, kept_tiles)
        self.state.save_events(partition, self.batch_id, kept)
        clock.lap("state_save")
        yield pa.RecordBatch.from_pydict(
            {
                "rows": [new_rows],
                "entities": [rows.num_rows],
                "state_rows": [kept.num_rows + (0 if kept_tiles is None else kept_tiles.num_rows)],
                "backend": [ops.backend()],
                "freshness": [freshness],
                "seconds": [[clock.seconds[phase] for phase in EXECUTOR_PHASES]],
            }
        )
