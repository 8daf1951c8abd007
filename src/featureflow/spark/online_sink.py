"""The executor side of the stream job: features of a partition's events -> Feast online store.

Runs inside ``mapInArrow`` on Spark's Python workers: it receives the Arrow
record batches of one partition (all events of the entities hashed to it),
computes the view's features with :mod:`featureflow.features` (Mojo kernels
reading the Arrow buffers in place), and upserts the latest row per entity
into the online store. It yields one small stats row per partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from featureflow import features, ops
from featureflow.repo import StreamViewSpec
from featureflow.spark.metrics import freshness_histogram
from featureflow.spark.offline_sink import OfflineFeatureLog
from featureflow.spark.parse import EVENT_NS
from featureflow.spark.state import StateStore

if TYPE_CHECKING:
    from feast import FeatureStore

    from featureflow.schema import FeatureSchema

log = logging.getLogger(__name__)

STATS_SCHEMA = "rows long, entities long, state_rows long, backend string, freshness array<long>"
"""Spark DDL of what each partition reports back to the driver."""

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


@dataclass(frozen=True)
class OnlineFeatureWriter:
    """``mapInArrow`` function of batch ``batch_id``: one partition's features -> online store.

    The partition's events from earlier batches (its ``state``) and the new
    ones are computed together, so windows span micro-batches; the entities
    of the new events get their features as of their latest event (online
    store), and every new event its features (``offline`` training history). Afterwards
    the state keeps the events at or after ``keep_from_ns`` (the oldest that a
    frame of a future on-time event can reach). With a ``feature_schema`` every
    batch's Arrow schema passes the schema gate before anything is written.
    """

    spec: StreamViewSpec
    repo_path: str
    batch_id: int
    state: StateStore
    keep_from_ns: int
    offline: OfflineFeatureLog
    feature_schema: FeatureSchema | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        received = [batch for batch in batches if batch.num_rows]
        if not received:
            return  # nothing new: the newest state version stays valid
        context = TaskContext.get()
        assert context is not None, "runs inside a Spark task"
        partition = context.partitionId()
        new_events = pa.Table.from_batches(received)
        prior = self.state.load_events(partition, before_batch=self.batch_id)
        events = (
            new_events
            if prior is None
            else pa.concat_tables([prior, new_events.cast(prior.schema)])
        )
        per_event = features.event_features(events, self.spec)
        rows = online_rows(per_event, self.spec, entities=new_events.column(self.spec.join_key))
        history = with_event_timestamp(
            per_event.slice(events.num_rows - new_events.num_rows), self.spec
        )
        if self.feature_schema is not None:
            from featureflow.schema import check_batch

            check_batch(rows.schema, self.feature_schema)
            check_batch(history.schema, self.feature_schema)
        write_online(_store(str(Path(self.repo_path))), self.spec, rows)
        freshness = freshness_histogram(new_events.column(EVENT_NS).to_numpy(), time.time_ns())
        self.offline.write(self.batch_id, partition, history)
        kept = events.filter(pc.greater_equal(events.column(EVENT_NS), self.keep_from_ns))
        self.state.save_events(partition, self.batch_id, kept)
        yield pa.RecordBatch.from_pydict(
            {
                "rows": [new_events.num_rows],
                "entities": [rows.num_rows],
                "state_rows": [kept.num_rows],
                "backend": [ops.backend()],
                "freshness": [freshness],
            }
        )
