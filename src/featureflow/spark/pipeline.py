"""The streaming pipeline: Kafka -> parse -> per-entity window features -> Feast online store.

One Structured Streaming query per topic: the views reading it share the
Kafka read and the parse, and each micro-batch (``foreachBatch``) is parsed
once in Spark SQL, cached, and handed to every view; unusable records are counted and
logged with their Kafka coordinates and reason; good events are hash
partitioned by entity and handed, as Arrow batches, to
:class:`~featureflow.spark.online_sink.OnlineFeatureWriter` on the executors.
Nothing but per-partition stats comes back to the driver. Unusable records
also go, untouched, to a dead-letter topic (:mod:`featureflow.spark.dead_letter`).

Windows span micro-batches: each partition's recent events are kept as
versioned state next to the checkpoint (:mod:`featureflow.spark.state`), so a
restart neither loses nor double-counts events. Events older than the
watermark (largest event time of earlier batches minus the source's
``watermark_delay_threshold``) are dead letters with reason "later than the
watermark".
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from featureflow.repo import StreamViewSpec
from featureflow.spark.dead_letter import dead_letter_topic, write_dead_letters
from featureflow.spark.metrics import BatchReport, PrometheusExporter, histogram_quantile
from featureflow.spark.offline_sink import OfflineFeatureLog
from featureflow.spark.online_sink import EXECUTOR_PHASES, STATS_SCHEMA, OnlineFeatureWriter
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON, EVENT_NS, parse_events
from featureflow.spark.state import StateStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from featureflow.schema import FeatureSchema

log = logging.getLogger("featureflow.job")
metrics_log = logging.getLogger("featureflow.metrics")

LATE_REASON = "later than the watermark"

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
    owns_dead_letters: bool = True
    """Whether this view logs and dead-letters the topic's bad records: views reading
    the same topic all count them, but only one writes them (no duplicates)."""

    def late_before_ns(self, seen_max_ns: int | None) -> int | None:
        """Events older than this (epoch ns) are late, given the largest event time seen
        before the batch (None: no event is late)."""
        if seen_max_ns is None or self.spec.watermark_ns <= 0:
            return None
        return seen_max_ns - self.spec.watermark_ns

    def seen_max_ns(self, batch_id: int) -> int | None:
        """The largest event time (ns) accepted before micro-batch ``batch_id``."""
        return self.state.load_max_event_ns(before_batch=batch_id)

    def process(self, batch: DataFrame, batch_id: int, seen_max_ns: int | None) -> None:
        """Micro-batch ``batch_id`` of this view, from the topic's parsed (and cached) batch;
        ``seen_max_ns``: :meth:`seen_max_ns` of the batch."""
        from pyspark.sql import functions as F

        started = time.monotonic()
        late_before_ns = self.late_before_ns(seen_max_ns)
        if late_before_ns is not None:
            batch = mark_late(batch, late_before_ns, self.spec)
        phases: dict[str, float] = {}
        lap = time.monotonic()
        # One pass over the batch for every count the report needs: rows per
        # reason (null: usable) and the latest usable event time.
        summary = (
            batch.groupBy(ERROR_REASON)
            .agg(F.count(F.lit(1)).alias("rows"), F.max(EVENT_NS).alias("max_ns"))
            .collect()
        )
        records = sum(row["rows"] for row in summary)
        bad_by_reason = {
            row[ERROR_REASON]: row["rows"] for row in summary if row[ERROR_REASON] is not None
        }
        batch_max_ns = next((row["max_ns"] for row in summary if row[ERROR_REASON] is None), None)
        phases["summary"], lap = time.monotonic() - lap, time.monotonic()
        if bad_by_reason and self.owns_dead_letters:
            bad = batch.filter(F.col(ERROR_REASON).isNotNull())
            self._log_bad_records(bad)
            write_dead_letters(
                bad,
                self.options.bootstrap or self.spec.bootstrap_servers,
                self.options.dead_letter_topic or dead_letter_topic(self.spec.topic),
                self.options.kafka_options,
            )
            phases["dead_letters"], lap = time.monotonic() - lap, time.monotonic()
        good = batch.filter(F.col(ERROR_REASON).isNull()).select(
            self.spec.join_key, EVENT_NS, *self.spec.value_columns
        )
        if batch_max_ns is not None:
            seen_max_ns = max(batch_max_ns, seen_max_ns or batch_max_ns)
        # What the next batch accepts: older events are dead letters (late).
        next_watermark_ns = seen_max_ns - self.spec.watermark_ns if seen_max_ns is not None else 0
        writer = OnlineFeatureWriter(
            self.spec,
            self.repo_path,
            batch_id,
            self.state,
            next_watermark_ns,
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
        self.state.save_max_event_ns(batch_id, seen_max_ns)
        report = BatchReport(
            view=self.spec.name,
            batch_id=batch_id,
            records=records,
            events=sum(row["rows"] for row in stats),
            dead_letters=bad_by_reason,
            entities_written=sum(row["entities"] for row in stats),
            state_rows=sum(row["state_rows"] for row in stats),
            duration_s=time.monotonic() - started,
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
    def _log_bad_records(bad: DataFrame) -> None:
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


def mark_late(batch: DataFrame, watermark_ns: int, spec: StreamViewSpec) -> DataFrame:
    """Tag parsed events older than the watermark as errors (they go to the dead letters).

    The watermark is the largest event time accepted in earlier micro-batches
    minus the source's ``watermark_delay_threshold``, as in Spark.
    """
    from pyspark.sql import functions as F

    late = F.col(ERROR_REASON).isNull() & (F.col(EVENT_NS) < F.lit(watermark_ns))
    return batch.withColumn(
        ERROR_FIELD, F.when(late, F.lit(spec.timestamp_field)).otherwise(F.col(ERROR_FIELD))
    ).withColumn(
        ERROR_REASON,
        F.when(late, F.lit(LATE_REASON)).otherwise(F.col(ERROR_REASON)),
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


@dataclass
class TopicBatchProcessor:
    """``foreachBatch`` function of one topic's query: parsed once, then each view in turn.

    The views of a topic share its Kafka read and parse (the costliest part of
    a micro-batch): the parsed batch is cached and every view runs on it.
    """

    views: list[MicroBatchProcessor]
    idle: threading.Event = field(default_factory=threading.Event)
    """Set between micro-batches: where a clean shutdown may stop the query."""
    last_batch_id: int | None = None

    def __post_init__(self) -> None:
        self.idle.set()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.idle.clear()
        try:
            seen = [view.seen_max_ns(batch_id) for view in self.views]
            late = [view.late_before_ns(ns) for view, ns in zip(self.views, seen, strict=True)]
            cached = _without_unneeded_bytes(batch, late).persist()
            try:
                for view, seen_max_ns in zip(self.views, seen, strict=True):
                    view.process(cached, batch_id, seen_max_ns)
            finally:
                cached.unpersist()
            self.last_batch_id = batch_id
        finally:
            self.idle.set()


def _without_unneeded_bytes(batch: DataFrame, late_before_ns: list[int | None]) -> DataFrame:
    """The parsed batch with the raw key and value bytes only where a dead letter needs them.

    Bad records and events some view may find late keep their bytes; the
    others drop them, which makes the cached batch several times smaller.
    """
    from pyspark.sql import functions as F

    may_be_dead = F.col(ERROR_REASON).isNotNull()
    thresholds = [t for t in late_before_ns if t is not None]
    if thresholds:
        may_be_dead = may_be_dead | (F.col(EVENT_NS) < F.lit(max(thresholds)))
    return batch.select(
        *(
            F.when(may_be_dead, F.col(name)).alias(name) if name in ("key", "value") else name
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
    for at, spec in enumerate(specs):
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
                owns_dead_letters=at == 0,
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
