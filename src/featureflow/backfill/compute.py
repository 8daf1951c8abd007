"""The executor side of a backfill: one shuffle partition's events -> staged per-event features.

Runs inside ``mapInArrow``. Spark hands the partition over in Arrow batches
of at most ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows; they are
concatenated first, so every entity's events (the partition holds all events
of the entities hashed to it) are computed in one call of
:func:`featureflow.features.event_features`, the stream job's code path. The
events before the range start are context: they fill the windows of the
events after it and are not emitted. Bad rows are counted per field and
reason, with a few samples of where they came from, and yielded in the stats.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from featureflow import features, ops
from featureflow.backfill.output import DayStore
from featureflow.backfill.source import ERROR_AT
from featureflow.backfill.timerange import TimeRange
from featureflow.columns import EVENT_NS
from featureflow.repo import StreamViewSpec, cached_store
from featureflow.spark import worker_gc
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON
from featureflow.window_state import online_rows, with_event_timestamp

STATS_SCHEMA = (
    "rows long, events long, entities long, online_written long, backend string, "
    "bad_fields array<string>, bad_reasons array<string>, bad_counts array<long>, "
    "bad_samples array<string>"
)
"""Spark DDL of what each partition reports back to the driver."""

MAX_BAD_SAMPLES = 5
"""Bad rows described one by one per partition; the rest are only counted."""


def _bad_stats(bad: pa.Table) -> dict[str, list[object]]:
    counts = Counter(zip(bad.column(ERROR_FIELD).to_pylist(),
                         bad.column(ERROR_REASON).to_pylist(), strict=True))  # fmt: skip
    samples = [
        f"{at}: field {field!r}: {reason}"
        for at, field, reason in zip(
            bad.column(ERROR_AT).to_pylist()[:MAX_BAD_SAMPLES],
            bad.column(ERROR_FIELD).to_pylist()[:MAX_BAD_SAMPLES],
            bad.column(ERROR_REASON).to_pylist()[:MAX_BAD_SAMPLES],
            strict=True,
        )
    ]
    return {
        "bad_fields": [[field for field, _ in counts]],
        "bad_reasons": [[reason for _, reason in counts]],
        "bad_counts": [list(counts.values())],
        "bad_samples": [samples],
    }


def range_features(events: pa.Table, spec: StreamViewSpec, span: TimeRange) -> pa.Table:
    """The feature rows of ``span`` computed from ``events`` (the range and its context).

    Rolling or tiled view: one row per event with time in ``span``, computed
    by :func:`featureflow.features.event_features`. Session view: one row per
    session (:func:`featureflow.features.session_features`) whose last event
    time is in ``span``, as the stream job's history holds closed sessions.
    Column ``event_ns`` is the row's time.
    """
    if spec.is_session_view:
        computed = features.session_features(events, spec)
    else:
        computed = features.event_features(events, spec)
    ns = computed.column(EVENT_NS)
    inside = pc.and_(pc.greater_equal(ns, span.start_ns), pc.less(ns, span.end_ns))
    return computed.filter(inside)


@dataclass(frozen=True)
class PartitionBackfill:
    """``mapInArrow`` function: features of one partition's events, staged by day.

    With ``repo_path`` set (``--materialize``), each entity's features as of
    its latest event in the range are also upserted into the online store
    (rows older than the stored ones are skipped).
    """

    spec: StreamViewSpec
    span: TimeRange
    output: DayStore
    repo_path: str | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        received = [batch for batch in batches if batch.num_rows]
        if not received:
            return
        context = TaskContext.get()
        assert context is not None, "runs inside a Spark task"
        table = pa.Table.from_batches(received)
        is_bad = pc.is_valid(table.column(ERROR_REASON))
        bad = table.filter(is_bad)
        events = table.filter(pc.invert(is_bad)).select(
            [self.spec.join_key, EVENT_NS, *self.spec.value_columns]
        )
        emitted = range_features(events, self.spec, self.span)
        history = with_event_timestamp(emitted, self.spec)
        self.output.stage(context.partitionId(), history, self.spec.timestamp_field)
        online_written = 0
        if self.repo_path is not None and emitted.num_rows:
            rows = online_rows(emitted, self.spec)
            store = cached_store(self.repo_path)  # imports Feast as a worker does (load_store)
            from featureflow import online

            online.write(store, self.spec.name, rows)
            online_written = rows.num_rows
        yield pa.RecordBatch.from_pydict(
            {
                "rows": [emitted.num_rows],
                "events": [events.num_rows],
                "entities": [len(pc.unique(emitted.column(self.spec.join_key)))],
                "online_written": [online_written],
                "backend": [ops.backend()],
                **_bad_stats(bad),
            }
        )
        worker_gc.settle()  # PySpark collects garbage after every task of a reused worker
