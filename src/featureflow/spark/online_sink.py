"""The executor side of the stream job: features of a partition's events -> Feast online store.

Runs inside ``mapInArrow`` on Spark's Python workers: it receives the Arrow
record batches of one partition (all events of the entities hashed to it),
computes the view's features with :mod:`featureflow.features` (Mojo kernels
reading the Arrow buffers in place), and upserts the latest row per entity
into the online store. It yields one small stats row per partition.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from featureflow import features, ops
from featureflow.repo import StreamViewSpec
from featureflow.spark.parse import EVENT_NS

if TYPE_CHECKING:
    from feast import FeatureStore

log = logging.getLogger(__name__)

STATS_SCHEMA = "rows long, entities long, backend string"
"""Spark DDL of what each partition reports back to the driver."""

_stores: dict[str, FeatureStore] = {}


def _store(repo_path: str) -> FeatureStore:
    # Python workers are reused across tasks: open each repo once per worker.
    if repo_path not in _stores:
        from featureflow.repo import load_store

        _stores[repo_path] = load_store(repo_path)
    return _stores[repo_path]


def online_rows(events: pa.Table, spec: StreamViewSpec) -> pa.Table:
    """The online-store rows of a set of events: per entity, its features as of its latest event.

    Columns: the join key, the view's timestamp field (timestamp[ns, UTC]), the features.
    """
    latest = features.latest_per_entity(features.event_features(events, spec), spec.join_key)
    stamps = latest.column(EVENT_NS).cast(pa.timestamp("ns", tz="UTC"))
    return latest.drop_columns([EVENT_NS]).add_column(1, spec.timestamp_field, stamps)


def write_online(store: FeatureStore, spec: StreamViewSpec, rows: pa.Table) -> None:
    """Upsert ``rows`` into the view's online store."""
    store.write_to_online_store(spec.name, rows.to_pandas())


@dataclass(frozen=True)
class OnlineFeatureWriter:
    """``mapInArrow`` function: compute and write one partition's features; yield its stats."""

    spec: StreamViewSpec
    repo_path: str

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = [batch for batch in batches if batch.num_rows]
        if not received:
            return
        events = pa.Table.from_batches(received)
        rows = online_rows(events, self.spec)
        write_online(_store(str(Path(self.repo_path))), self.spec, rows)
        yield pa.RecordBatch.from_pydict(
            {"rows": [events.num_rows], "entities": [rows.num_rows], "backend": [ops.backend()]}
        )
