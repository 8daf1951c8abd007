"""The streaming pipeline: Kafka -> parse -> per-entity window features -> Feast online store.

One Structured Streaming query per topic: the views reading it share the
Kafka read and the parse, and each micro-batch (``foreachBatch``) is parsed
once, checked against the event-time rules, hash partitioned by entity once
and handed, as Arrow batches, to :class:`~featureflow.spark.topic_pass.TopicPass`
on the executors, which runs every view of the topic over each partition (one
online write per entity for all of them) and counts what the watermarks and
reports need in the same pass. Back to the driver come per-partition stats and
the unusable records, which are logged with their Kafka coordinates and
reason and go, untouched, to a dead-letter topic (:mod:`featureflow.spark.dead_letter`).

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
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from featureflow.errors import RepoError
from featureflow.events import ddl
from featureflow.repo import StreamViewSpec
from featureflow.spark import failpoints
from featureflow.spark.dead_letter import DeadLetterWriter, dead_letter_topic
from featureflow.spark.event_time import (
    mark_event_time,
    mark_event_time_collected,
    without_unneeded_bytes,
    without_unneeded_bytes_collected,
)
from featureflow.spark.kafka_source import kafka_read_options
from featureflow.spark.metrics import (
    BatchReport,
    PrometheusExporter,
    histogram_quantile,
    nonempty_buckets,
)
from featureflow.spark.offline_sink import CLOSED_SUFFIX, OfflineFeatureLog
from featureflow.spark.online_sink import EXECUTOR_PHASES, ViewTask
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON, PASSED_THROUGH, parse_events
from featureflow.spark.state import (
    ENTITY_HASH,
    StateStore,
    filesystem_of,
    keyed_scheme_parts,
    recorded_partitioning,
    written_partitions,
)
from featureflow.spark.timeouts import DEFAULT_KAFKA_TIMEOUT_S
from featureflow.spark.watermarks import (
    DEFAULT_FUTURE_SKEW_NS,
    DEFAULT_IDLE_TIMEOUT_NS,
    PartitionWatermarks,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from featureflow.schema import FeatureSchema
    from featureflow.spark.keyed_pass import KeyedTopic

log = logging.getLogger("featureflow.job")
metrics_log = logging.getLogger("featureflow.metrics")

MAX_LOGGED_BAD_RECORDS = 20
"""Bad records logged one by one per micro-batch; the rest are only counted."""

DEFAULT_DRIVER_PASS_RECORDS = 150_000
"""Micro-batches of at most this many Kafka records run their views on the driver
(``--driver-pass-records``; :meth:`TopicBatchProcessor.pass_on_driver`). Well above what
a live producer's rate puts in one batch: a batch that leaves the driver's pass takes
longer shuffled, so the next one is as large and stays there (at 40,000 events/s on 2
cores a limit of 50,000 held half the batches at ~52,000 records, p99 freshness 4 s;
150,000 kept every batch on the driver at ~32,000 records, p99 2 s)."""
DRIVER, EXECUTORS = "driver", "executors"
"""Where a micro-batch's views ran (``pass_on`` of the metrics)."""


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
    driver_pass_records: int = DEFAULT_DRIVER_PASS_RECORDS
    """Micro-batches of at most this many records run their views on the driver (0: none)."""
    dead_letter_topic: str | None = None  # default: "<topic>.dlq"
    offline_path: str | None = None  # default: <repo>/data/offline
    kafka_options: dict[str, str] = field(default_factory=dict)
    """The Kafka settings as Spark's source and sink take them (``kafka.*``)."""
    kafka_settings: dict[str, str] = field(default_factory=dict)
    """The same settings as loaded (:mod:`featureflow.infra.kafka_settings`: no ``kafka.``
    prefix, ``librdkafka.*`` kept), for featureflow's own clients: the dead-letter producer,
    the keyed topic's partition count."""
    kafka_timeout_s: float = DEFAULT_KAFKA_TIMEOUT_S
    """``--kafka-timeout``: seconds one Kafka request may take."""
    source_options: dict[str, str] = field(default_factory=dict)
    """Options of Spark's Kafka source as given (e.g. the bounded waits of
    :mod:`featureflow.spark.timeouts`); ``kafka_options`` of the same name win."""
    sink_options: dict[str, str] = field(default_factory=dict)
    """Options of the dead-letter producer as given; ``kafka_options`` win."""
    idle_partition_timeout_ns: int = DEFAULT_IDLE_TIMEOUT_NS
    max_future_skew_ns: int = DEFAULT_FUTURE_SKEW_NS
    state_warn_bytes: int | None = None
    """``--state-warn-bytes``: a warning line when a view's state exceeds it (Arrow bytes)."""
    keyed_topic: KeyedTopic | None = None
    """``--keyed-topic``: the topic is keyed by its entity; one pass per Kafka partition, no
    shuffle (:mod:`~featureflow.spark.keyed_pass`)."""


@dataclass
class BatchCounters:
    """Totals over the life of the query (driver side)."""

    batches: int = 0
    events: int = 0
    bad_records: int = 0
    entities_written: int = 0
    bad_by_reason: dict[str, int] = field(default_factory=dict)


class StateSize(NamedTuple):
    """A shuffle partition's state of one view: events (and tiles) kept, their Arrow
    bytes, and the bytes of the frame states or kept sessions held beside them."""

    rows: int
    bytes: int
    frame_bytes: int


def state_size(row: dict[str, Any]) -> StateSize:
    """The :class:`StateSize` of a view's stats row (:data:`~featureflow.spark.
    topic_pass.OUTPUT_SCHEMA`)."""
    return StateSize(row["state_rows"], row["state_bytes"], row["state_frame_bytes"])


@dataclass
class MicroBatchProcessor:
    """One stream view of a topic's query: its state, counters and reports."""

    spec: StreamViewSpec
    repo_path: str
    partitions: int
    options: StreamOptions
    state: StateStore
    feature_schema: FeatureSchema | None = None
    counters: BatchCounters = field(default_factory=BatchCounters)
    exporter: PrometheusExporter | None = None
    state_sizes: dict[int, StateSize] = field(default_factory=dict)
    """Per shuffle partition: the size of its state as of its last change in this run
    (a partition no batch of this run changed yet is not known)."""

    def task(self, batch_id: int, watermark_ns: int | None, **extra: Any) -> ViewTask:
        """What the executors run of this view in batch ``batch_id``, judged against
        ``watermark_ns`` (None: no watermark yet)."""
        return ViewTask(
            self.spec, batch_id, self.state, watermark_ns if watermark_ns is not None else 0,
            OfflineFeatureLog(
                self.options.offline_path or f"{self.repo_path}/data/offline", self.spec.name
            ),
            self.feature_schema, **extra,
        )  # fmt: skip

    def report(self, topic_batch: TopicBatch, stats: list[dict[str, Any]]) -> None:
        """Account for this view's part of a micro-batch: ``stats`` are its
        :data:`~featureflow.spark.topic_pass.VIEW` rows (a session view's closing rows
        after its pass rows, so they give the partition's state)."""
        for row in stats:
            self.state_sizes[row["shuffle_partition"]] = state_size(row)
        report = BatchReport(
            view=self.spec.name,
            batch_id=topic_batch.batch_id,
            records=topic_batch.records,
            events=sum(row["rows"] for row in stats),
            dead_letters=topic_batch.bad_by_reason,
            entities_written=sum(row["entities"] for row in stats),
            state_rows=sum(size.rows for size in self.state_sizes.values()),
            state_bytes=sum(size.bytes for size in self.state_sizes.values()),
            state_frame_bytes=sum(size.frame_bytes for size in self.state_sizes.values()),
            partitions_run=len(stats),
            cold_partitions=sum(row["state_cold"] for row in stats),
            duration_s=topic_batch.duration_s,
            watermark_lag_s=topic_batch.watermarks.lag_s(topic_batch.clock_ns),
            idle_partitions=list(topic_batch.watermarks.idle),
            phases_s={
                **topic_batch.phases_s,
                **{
                    f"{topic_batch.pass_on}_{phase}": sum(row["seconds"][at] for row in stats)
                    for at, phase in enumerate(EXECUTOR_PHASES)
                },
            },
            pass_on=topic_batch.pass_on,
        )
        if stats:
            merged = np.sum([row["freshness"] for row in stats], axis=0)
            report.freshness_p50_s = histogram_quantile(merged, 0.5)
            report.freshness_p99_s = histogram_quantile(merged, 0.99)
            report.freshness_buckets = nonempty_buckets(merged)
        self._account(report, sorted({row["backend"] for row in stats}))

    def _account(self, report: BatchReport, backends: list[str]) -> None:
        self.counters.batches += 1
        self.counters.events += report.events
        self.counters.bad_records += sum(report.dead_letters.values())
        self.counters.entities_written += report.entities_written
        for reason, count in report.dead_letters.items():
            self.counters.bad_by_reason[reason] = self.counters.bad_by_reason.get(reason, 0) + count
        log.info(
            "view %s batch %d: %d events, %d skipped, %d entities written to the online store, "
            "%d events kept as state (%.1f MiB, %.1f MiB of frame states beside them), "
            "in %.2f s (kernels: %s)",
            report.view, report.batch_id, report.events, sum(report.dead_letters.values()),
            report.entities_written, report.state_rows, report.state_bytes / 2**20,
            report.state_frame_bytes / 2**20,
            report.duration_s, ",".join(backends) or "-",
        )  # fmt: skip
        warn_bytes = self.options.state_warn_bytes
        if warn_bytes is not None and report.state_bytes > warn_bytes:
            log.warning(
                "view %s: its window state holds %.1f MiB (%d rows), over --state-warn-bytes "
                "%.1f MiB: shorten the view's windows or its watermark delay, or add "
                "--partitions and memory to the workers (each holds its partitions' state)",
                report.view, report.state_bytes / 2**20, report.state_rows, warn_bytes / 2**20,
            )  # fmt: skip
        metrics_log.info("%s", report.to_json())
        if self.exporter is not None:
            self.exporter.observe(report)


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
    for key, value in options.source_options.items():
        reader = reader.option(key, value)
    for key, value in kafka_read_options(options.kafka_options).items():
        reader = reader.option(key, value)
    return reader.load()


@dataclass(frozen=True)
class TopicBatch:
    """What a micro-batch of one topic did, as its views report it."""

    batch_id: int
    clock_ns: int
    """The driver's clock of the batch (epoch ns), as first recorded."""
    watermarks: PartitionWatermarks
    """The per-partition watermarks after this batch (what the next one judges against)."""
    records: int
    bad_by_reason: dict[str, int]
    duration_s: float
    """Wall seconds of the whole micro-batch (one pass for all the topic's views)."""
    phases_s: dict[str, float]
    pass_on: str = EXECUTORS
    """Where the views ran: :data:`DRIVER` or :data:`EXECUTORS`."""


@dataclass
class TopicBatchProcessor:
    """``foreachBatch`` function of one topic's query: one pass for all its views.

    Each micro-batch is checked against the event-time rules (a projection),
    hash partitioned by the entity key once, and handed to
    :class:`~featureflow.spark.topic_pass.TopicPass` (``mapInArrow``), which runs
    every view of the topic over each partition and returns the counts per
    (Kafka partition, reason), the largest event time per Kafka partition and
    the dead letters with the views' stats. No cache and no summary job: the
    batch is read once. The watermarks live in the first view's state, saved
    after every view has saved its own (and after the dead letters are sent).
    """

    views: list[MicroBatchProcessor]
    checkpoint: str | None = None
    """The query's checkpoint (Spark's offsets and commits logs)."""
    idle: threading.Event = field(default_factory=threading.Event)
    """Set between micro-batches: where a clean shutdown may stop the query."""
    last_batch_id: int | None = None
    dead_letters: DeadLetterWriter | None = None
    """The query's dead-letter writer, made at its first dead letter."""

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
        from featureflow.spark import topic_pass

        lead = self._lead
        spec, options = lead.spec, lead.options
        started = time.monotonic()
        clock_ns = lead.state.batch_clock_ns(batch_id, time.time_ns())
        before = lead.state.load_watermarks(batch_id, spec.watermark_ns)
        late_before_ns = before.watermark_ns if spec.watermark_ns > 0 else None
        future_after_ns = clock_ns + options.max_future_skew_ns
        columns = topic_pass.view_columns(view.spec for view in self.views)
        # The views' state follows the watermark the batch was judged by (see topic_pass).
        tasks = tuple(view.task(batch_id, before.watermark_ns) for view in self.views)
        lap = time.monotonic()
        pass_on = DRIVER if self.pass_on_driver(batch_id) else EXECUTORS
        if options.keyed_topic is not None:
            from pyspark.sql import functions as F

            from featureflow.spark.keyed_pass import RAW_COLUMNS, UNDECIDED, KeyedTopicPass

            keyed = KeyedTopicPass(
                tasks, lead.repo_path, batch_id, ddl.canonical_fields(spec.json_schema),
                spec.join_key, spec.timestamp_field, options.keyed_topic, late_before_ns,
                future_after_ns, spec.topic,
            )  # fmt: skip
            raw = batch.select(*RAW_COLUMNS)

            def checked_by_spark(partitions: list[int]) -> pa.Table:
                # the Kafka partitions holding a timestamp only Spark reads: Spark's parse
                records = batch.where(F.col("partition").isin(partitions))
                parsed = parse_events(records, spec).select(
                    *columns, *PASSED_THROUGH, ERROR_FIELD, ERROR_REASON
                )
                return keyed.finish(parsed.toArrow())

            if pass_on == DRIVER:
                collected = raw.toArrow()
                phases = {"read": time.monotonic() - lap}
                lap = time.monotonic()
                out = keyed.on_driver(checked_by_spark, collected)
                phases["driver_pass"] = time.monotonic() - lap
            else:
                out = raw.mapInArrow(keyed, topic_pass.OUTPUT_SCHEMA).toArrow()
                left = pc.equal(out.column("kind"), UNDECIDED)
                if pc.any(left).as_py():
                    undecided = out.filter(left).column("partition").to_pylist()
                    out = pa.concat_tables([
                        out.filter(pc.invert(left)), keyed.on_driver(checked_by_spark,
                                                                     partitions=undecided),
                    ])  # fmt: skip
                phases = {"pass": time.monotonic() - lap}
        elif pass_on == DRIVER:
            selected = batch.select(*columns, *PASSED_THROUGH, ERROR_FIELD, ERROR_REASON)
            # The event-time rules on the collected records: Spark's plan, and the code
            # it generates, are then the same in every batch (see event_time).
            collected = selected.select(
                "*", topic_pass.shuffle_partition(spec.join_key, lead.partitions)
            ).toArrow()
            records = without_unneeded_bytes_collected(mark_event_time_collected(
                collected, spec.timestamp_field, late_before_ns, future_after_ns))  # fmt: skip
            phases = {"read": time.monotonic() - lap}
            lap = time.monotonic()
            out = topic_pass.run_on_driver(tasks, lead.repo_path, batch_id, records)
            phases["driver_pass"] = time.monotonic() - lap
        else:
            selected = batch.select(*columns, *PASSED_THROUGH, ERROR_FIELD, ERROR_REASON)
            checked = without_unneeded_bytes(
                mark_event_time(selected, spec.timestamp_field, late_before_ns, future_after_ns)
            )
            out = (
                checked.repartition(lead.partitions, spec.join_key)
                .mapInArrow(
                    topic_pass.TopicPass(tasks, lead.repo_path, batch_id),
                    topic_pass.OUTPUT_SCHEMA,
                )
                .toArrow()
            )
            phases = {"pass": time.monotonic() - lap}
        kinds = out.column("kind")
        counts = out.filter(pc.equal(kinds, topic_pass.COUNT))
        bad_by_reason: dict[str, int] = {}
        batch_max_ns: dict[int, int] = {}
        for row in counts.select(["partition", "reason", "rows", "max_ns"]).to_pylist():
            if row["reason"] is None:
                if row["max_ns"] is not None:
                    partition = int(row["partition"])
                    batch_max_ns[partition] = max(batch_max_ns.get(partition, row["max_ns"]),
                                                  row["max_ns"])  # fmt: skip
            else:
                bad_by_reason[row["reason"]] = bad_by_reason.get(row["reason"], 0) + row["rows"]
        if bad_by_reason:
            lap = time.monotonic()
            self._send_dead_letters(batch, out.filter(pc.equal(kinds, topic_pass.DEAD)))
            phases["dead_letters"] = time.monotonic() - lap
        after = before.advance(batch_max_ns, clock_ns, options.idle_partition_timeout_ns)
        stats = out.filter(pc.equal(kinds, topic_pass.VIEW)).to_pylist()
        topic_batch = TopicBatch(
            batch_id, clock_ns, after, int(pc.sum(counts.column("rows")).as_py() or 0),
            bad_by_reason, time.monotonic() - started, phases, pass_on,
        )  # fmt: skip
        for view in self.views:
            view.report(topic_batch, [row for row in stats if row["view"] == view.spec.name])
        lead.state.save_watermarks(batch_id, after)
        failpoints.reach("after_state_save", batch_id)

    def pass_on_driver(self, batch_id: int) -> bool:
        """Whether micro-batch ``batch_id`` runs its views on the driver: it reads at most
        ``--driver-pass-records`` Kafka records (known from Spark's offsets log, so a
        re-run of the batch takes the same path).

        A small batch costs mostly Spark's fixed work, and a shuffle stage of Python
        tasks is most of that: 4 tasks of ~60 ms each before any of featureflow's work,
        on 2 cores, against one collect of the parsed records. On the driver, every
        shuffle partition runs with the executors' own functions (Spark's hash partition
        of the entity, :func:`~featureflow.spark.topic_pass.shuffle_partition`), side by
        side on threads; its Python process keeps the states and frame states between
        batches, as an executor's state host does for the shuffled batches
        (:mod:`~featureflow.spark.state_host`).
        """
        limit = self._lead.options.driver_pass_records
        if limit <= 0 or self.checkpoint is None:
            return False
        from featureflow.spark import commit_log

        records = commit_log.batch_records(self.checkpoint, batch_id)
        return records is not None and records <= limit

    def _send_dead_letters(self, batch: DataFrame, dead: pa.Table) -> None:
        """Log the first bad records and append all of them to the dead-letter topic."""
        lead = self._lead
        spec, options = lead.spec, lead.options
        dead = dead.take(pc.sort_indices(dead, [("topic", "ascending"), (
            "partition", "ascending"), ("offset", "ascending")]))  # fmt: skip
        for row in dead.slice(0, MAX_LOGGED_BAD_RECORDS).to_pylist():
            log.warning(
                "skipped record %s[%d]@%d: field %r: %s",
                row["topic"], row["partition"], row["offset"], row["field"], row["reason"],
            )  # fmt: skip
        letters = pa.table(
            {
                "key": dead.column("key"),
                "value": dead.column("value"),
                "topic": dead.column("topic"),
                "partition": dead.column("partition"),
                "offset": dead.column("offset"),
                ERROR_FIELD: dead.column("field"),
                ERROR_REASON: dead.column("reason"),
            }
        )
        if self.dead_letters is None:
            self.dead_letters = DeadLetterWriter(
                options.bootstrap or spec.bootstrap_servers,
                options.dead_letter_topic or dead_letter_topic(spec.topic),
                options.kafka_settings, {**options.sink_options, **options.kafka_options},
                options.kafka_timeout_s,
            )  # fmt: skip
        self.dead_letters.write(letters, batch.sparkSession)

    def close_settled_sessions(self, spark: SparkSession, *, only_unfinished: bool) -> None:
        """Close the sessions that the watermark after the query's settled micro-batch
        finalises, in every partition's state as that batch left it.

        The pass of batch ``b + 1`` closes them anyway (it judges against that
        watermark), so a running query needs no extra Spark job per batch; this
        closes them when no next batch may come: at the end of a run (and of an
        ``--available-now`` run, whose offline log is then complete). It runs only
        on a settled batch (:func:`~featureflow.spark.commit_log.settled_batch`):
        Spark never re-runs it, so its state version is final. Closing twice is a
        no-op (a closed session has left the state), and a close cut short is
        redone whole at the next start (``only_unfinished``: only when one of the
        batch's ``-closed`` offline files exists), before any batch could close the
        same sessions into its own file.
        """
        from featureflow.spark import commit_log, topic_pass

        sessions = [view for view in self.views if view.spec.is_session_view]
        if not sessions or self.checkpoint is None:
            return
        batch_id = commit_log.settled_batch(self.checkpoint)
        if batch_id is None:
            return
        lead = self._lead
        watermark_ns = lead.state.load_watermarks(batch_id + 1, lead.spec.watermark_ns)
        if watermark_ns.watermark_ns is None:
            return
        tasks = tuple(
            view.task(batch_id, watermark_ns.watermark_ns, reads_before=batch_id + 1,
                      offline_suffix=CLOSED_SUFFIX)
            for view in sessions
        )  # fmt: skip
        if only_unfinished and not any(
            task.offline.has_suffix(batch_id, CLOSED_SUFFIX) for task in tasks
        ):
            return
        started = time.monotonic()
        partitions = lead.partitions
        closer = topic_pass.SessionCloser(tasks, lead.repo_path, batch_id)
        stats = (
            spark.range(0, partitions, numPartitions=partitions)
            .mapInArrow(closer, topic_pass.OUTPUT_SCHEMA)
            .toArrow()
            .to_pylist()
        )
        for view in sessions:
            for row in stats:
                if row["view"] == view.spec.name:
                    view.state_sizes[row["shuffle_partition"]] = state_size(row)
        log.info(
            "closed the sessions the watermark after micro-batch %d finalises (%s) in %.1f s",
            batch_id, ", ".join(view.spec.name for view in sessions), time.monotonic() - started,
        )  # fmt: skip


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


def checkpoint_order(root: str, specs: list[StreamViewSpec]) -> list[StreamViewSpec]:
    """The views of one query in the order that names its checkpoint, ``<root>/<a>+<b>...``.

    The order matters twice: it names the query's checkpoint directory, and its
    first view keeps the watermarks. The registry lists views in no fixed order
    (two applies of one repo gave both orders), so a query takes the order of an
    existing checkpoint of the same views under ``root``, else their names sorted.
    """
    names = sorted(spec.name for spec in specs)
    by_name = {spec.name: spec for spec in specs}
    if len(specs) > 1:
        filesystem, base = filesystem_of(root)
        found = filesystem.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        for info in found:
            parts = info.base_name.split("+")
            if info.type == pafs.FileType.Directory and sorted(parts) == names:
                return [by_name[name] for name in parts]
    return [by_name[name] for name in names]


TASKS_PER_CORE = 4
"""Shuffle partitions of a new checkpoint per core Spark runs tasks on (``--partitions``
unset). A topic task's memory above its partition's state (the batch's rows, their
features, merged runs, the online rows) grows with its partition's share of the batch
and of the state, and a worker keeps what its largest task touched: in a 10 M-event
run (1 M records a micro-batch, 2 cores) the workers' peak growth was 2.8-3.4x the
state with 8 partitions against 3.7-4.6x with 4, at the same events/s; 16 gained
nothing more (``bench/stream.py``; docs/performance-log.md, *Which task sets a worker's
peak*). With one state host per executor (2026-12-04), 16 read 1.99-2.12x against
2.18-2.32x with 8, at 5-15 % fewer events/s and twice the state and offline files a
batch: a setting (``--partitions``) for a memory-bound deployment, not the default
(docs/performance-log.md, *Seven ways to lower the host's peak*)."""


def shuffle_partitions(state_roots: list[str], cores: int) -> int:
    """The job's shuffle partitions when ``--partitions`` is unset: the count the views'
    state was written with (the state layout is per partition, so a checkpoint keeps
    its count, as Spark keeps a stateful query's), else :data:`TASKS_PER_CORE` per core.
    A views' state written with several counts is refused by
    :meth:`~featureflow.spark.state.StateStore.check_layout`."""
    written = set().union(*(written_partitions(root) for root in state_roots))
    if written:
        chosen = min(written)
        log.info("shuffle partitions: %d, as the checkpoint's state was written", chosen)
        return chosen
    return TASKS_PER_CORE * max(1, cores)


def keyed_slices(state_roots: list[str], keyed: KeyedTopic, cores: int) -> int:
    """The state slices of each Kafka partition of a keyed topic: ``--keyed-slices`` when
    given, else the count the views' state was written with (a checkpoint keeps its
    placement), else enough for :data:`TASKS_PER_CORE` state partitions per core in all,
    as the shuffled layout has (at least one per Kafka partition).

    Measured on 10 M events over 2 Kafka partitions, 2 cores (``bench/stream.py``, section
    ``keyed_slices``, two runs, 2026-12-07): the workers' peak grew 3.27-3.44x the state
    with 1 slice each, 2.50-2.53x with 2 and 2.29-2.38x with 4, at events/s within the
    runs' spread (220-249 k for each count)."""
    if keyed.slices is not None:
        return keyed.slices
    for root in state_roots:
        recorded = recorded_partitioning(root)
        parts = None if recorded is None else keyed_scheme_parts(recorded)
        if parts is not None:
            _, written = parts
            log.info("keyed state slices: %d, as the checkpoint's state was written", written)
            return written
    return max(1, -(-TASKS_PER_CORE * max(1, cores) // keyed.partitions))


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
    root = options.checkpoint.rstrip("/")
    specs = checkpoint_order(root, specs)
    keyed = options.keyed_topic
    if keyed is not None and specs[0].avro_schema is not None:
        msg = f"--keyed-topic: topic {specs[0].topic!r} is Avro; the keyed pass reads JSON only"
        raise RepoError(msg)
    if keyed is not None:
        from featureflow.infra import kafka_client

        found = len(
            kafka_client.end_offsets(
                options.bootstrap or specs[0].bootstrap_servers, specs[0].topic,
                settings=options.kafka_settings,
            )
        )  # fmt: skip
        if found != keyed.partitions:
            msg = (
                f"--keyed-topic: topic {specs[0].topic!r} has {found} partitions, not "
                f"--partitions {keyed.partitions}: a keyed topic's partitions are its state's"
            )
            raise RepoError(msg)
    state_roots = [f"{root}/{spec.name}/featureflow-state" for spec in specs]
    cores = spark.sparkContext.defaultParallelism
    if keyed is not None:
        keyed = replace(keyed, slices=keyed_slices(state_roots, keyed, cores))
        options = replace(options, keyed_topic=keyed)
        log.info("keyed topic: %d Kafka partitions, %d state slices each",
                 keyed.partitions, keyed.slice_count)  # fmt: skip
    partitions = (
        keyed.state_partition_count if keyed
        else options.partitions or shuffle_partitions(state_roots, cores)
    )  # fmt: skip
    views = []
    for spec in specs:
        state = StateStore(f"{root}/{spec.name}/featureflow-state", partitions)
        state.check_partitioning(keyed.scheme if keyed else ENTITY_HASH)
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
    name = "+".join(spec.name for spec in specs)
    processor = TopicBatchProcessor(views, checkpoint=f"{root}/{name}")
    processor.close_settled_sessions(spark, only_unfinished=True)
    source = read_kafka(spark, specs[0], options)
    stream = source.select(*PASSED_THROUGH) if keyed else parse_events(source, specs[0])
    writer = (
        stream.writeStream.queryName(f"featureflow_{name}")
        .foreachBatch(processor)
        .option("checkpointLocation", f"{root}/{name}")
    )
    if options.available_now:
        writer = writer.trigger(availableNow=True)
    elif options.trigger_interval:
        writer = writer.trigger(processingTime=options.trigger_interval)
    return writer.start(), processor
