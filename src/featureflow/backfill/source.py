"""Historical events for a backfill: Parquet files or a Kafka topic's retained records.

Both sources give the same columns: the view's join key (long), ``event_ns``
(epoch ns), the value columns the aggregations read (double), and for rows
that can't be used ``error_field``, ``error_reason`` and ``error_at`` (where
the row came from) — bad rows are carried to the executors, counted and
reported, never silently dropped. Kafka records are parsed by
:func:`featureflow.spark.parse.parse_events`, exactly as the stream job parses
them; Parquet rows get the same checks (entity key, timestamp, value types).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from featureflow.columns import EVENT_NS
from featureflow.errors import JobError, RepoError
from featureflow.repo import StreamViewSpec
from featureflow.spark.kafka_source import kafka_read_options
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON, parse_events, with_first_failing

if TYPE_CHECKING:
    from feast import FeatureStore
    from pyspark.sql import Column, DataFrame, SparkSession

ERROR_AT = "error_at"
"""Output column: where a bad row came from (``topic[partition]@offset``, or the Parquet file)."""


def batch_source_path(store: FeatureStore, spec: StreamViewSpec) -> str:
    """The Parquet path of the view's batch source, resolved against the repo directory.

    Raises:
        RepoError: the view's stream source declares no ``FileSource`` batch source.
    """
    from feast import FileSource

    view = store.get_stream_feature_view(spec.name)
    source = getattr(view.stream_source, "batch_source", None)
    if not isinstance(source, FileSource):
        msg = (
            f"view {spec.name!r}: its KafkaSource has no FileSource batch_source; "
            "pass --source PATH (Parquet) or --from-kafka"
        )
        raise RepoError(msg)
    path = source.path
    if "://" in path or Path(path).is_absolute():
        return path
    return str(Path(store.repo_path) / path)


def _checked(frame: DataFrame, spec: StreamViewSpec, checks: list[tuple[Column, str, str]],
             where: Column) -> DataFrame:  # fmt: skip
    """The standard columns, the first failing check (in order) naming field and reason."""
    from pyspark.sql import functions as F

    return with_first_failing(frame.select("*", where.alias(ERROR_AT)), checks).select(
        F.col(spec.join_key).cast("long").alias(spec.join_key),
        F.col(EVENT_NS),
        *(F.col(name).cast("double").alias(name) for name in spec.value_columns),
        ERROR_FIELD,
        ERROR_REASON,
        F.when(F.col(ERROR_REASON).isNotNull(), F.col(ERROR_AT)).alias(ERROR_AT),
    )


def read_parquet(spark: SparkSession, path: str, spec: StreamViewSpec) -> DataFrame:
    """Events from Parquet: the join key, the timestamp field and the value columns.

    The timestamp field may be a timestamp, epoch milliseconds (integer) or
    RFC 3339 text. Rows with a null or non-integer key, a null or unreadable
    timestamp, or a value that is not a number are bad rows.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegralType, NumericType, StringType, TimestampType

    try:
        frame = spark.read.parquet(path)
    except Exception as error:  # Spark's AnalysisException: path missing or not Parquet
        msg = f"cannot read the events at {path!r} as Parquet: {str(error).splitlines()[0]}"
        raise JobError(msg) from None
    types = {field.name: field.dataType for field in frame.schema.fields}
    missing = [c for c in (spec.join_key, spec.timestamp_field, *spec.value_columns)
               if c not in types]  # fmt: skip
    if missing:
        msg = f"the events at {path!r} lack the columns {missing}; they have {sorted(types)}"
        raise JobError(msg)
    stamp = F.col(spec.timestamp_field)
    stamp_type = types[spec.timestamp_field]
    if isinstance(stamp_type, TimestampType):
        event_ts = stamp
    elif isinstance(stamp_type, IntegralType):
        event_ts = F.timestamp_millis(stamp.cast("long"))
    elif isinstance(stamp_type, StringType):
        event_ts = F.try_to_timestamp(stamp)
    else:
        msg = (
            f"the events at {path!r}: {spec.timestamp_field!r} is {stamp_type.simpleString()}; "
            "expected a timestamp, epoch milliseconds or RFC 3339 text"
        )
        raise JobError(msg)
    frame = frame.withColumn(EVENT_NS, F.unix_micros(event_ts) * F.lit(1000))
    key = F.col(spec.join_key)
    key_ok = key.cast("long").isNotNull() & (
        F.lit(True) if isinstance(types[spec.join_key], IntegralType)
        else key.cast("long").cast("string") == key.cast("string")
    )  # fmt: skip
    checks: list[tuple[Column, str, str]] = [
        (key.isNull(), spec.join_key, "missing or null entity key"),
        (~key_ok, spec.join_key, "entity key is not an integer"),
        (stamp.isNull(), spec.timestamp_field, "missing or null event timestamp"),
        (event_ts.isNull(), spec.timestamp_field,
         "not an RFC 3339 timestamp or epoch milliseconds"),
    ]  # fmt: skip
    for name in spec.value_columns:
        if not isinstance(types[name], NumericType):
            checks.append((F.col(name).isNotNull() & F.col(name).cast("double").isNull(),
                           name, "not a valid double"))  # fmt: skip
    return _checked(frame, spec, checks, F.input_file_name())


def read_kafka(
    spark: SparkSession,
    spec: StreamViewSpec,
    bootstrap: str | None = None,
    kafka_options: dict[str, str] | None = None,
) -> DataFrame:
    """The records the view's topic retains (earliest to latest offsets), parsed as the job does."""
    from pyspark.sql import functions as F

    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap or spec.bootstrap_servers)
        .option("subscribe", spec.topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("failOnDataLoss", "false")
    )
    for key, value in kafka_read_options(kafka_options or {}).items():
        reader = reader.option(key, value)
    parsed = parse_events(reader.load(), spec)
    where = F.format_string("%s[%d]@%d", "topic", "partition", "offset")
    error = F.col(ERROR_REASON)
    return parsed.select(
        spec.join_key, EVENT_NS, *spec.value_columns, ERROR_FIELD, ERROR_REASON,
        F.when(error.isNotNull(), where).alias(ERROR_AT),
    )  # fmt: skip


def in_range(events: DataFrame, first_ns: int, end_ns: int) -> DataFrame:
    """Good events with ``first_ns <= event_ns < end_ns``, and bad rows (kept to be reported).

    A bad row with a readable time outside the range is not part of this
    backfill and is left out; one without a time is reported.
    """
    from pyspark.sql import functions as F

    ns = F.col(EVENT_NS)
    inside = (ns >= F.lit(first_ns)) & (ns < F.lit(end_ns))
    return events.filter(inside | (F.col(ERROR_REASON).isNotNull() & (ns.isNull() | inside)))
