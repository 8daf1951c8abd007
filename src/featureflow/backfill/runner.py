"""The driver of a backfill: read events, compute on the executors, swap days in, summarise.

Per view: the events of ``[start - context, end)`` are hash partitioned by
entity and sorted by (entity, time) within partitions; one ``mapInArrow``
call per partition (:class:`~featureflow.backfill.compute.PartitionBackfill`)
computes and stages the features of the events in ``[start, end)``; then the
driver swaps the range's days into the offline store
(:class:`~featureflow.backfill.output.DayStore`). Only per-partition stats
come back to the driver.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from featureflow.backfill import source
from featureflow.backfill.compute import STATS_SCHEMA, PartitionBackfill
from featureflow.backfill.output import DayStore
from featureflow.backfill.progress import with_progress
from featureflow.backfill.timerange import TimeRange, context_ns, lookahead_ns
from featureflow.columns import EVENT_NS
from featureflow.repo import StreamViewSpec

if TYPE_CHECKING:
    from feast import FeatureStore
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("featureflow.backfill")


@dataclass(frozen=True)
class BackfillOptions:
    """Where a backfill reads and writes. ``None`` means: the repo's default."""

    span: TimeRange
    source_path: str | None = None  # Parquet events; default: the view's FileSource
    from_kafka: bool = False  # read the view's topic instead (its retained records)
    bootstrap: str | None = None  # default: the view's KafkaSource
    kafka_options: dict[str, str] = field(default_factory=dict)
    offline_path: str | None = None  # default: <repo>/data/backfill
    materialize: bool = False  # also upsert each entity's latest features online
    partitions: int | None = None  # default: spark.sql.shuffle.partitions
    progress: bool = True


@dataclass
class BackfillSummary:
    """What a backfill of one view did (driver side)."""

    view: str
    rows: int = 0  # feature rows of the range: one per event (session view: per session)
    events: int = 0  # good events read, including the context before the range
    entities: int = 0  # distinct entities with a row in the range
    online_written: int = 0  # entity rows upserted into the online store
    days: list[str] = field(default_factory=list)  # day partitions replaced
    carried_rows: int = 0  # rows outside the range kept on partly covered days
    bad_rows: dict[tuple[str, str], int] = field(default_factory=dict)  # (field, reason) -> n
    bad_samples: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        bad = sum(self.bad_rows.values())
        return (
            f"view {self.view}: {self.rows} rows, {self.entities} entities, "
            f"{self.events} events read, {bad} bad rows, days {', '.join(self.days)}, "
            f"{self.seconds:.1f} s, {self.rows_per_second:,.0f} rows/s "
            f"(kernels: {','.join(self.backends) or '-'})"
        )


def read_events(
    spark: SparkSession, store: FeatureStore, spec: StreamViewSpec, options: BackfillOptions
) -> DataFrame:
    """The view's events of the range and its context, plus bad rows, in the standard columns."""
    if options.from_kafka:
        events = source.read_kafka(spark, spec, options.bootstrap, options.kafka_options)
    else:
        path = options.source_path or source.batch_source_path(store, spec)
        events = source.read_parquet(spark, path, spec)
    span = options.span
    return source.in_range(
        events, span.start_ns - context_ns(spec), span.end_ns + lookahead_ns(spec)
    )


def backfill_view(
    spark: SparkSession,
    store: FeatureStore,
    spec: StreamViewSpec,
    options: BackfillOptions,
) -> BackfillSummary:
    """Backfill one view over ``options.span``; see the module docstring."""
    started = time.monotonic()
    repo_path = str(store.repo_path)
    output = DayStore(options.offline_path or f"{repo_path}/data/backfill", spec.name)
    stale = output.discard_stale()
    if stale:
        log.info("view %s: removed %d directories left by interrupted runs", spec.name, stale)
    partitions = options.partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    compute = PartitionBackfill(
        spec, options.span, output, repo_path if options.materialize else None
    )
    events = read_events(spark, store, spec, options)
    stats_frame = (
        events.repartition(partitions, spec.join_key)
        .sortWithinPartitions(spec.join_key, EVENT_NS)
        .mapInArrow(compute, STATS_SCHEMA)
    )
    description = f"backfill {spec.name}"
    if options.progress:
        stats = with_progress(spark.sparkContext, description, stats_frame.collect)
    else:
        stats = stats_frame.collect()
    summary = BackfillSummary(view=spec.name)
    try:
        summary.carried_rows = output.carry_over(options.span, spec.timestamp_field)
        summary.days = output.commit(options.span)
    finally:
        output.discard()
    for row in stats:
        summary.rows += row["rows"]
        summary.events += row["events"]
        summary.entities += row["entities"]  # partitions hold disjoint entities
        summary.online_written += row["online_written"]
        for name, reason, count in zip(
            row["bad_fields"], row["bad_reasons"], row["bad_counts"], strict=True
        ):
            summary.bad_rows[(name, reason)] = summary.bad_rows.get((name, reason), 0) + count
        summary.bad_samples.extend(row["bad_samples"])
    summary.backends = sorted({row["backend"] for row in stats})
    summary.seconds = time.monotonic() - started
    for sample in summary.bad_samples[:20]:
        log.warning("view %s: bad row %s", spec.name, sample)
    for (name, reason), count in sorted(summary.bad_rows.items()):
        log.warning("view %s: %d bad rows: field %r: %s", spec.name, count, name, reason)
    return summary


def run_backfill(
    spark: SparkSession,
    store: FeatureStore,
    specs: list[StreamViewSpec],
    options: BackfillOptions,
) -> list[BackfillSummary]:
    """Backfill each view in turn; logs and returns one summary per view."""
    summaries = []
    for spec in specs:
        summary = backfill_view(spark, store, spec, options)
        log.info("%s", summary.describe())
        summaries.append(summary)
    return summaries
