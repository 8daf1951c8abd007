"""The streaming pipeline: Kafka -> parse -> per-entity window features -> Feast online store.

One Structured Streaming query per topic: the views reading it share the
Kafka read and the parse, and each micro-batch (``foreachBatch``) is parsed
once, checked against the event-time rules, cached, summarised in one Spark
job and handed to every view; unusable records are counted and logged with
their Kafka coordinates and reason; good events are hash partitioned by
entity and handed, as Arrow batches, to
:class:`~featureflow.spark.online_sink.OnlineFeatureWriter` on the executors.
Nothing but per-partition stats comes back to the driver. Unusable records
also go, untouched, to a dead-letter topic (:mod:`featureflow.spark.dead_letter`).

Windows span micro-batches: each partition's recent events are kept as
versioned state next to the checkpoint (:mod:`featureflow.spark.state`), so a
restart neither loses nor double-counts events.

Event-time rules, judged against the driver's clock of the micro-batch
(recorded before the batch runs, so a replay judges alike):

- an event more than ``--max-future-skew`` ahead of the clock is a dead letter
  "in the future": it can neither become an entity's latest row nor move a
  watermark (an event exactly that far ahead is accepted);
- an event older than the view's watermark is a dead letter "later than the
  watermark". The watermark is kept per Kafka partition
  (:mod:`featureflow.spark.watermarks`): each partition's largest accepted
  event time minus the source's ``watermark_delay_threshold``; the view's is
  the minimum over the partitions not idle for ``--idle-partition-timeout``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from featureflow.columns import EVENT_NS
from featureflow.repo import StreamViewSpec
from featureflow.spark import failpoints
from featureflow.spark.dead_letter import dead_letter_topic, write_dead_letters
from featureflow.spark.metrics import BatchReport, PrometheusExporter, histogram_quantile
from featureflow.spark.offline_sink import OfflineFeatureLog
from featureflow.spark.online_sink import EXECUTOR_PHASES, STATS_SCHEMA, OnlineFeatureWriter
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON, parse_events
from featureflow.spark.state import StateStore
from featureflow.spark.watermarks import (
    DEFAULT_FUTURE_SKEW_NS,
    DEFAULT_IDLE_TIMEOUT_NS,
    PartitionWatermarks,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from featureflow.schema import FeatureSchema

log = logging.getLogger("featureflow.job")
metrics_log = logging.getLogger("featureflow.metrics")

LATE_REASON = "later than the watermark"
FUTURE_REASON = "in the future"

MAX_LOGGED_BAD_RECORDS = 20
"""Bad records logged one by one per micro-batch; the rest are only counted."""


@dataclass
class StreamOptions:
    """How the job reads Kafka and where it checkpoints. ``None`` means: the view's setting."""

    checkpoint: str
    bootstrap: str | None = None
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    available_now: bool = False
    trigger_interval: str | None = None
    partitions: int | None = None
    dead_letter_topic: str | None = None  # default: "<topic>.dlq"
    offline_path: str | None = None  # default: <repo>/data/offline
    kafka_options: dict[str, str] = field(default_factory=dict)
    idle_partition_timeout_ns: int = DEFAULT_IDLE_TIMEOUT_NS
    max_future_skew_ns: int = DEFAULT_FUTURE_SKEW_NS


@dataclass
class BatchCounters:
    """Totals over the life of the query (driver side)."""

    batches: int = 0
    events: int = 0
    bad_records: int = 0
    entities_written: int = 0
    bad_by_reason: dict[str, int] = field(default_factory=dict)


@dataclass
class MicroBatchProcessor:
    """One stream view's work in each micro-batch of its topic's query."""

    spec: StreamViewSpec
    repo_path: str
    partitions: int
    options: StreamOptions
    state: StateStore
    feature_schema: FeatureSchema | None = None
    counters: BatchCounters = field(default_factory=BatchCounters)
    exporter: PrometheusExporter | None = None

    def process(self, topic_batch: TopicBatch) -> None:
        """This view's part of a micro-batch of its topic (parsed, checked and cached once
        for all the topic's views)."""
        from pyspark.sql import functions as F

        started = time.monotonic()
        batch_id = topic_batch.batch_id
        phases = dict(topic_batch.phases_s)
        lap = time.monotonic()
        good = topic_batch.frame.filter(F.col(ERROR_REASON).isNull()).select(
            self.spec.join_key, EVENT_NS, *self.spec.value_columns
        )
        # The next batch's watermark: what future on-time events can still reach.
        watermark_ns = topic_batch.watermarks.watermark_ns
        writer = OnlineFeatureWriter(
            self.spec,
            self.repo_path,
            batch_id,
            self.state,
            watermark_ns if watermark_ns is not None else 0,
            OfflineFeatureLog(
                self.options.offline_path or f"{self.repo_path}/data/offline", self.spec.name
            ),
            self.feature_schema,
        )
        stats = (
            good.repartition(self.partitions, self.spec.join_key)
            .mapInArrow(writer, STATS_SCHEMA)
            .collect()
        )
        phases["features"] = time.monotonic() - lap
        report = BatchReport(
            view=self.spec.name,
            batch_id=batch_id,
            records=topic_batch.records,
            events=sum(row["rows"] for row in stats),
            dead_letters=topic_batch.bad_by_reason,
            entities_written=sum(row["entities"] for row in stats),
            state_rows=sum(row["state_rows"] for row in stats),
            duration_s=time.monotonic() - started + topic_batch.shared_s,
            watermark_lag_s=topic_batch.watermarks.lag_s(topic_batch.clock_ns),
            idle_partitions=list(topic_batch.watermarks.idle),
            phases_s={
                **phases,
                **{
                    f"executors_{phase}": sum(row["seconds"][at] for row in stats)
                    for at, phase in enumerate(EXECUTOR_PHASES)
                },
            },
        )
        if stats:
            merged = np.sum([row["freshness"] for row in stats], axis=0)
            report.freshness_p50_s = histogram_quantile(merged, 0.5)
            report.freshness_p99_s = histogram_quantile(merged, 0.99)
        self._account(report, sorted({row["backend"] for row in stats}))

    @staticmethod
    def log_bad_records(bad: DataFrame) -> None:
        """One warning per unusable record (the first few), with its Kafka coordinates."""
        columns = ("topic", "partition", "offset", ERROR_FIELD, ERROR_REASON)
        for row in bad.select(*columns).limit(MAX_LOGGED_BAD_RECORDS).collect():
            log.warning(
                "skipped record %s[%d]@%d: field %r: %s",
                row["topic"], row["partition"], row["offset"],
                row[ERROR_FIELD], row[ERROR_REASON],
            )  # fmt: skip

    def _account(self, report: BatchReport, backends: list[str]) -> None:
        self.counters.batches += 1
        self.counters.events += report.events
        self.counters.bad_records += sum(report.dead_letters.values())
        self.counters.entities_written += report.entities_written
        for reason, count in report.dead_letters.items():
            self.counters.bad_by_reason[reason] = self.counters.bad_by_reason.get(reason, 0) + count
        log.info(
            "view %s batch %d: %d events, %d skipped, %d entities written to the online store, "
            "%d events of touched partitions kept as state, in %.2f s (kernels: %s)",
            report.view, report.batch_id, report.events, sum(report.dead_letters.values()),
            report.entities_written, report.state_rows, report.duration_s,
            ",".join(backends) or "-",
        )  # fmt: skip
        metrics_log.info("%s", report.to_json())
        if self.exporter is not None:
            self.exporter.observe(report)


def mark_event_time(
    batch: DataFrame, spec: StreamViewSpec, late_before_ns: int | None, future_after_ns: int
) -> DataFrame:
    """Tag parsed events that break the event-time rules as errors (they become dead letters).

    Args:
        late_before_ns: the view's watermark (epoch ns): strictly older events are
            "later than the watermark"; None: nothing is late.
        future_after_ns: the driver's clock of the batch plus ``--max-future-skew``:
            strictly newer events are "in the future" (checked first).
    """
    from pyspark.sql import functions as F

    usable = F.col(ERROR_REASON).isNull()
    breaks: list[tuple[Column, str]] = [(F.col(EVENT_NS) > F.lit(future_after_ns), FUTURE_REASON)]
    if late_before_ns is not None:
        breaks.append((F.col(EVENT_NS) < F.lit(late_before_ns), LATE_REASON))
    reason: Column = F.col(ERROR_REASON)
    for condition, text in reversed(breaks):  # so the first rule wins
        reason = F.when(usable & condition, F.lit(text)).otherwise(reason)
    broken = F.lit(False)
    for condition, _ in breaks:
        broken = broken | condition
    return batch.select(
        *(name for name in batch.columns if name not in (ERROR_FIELD, ERROR_REASON)),
        F.when(usable & broken, F.lit(spec.timestamp_field))
        .otherwise(F.col(ERROR_FIELD))
        .alias(ERROR_FIELD),
        reason.alias(ERROR_REASON),
    )


def read_kafka(spark: SparkSession, spec: StreamViewSpec, options: StreamOptions) -> DataFrame:
    """The view's Kafka topic as a streaming DataFrame of raw records."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", options.bootstrap or spec.bootstrap_servers)
        .option("subscribe", spec.topic)
        .option("startingOffsets", options.starting_offsets)
        .option("failOnDataLoss", "false")
    )
    if options.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(options.max_offsets_per_trigger))
    for key, value in options.kafka_options.items():
        reader = reader.option(key if key.startswith("kafka.") else f"kafka.{key}", value)
    return reader.load()


@dataclass(frozen=True)
class TopicBatch:
    """A micro-batch of one topic as its views receive it."""

    batch_id: int
    frame: DataFrame
    """Parsed, checked (error columns set) and cached; key and value bytes only on bad rows."""
    clock_ns: int
    """The driver's clock of the batch (epoch ns), as first recorded."""
    watermarks: PartitionWatermarks
    """The per-partition watermarks after this batch (what the next one judges against)."""
    records: int
    bad_by_reason: dict[str, int]
    shared_s: float
    """Wall seconds of the work done once for all views (marking, summary, dead letters)."""
    phases_s: dict[str, float]


@dataclass
class TopicBatchProcessor:
    """``foreachBatch`` function of one topic's query: checked once, then each view in turn.

    The views of a topic share its Kafka read, parse, event-time rules,
    summary and dead letters (the costliest part of a micro-batch): the checked
    batch is cached and every view runs on it. The watermarks live in the first
    view's state, saved after every view has saved its own.
    """

    views: list[MicroBatchProcessor]
    idle: threading.Event = field(default_factory=threading.Event)
    """Set between micro-batches: where a clean shutdown may stop the query."""
    last_batch_id: int | None = None

    def __post_init__(self) -> None:
        self.idle.set()

    @property
    def _lead(self) -> MicroBatchProcessor:
        return self.views[0]

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.idle.clear()
        try:
            self._run(batch, batch_id)
            self.last_batch_id = batch_id
        finally:
            self.idle.set()

    def _run(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        lead = self._lead
        spec, options = lead.spec, lead.options
        started = time.monotonic()
        clock_ns = lead.state.batch_clock_ns(batch_id, time.time_ns())
        before = lead.state.load_watermarks(batch_id, spec.watermark_ns)
        late_before_ns = before.watermark_ns if spec.watermark_ns > 0 else None
        checked = mark_event_time(
            batch, spec, late_before_ns, clock_ns + options.max_future_skew_ns
        )
        cached = _without_unneeded_bytes(checked).persist()
        try:
            lap = time.monotonic()
            # One pass for every count the reports need: rows per (Kafka partition,
            # reason; null: usable) and the latest usable event time per partition.
            summary = (
                cached.groupBy("partition", ERROR_REASON)
                .agg(F.count(F.lit(1)).alias("rows"), F.max(EVENT_NS).alias("max_ns"))
                .collect()
            )
            phases = {"summary": time.monotonic() - lap}
            bad_by_reason: dict[str, int] = {}
            batch_max_ns: dict[int, int] = {}
            for row in summary:
                if row[ERROR_REASON] is None:
                    batch_max_ns[int(row["partition"])] = int(row["max_ns"])
                else:
                    reason = row[ERROR_REASON]
                    bad_by_reason[reason] = bad_by_reason.get(reason, 0) + int(row["rows"])
            if bad_by_reason:
                lap = time.monotonic()
                bad = cached.filter(F.col(ERROR_REASON).isNotNull())
                lead.log_bad_records(bad)
                write_dead_letters(
                    bad,
                    options.bootstrap or spec.bootstrap_servers,
                    options.dead_letter_topic or dead_letter_topic(spec.topic),
                    options.kafka_options,
                )
                phases["dead_letters"] = time.monotonic() - lap
            after = before.advance(batch_max_ns, clock_ns, options.idle_partition_timeout_ns)
            topic_batch = TopicBatch(
                batch_id, cached, clock_ns, after, sum(int(row["rows"]) for row in summary),
                bad_by_reason, time.monotonic() - started, phases,
            )  # fmt: skip
            for view in self.views:
                view.process(topic_batch)
            lead.state.save_watermarks(batch_id, after)
            failpoints.reach("after_state_save", batch_id)
        finally:
            cached.unpersist()


def _without_unneeded_bytes(batch: DataFrame) -> DataFrame:
    """The checked batch with the raw key and value bytes only where a dead letter needs them.

    Only bad records (late and future events included) keep their bytes; the
    others drop them, which makes the cached batch several times smaller.
    """
    from pyspark.sql import functions as F

    is_dead = F.col(ERROR_REASON).isNotNull()
    return batch.select(
        *(
            F.when(is_dead, F.col(name)).alias(name) if name in ("key", "value") else name
            for name in batch.columns
        )
    )


def topic_groups(specs: list[StreamViewSpec]) -> list[list[StreamViewSpec]]:
    """The views grouped by what their records are parsed with (one query per group).

    Views share a query when they read the same topic of the same servers with
    the same message schema, entity key, timestamp field and watermark delay.
    The delay too, because the first view of a query dead-letters for all of
    them: a view with a shorter delay would find events late that no view sends
    to the dead letters.
    """
    groups: dict[tuple[object, ...], list[StreamViewSpec]] = {}
    for spec in specs:
        parsed_by = (
            spec.topic, spec.bootstrap_servers, spec.json_schema, spec.avro_schema,
            spec.join_key, spec.timestamp_field, spec.watermark_ns,
        )  # fmt: skip
        groups.setdefault(parsed_by, []).append(spec)
    return list(groups.values())


def start_topic_query(
    spark: SparkSession,
    specs: list[StreamViewSpec],
    repo_path: str,
    options: StreamOptions,
    feature_schemas: dict[str, FeatureSchema] | None = None,
    exporter: PrometheusExporter | None = None,
) -> tuple[StreamingQuery, TopicBatchProcessor]:
    """Start the streaming query of views that read one topic alike (:func:`topic_groups`).

    Checkpoints: the query's under ``<checkpoint>/<view>[+<view>...]``, each
    view's window state under ``<checkpoint>/<view>/featureflow-state``.
    """
    partitions = options.partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    root = options.checkpoint.rstrip("/")
    views = []
    for spec in specs:
        state = StateStore(f"{root}/{spec.name}/featureflow-state", partitions)
        state.check_layout()
        schema = (feature_schemas or {}).get(spec.name)
        views.append(
            MicroBatchProcessor(
                spec,
                repo_path,
                partitions,
                options,
                state,
                schema,
                exporter=exporter,
            )
        )
    processor = TopicBatchProcessor(views)
    name = "+".join(spec.name for spec in specs)
    writer = (
        parse_events(read_kafka(spark, specs[0], options), specs[0])
        .writeStream.queryName(f"featureflow_{name}")
        .foreachBatch(processor)
        .option("checkpointLocation", f"{root}/{name}")
    )
    if options.available_now:
        writer = writer.trigger(availableNow=True)
    elif options.trigger_interval:
        writer = writer.trigger(processingTime=options.trigger_interval)
    return writer.start(), processor
