"""Peers of the stream job in ``bench/stream.py``, run on the same Kafka topic in one session.

- Feast's own ``SparkKafkaProcessor`` (``feast.infra.contrib.spark_kafka_processor``):
  JSON from Kafka, the view's ``udf``, then per micro-batch ``toPandas()`` on the
  driver, the latest row per key, ``write_to_online_store``. It computes no
  windows, so against it the benchmark measures the cost of ingest. Its ``udf``
  here turns each event into the view's 18 columns (count 1, sum/mean/min/max
  the amount, std null): the cheapest row that Feast's write accepts.
- Spark's native streaming ``window()`` aggregation for the hopping case: per
  user, windows of 1 h every 10 min, count/sum/avg/min/max of ``amount``, a
  5 min watermark, append mode into the ``noop`` sink, ``availableNow``.
- The read floor: the Kafka source alone into the ``noop`` sink.
- The parse floor: the Kafka source and the job's own parser
  (:func:`featureflow.spark.parse.parse_events`) into the ``noop`` sink. The job
  and the ``window()`` peer both pay it, so it bounds how far the job can get
  ahead of ``window()``: at best window()'s time / the parse floor's.

All are timed from their ``StreamingQuery`` progress reports: from the start
of the first micro-batch that read records to the end of the last one (s).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from featureflow.repo import StreamViewSpec

FEAST_CHECKPOINT = "/tmp/checkpoint/"
"""Where ``SparkKafkaProcessor`` hard-codes its checkpoint (shared by every run on the host)."""


@dataclass
class StreamRun:
    """One system's run over the topic: what it read and how long it took."""

    system: str
    events: int  # records the system read from the topic
    wall_s: float  # first micro-batch start -> last micro-batch end, seconds
    batches: list[dict[str, Any]] = field(default_factory=list)  # per micro-batch breakdown
    freshness_p50_s: float | None = None
    freshness_p99_s: float | None = None
    note: str = ""
    memory: dict[str, Any] = field(default_factory=dict)  # Python workers' RSS (featureflow)
    cpu: dict[str, float] = field(default_factory=dict)  # CPU s by process kind (_process_cpu)

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def interval(self) -> tuple[float, float] | None:
        """(start, end) epoch seconds of the run: its first micro-batch's start (its end
        less its duration) to its last one's end; None without batch ends."""
        timed = [b for b in self.batches if b.get("end_s") is not None]
        if not timed:
            return None
        return min(batch_start_s(b) for b in timed), max(b["end_s"] for b in timed)

    @property
    def steady_events_per_s(self) -> float | None:
        """Events/s after the first micro-batch: the records of every later batch over the
        seconds from the first batch's end to the last one's (``end_s``, epoch s; each
        batch id once). The whole-run figure pays once for a cold start (the JVM's JIT,
        Python workers importing their modules, first connections), 10-16 s of a 10 M run
        here; this one is what each further micro-batch costs. None: fewer than two
        batches with an end."""
        ends: dict[int, tuple[float, int]] = {}
        for batch in self.batches:
            if batch.get("end_s") is not None:
                ends.setdefault(batch["batch_id"], (batch["end_s"], batch["records"]))
        if len(ends) < 2:
            return None
        ordered = [ends[batch_id] for batch_id in sorted(ends)]
        seconds = ordered[-1][0] - ordered[0][0]
        later = sum(records for _, records in ordered[1:])
        return later / seconds if seconds > 0 else None


def batch_start_s(batch: dict[str, Any]) -> float:
    """Epoch seconds a micro-batch line started: its end (``end_s``) less its duration
    (``duration_s``, 0 when absent). The one rule for a batch's start."""
    return float(batch["end_s"]) - (batch.get("duration_s") or 0.0)


def _instant(timestamp: str) -> float:
    """Epoch seconds of a progress report's ``timestamp`` (``2026-11-30T09:30:11.123Z``)."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def run_from_progress(system: str, progress: dict[int, dict[str, Any]]) -> StreamRun:
    """A :class:`StreamRun` of a query's progress reports (by batch id) that read records."""
    busy = [report for _, report in sorted(progress.items()) if report["numInputRows"] > 0]
    if not busy:
        return StreamRun(system, 0, 0.0, note="no micro-batch read any record")
    batches = [
        {
            "batch_id": report["batchId"],
            "records": report["numInputRows"],
            "duration_s": report["durationMs"].get("triggerExecution", 0) / 1e3,
            "get_offsets_s": report["durationMs"].get("latestOffset", 0) / 1e3,
            "add_batch_s": report["durationMs"].get("addBatch", 0) / 1e3,
            "end_s": _instant(report["timestamp"])
            + report["durationMs"].get("triggerExecution", 0) / 1e3,
        }
        for report in busy
    ]
    start = _instant(busy[0]["timestamp"])
    end = _instant(busy[-1]["timestamp"]) + batches[-1]["duration_s"]
    return StreamRun(system, sum(b["records"] for b in batches), end - start, batches)


def _progress(query: StreamingQuery, seen: dict[int, dict[str, Any]]) -> int:
    """Add the query's recent progress reports to ``seen``; returns the records read so far."""
    for report in query.recentProgress:
        seen[report["batchId"]] = report
    return sum(report["numInputRows"] for report in seen.values())


@contextlib.contextmanager
def _private_feast_checkpoint(directory: Path) -> Iterator[None]:
    """Redirect ``SparkKafkaProcessor``'s hard-coded ``/tmp/checkpoint/`` to ``directory``.

    The only change to Feast's code path: a shared ``/tmp/checkpoint/`` would
    resume another run's offsets (or fail on another topic's checkpoint).
    """
    from pyspark.sql.streaming import DataStreamWriter

    original = DataStreamWriter.option

    def option(self: DataStreamWriter, key: str, value: Any) -> DataStreamWriter:
        if key == "checkpointLocation" and value == FEAST_CHECKPOINT:
            value = str(directory)
        return original(self, key, value)

    DataStreamWriter.option = option  # type: ignore[method-assign]
    try:
        yield
    finally:
        DataStreamWriter.option = original  # type: ignore[method-assign]


def feast_ingest_udf(df: DataFrame) -> DataFrame:
    """The view's columns from each raw event: no windows, the cheapest row Feast accepts."""
    from pyspark.sql import functions as F

    stamp = F.col("event_timestamp")
    event_ts = F.when(stamp.rlike(r"^-?[0-9]+$"), F.timestamp_millis(stamp.cast("long"))).otherwise(
        F.try_to_timestamp(stamp)
    )
    columns = [F.col("user_id"), event_ts.alias("event_timestamp")]
    for seconds in (600, 3600, 86400):
        for function in ("count", "sum", "mean", "min", "max", "std"):
            name = f"{function}_amount_{seconds}s"
            if function == "count":
                value = F.lit(1).cast("long")
            elif function == "std":
                value = F.lit(None).cast("double")
            else:
                value = F.col("amount")
            columns.append(value.alias(name))
    return df.where(F.col("user_id").isNotNull() & event_ts.isNotNull()).select(*columns)


def run_feast(
    spark: SparkSession,
    repo: Path,
    expected: int,
    checkpoint: Path,
    max_offsets_per_trigger: int,
    timeout_s: float,
) -> StreamRun:
    """Feast's ``SparkKafkaProcessor`` over the topic of ``repo``'s ``user_txn_stats``.

    It starts at ``latest`` by default; ``stream_source_options`` (Feast's own
    override) makes it read the topic from ``earliest`` with the same
    ``maxOffsetsPerTrigger`` as featureflow, so both ingest the same events.
    Runs until it has read ``expected`` records or ``timeout_s`` seconds passed.
    """
    from feast.infra.contrib.spark_kafka_processor import (
        SparkKafkaProcessor,
        SparkProcessorConfig,
    )

    from featureflow.repo import load_store

    store = load_store(repo)
    view = store.get_stream_feature_view("user_txn_stats")
    view.udf = feast_ingest_udf
    config = SparkProcessorConfig(
        mode="spark", source="kafka", spark_session=spark, processing_time="0 seconds",
        query_timeout=1,
    )  # fmt: skip
    processor = SparkKafkaProcessor(
        fs=store, sfv=view, config=config,
        stream_source_options={
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": str(max_offsets_per_trigger),
        },
    )  # fmt: skip
    with _private_feast_checkpoint(checkpoint):
        query = processor.ingest_stream_feature_view()
    seen: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while _progress(query, seen) < expected and time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f"Feast's query failed: {query.exception()}")
            time.sleep(0.5)
    finally:
        query.stop()
    _progress(query, seen)
    run = run_from_progress("Feast SparkKafkaProcessor (ingest, no windows)", seen)
    if run.events < expected:
        run.note = f"stopped after {timeout_s:.0f} s with {run.events} of {expected} records"
    return run


def parsed_topic(
    spark: SparkSession, repo: Path, bootstrap: str, checkpoint: Path, max_offsets_per_trigger: int
) -> tuple[StreamViewSpec, DataFrame]:
    """``user_txn_stats``'s spec in ``repo`` and its topic read and parsed as the job
    does (:func:`featureflow.spark.parse.parse_events`): what every peer that pays
    the job's parse starts from."""
    from featureflow.repo import load_store, stream_view_specs
    from featureflow.spark.parse import parse_events
    from featureflow.spark.pipeline import StreamOptions, read_kafka

    spec = stream_view_specs(load_store(repo), ["user_txn_stats"])[0]
    options = StreamOptions(
        checkpoint=str(checkpoint), bootstrap=bootstrap,
        max_offsets_per_trigger=max_offsets_per_trigger,
    )  # fmt: skip
    return spec, parse_events(read_kafka(spark, spec, options), spec)


def run_spark_window(
    spark: SparkSession,
    repo: Path,
    bootstrap: str,
    checkpoint: Path,
    max_offsets_per_trigger: int,
) -> StreamRun:
    """Spark's hopping ``window(1 h, 10 min)`` per user over the topic, ``availableNow``.

    Parses records with the job's own parser (:func:`featureflow.spark.parse.parse_events`)
    so both pay the same parse cost; events behind the 5 min watermark are dropped.
    """
    from pyspark.sql import functions as F

    from featureflow.spark.parse import ERROR_REASON, EVENT_TIME

    spec, parsed = parsed_topic(spark, repo, bootstrap, checkpoint, max_offsets_per_trigger)
    events = parsed.where(F.col(ERROR_REASON).isNull())
    windows = (
        events.withWatermark(EVENT_TIME, "5 minutes")
        .groupBy(F.window(EVENT_TIME, "1 hour", "10 minutes"), F.col(spec.join_key))
        .agg(
            F.count("amount").alias("count"),
            F.sum("amount").alias("sum"),
            F.avg("amount").alias("mean"),
            F.min("amount").alias("min"),
            F.max("amount").alias("max"),
        )
    )
    query = (
        windows.writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"Spark's window query failed: {query.exception()}")
    seen: dict[int, dict[str, Any]] = {}
    _progress(query, seen)
    return run_from_progress("Spark window(1 h, 10 min) hopping, noop sink", seen)


def kafka_records(
    spark: SparkSession, bootstrap: str, topic: str, max_offsets_per_trigger: int
) -> DataFrame:
    """The topic's raw records from the earliest offset, ``max_offsets_per_trigger`` a batch,
    read with the Kafka client settings of the job (and so of every peer that reads through
    :func:`parsed_topic`)."""
    from featureflow.spark.kafka_source import kafka_read_options

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    )
    for key, value in kafka_read_options({}).items():
        reader = reader.option(key, value)
    return reader.load()


def run_into_noop(frame: DataFrame, checkpoint: Path, system: str) -> StreamRun:
    """``frame`` (streaming) into the ``noop`` sink, ``availableNow``, timed from its progress."""
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{system}: the query failed: {query.exception()}")
    seen: dict[int, dict[str, Any]] = {}
    _progress(query, seen)
    return run_from_progress(system, seen)


def run_parse_floor(
    spark: SparkSession, repo: Path, bootstrap: str, checkpoint: Path, max_offsets_per_trigger: int
) -> StreamRun:
    """The Kafka source and the job's parser into the ``noop`` sink, ``availableNow``.

    Every record parsed and checked as the job and :func:`run_spark_window` do (bad
    records keep their reasons, as the job's dead letters need), then dropped: no
    shuffle, no window, no write. Neither system can run faster than this.
    """
    _, parsed = parsed_topic(spark, repo, bootstrap, checkpoint, max_offsets_per_trigger)
    return run_into_noop(
        parsed,
        checkpoint,
        "Kafka source + the job's parser, noop sink (the parse floor)",
    )


def run_shuffle_floor(
    spark: SparkSession, repo: Path, bootstrap: str, checkpoint: Path, max_offsets_per_trigger: int
) -> StreamRun:
    """The job's two Arrow passes and its shuffle with no views in them, ``availableNow``.

    Kafka source, the job's parser and event-time marks, the raw bytes dropped
    where no dead letter needs them, hash partitioned by the entity key into the
    job's number of partitions and handed to a ``mapInArrow`` that reads every batch
    and returns nothing, into the ``noop`` sink: what the job's layout costs before
    any state, kernel or write (the job itself adds counts, dead letters and views).
    """
    import pyarrow as pa

    from featureflow.columns import EVENT_NS
    from featureflow.spark.event_time import mark_event_time, without_unneeded_bytes
    from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON, PASSED_THROUGH
    from featureflow.spark.pipeline import shuffle_partitions

    spec, parsed = parsed_topic(spark, repo, bootstrap, checkpoint, max_offsets_per_trigger)
    selected = parsed.select(
        spec.join_key, EVENT_NS, *spec.value_columns, *PASSED_THROUGH, ERROR_FIELD, ERROR_REASON
    )
    checked = without_unneeded_bytes(mark_event_time(selected, spec.timestamp_field, None, 2**62))
    partitions = shuffle_partitions([], spark.sparkContext.defaultParallelism)  # the job's own

    def drain(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        return iter(())

    passed = checked.repartition(partitions, spec.join_key).mapInArrow(drain, "rows long")
    return run_into_noop(
        passed, checkpoint, "Kafka + parse + the job's shuffle and second pass, no views, noop sink"
    )


def run_read_floor(
    spark: SparkSession, bootstrap: str, topic: str, checkpoint: Path, max_offsets_per_trigger: int
) -> StreamRun:
    """The Kafka source alone into the ``noop`` sink, ``availableNow``: the read floor.

    No parse, no shuffle: what any system reading this topic through Spark pays
    before doing anything with a record.
    """
    return run_into_noop(
        kafka_records(spark, bootstrap, topic, max_offsets_per_trigger),
        checkpoint,
        "Kafka source alone, noop sink (the read floor)",
    )
