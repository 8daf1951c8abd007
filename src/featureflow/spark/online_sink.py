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
from typing import TYPE_CHECKING

import pyarrow as pa

from featureflow import ops, tiles
from featureflow.columns import EVENT_NS
from featureflow.repo import StreamViewSpec, cached_store
from featureflow.spark import failpoints
from featureflow.spark.metrics import freshness_histogram
from featureflow.spark.offline_sink import OfflineFeatureLog
from featureflow.spark.state import StateStore
from featureflow.window_state import rolling_outputs, session_outputs

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


def write_online(store: FeatureStore, spec: StreamViewSpec, rows: pa.Table) -> None:
    """Upsert ``rows`` into the view's online store; rows older than the stored ones are skipped."""
    from featureflow import online

    online.write(store, spec.name, rows)


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
        stats = self.run_partition(context.partitionId(), received)
        if stats is not None:
            yield stats

    def run_partition(
        self, partition: int, received: list[pa.RecordBatch]
    ) -> pa.RecordBatch | None:
        """Shuffle partition ``partition``'s work in this batch, outside any Spark task.

        ``received`` are its non-empty record batches of new events. Returns the
        stats row (:data:`STATS_SCHEMA`, ``seconds`` per :data:`EXECUTOR_PHASES`),
        or None when the batch changed nothing (the newest state version stays valid).
        """
        clock = _PhaseClock()
        prior = self.state.load_events(partition, before_batch=self.batch_id)
        if not received and prior is None:
            return None
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
            return None  # no session closed: the newest state version stays valid
        if self.feature_schema is not None:
            from featureflow.schema import check_batch

            check_batch(rows.schema, self.feature_schema)
            check_batch(history.schema, self.feature_schema)
        if rows.num_rows:
            store = cached_store(self.repo_path)
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
        return pa.RecordBatch.from_pydict(
            {
                "rows": [new_rows],
                "entities": [rows.num_rows],
                "state_rows": [kept.num_rows + (0 if kept_tiles is None else kept_tiles.num_rows)],
                "backend": [ops.backend()],
                "freshness": [freshness],
                "seconds": [[clock.seconds[phase] for phase in EXECUTOR_PHASES]],
            }
        )
