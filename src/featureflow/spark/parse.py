"""Kafka records -> typed events, with a reason for every record that can't be used.

Runs as Spark SQL expressions (in the JVM, vectorised), so no Python row loop
touches the raw stream. Every output row keeps its Kafka coordinates and raw
bytes; rows that fail a check carry ``error_field`` and ``error_reason`` (the
first failing check, in the order below) instead of being dropped:

1. ``value``: the message is empty or not a JSON object (Avro sources: not a
   record of the source's Avro schema);
2. the entity key: missing / null, or not an integer;
3. the event timestamp: missing, neither RFC 3339 text nor epoch milliseconds,
   or outside what epoch nanoseconds in int64 represent (years 1677-2262);
4. any other declared field: present but of the wrong type (a null is fine;
   Avro records are typed by their schema, so this check is JSON's only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from featureflow.errors import RepoError
from featureflow.repo import StreamViewSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    Check = tuple[Column, str, str]  # (condition, field, reason)

EVENT_TIME = "event_ts"
"""Output column: the event time as a Spark timestamp (UTC)."""
EVENT_NS = "event_ns"
"""Output column: the event time in epoch nanoseconds (int64), what the kernels read."""
ERROR_FIELD = "error_field"
ERROR_REASON = "error_reason"
KAFKA_COLUMNS = ("topic", "partition", "offset")

_MAX_ABS_MILLIS = (2**63 - 1) // 1_000_000
"""Epoch milliseconds whose nanoseconds still fit in int64 (about +-292 years from 1970)."""


def _raw_json_field(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.get_json_object(F.col("value").cast("string"), f"$.{name}")


def _json_object(spec: StreamViewSpec, schema: StructType) -> tuple[Column, list[Check]]:
    """The parsed JSON struct and the checks of its shape and entity key."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    parsed = F.from_json(text, schema)
    is_object = (
        F.coalesce(F.trim(text).startswith("{"), F.lit(False))
        & F.json_object_keys(text).isNotNull()
    )
    return parsed, [
        (~is_object, "value", "not a JSON object"),
        (_raw_json_field(spec.join_key).isNull(), spec.join_key, "missing or null entity key"),
        (parsed[spec.join_key].isNull(), spec.join_key, "entity key is not an integer"),
    ]


def _avro_record(spec: StreamViewSpec, schema: StructType) -> tuple[Column, list[Check]]:
    """The decoded Avro record (plain Avro binary, no schema-registry header) and its checks."""
    from functools import reduce

    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    assert spec.avro_schema is not None
    # PERMISSIVE: a record that does not decode becomes a row of nulls (measured: a
    # truncated record gives a struct whose every field is null) instead of failing
    # the batch.
    parsed = from_avro(F.col("value"), spec.avro_schema, {"mode": "PERMISSIVE"})
    every_field_null = reduce(
        lambda acc, name: acc & parsed[name].isNull(),
        [field.name for field in schema.fields],
        F.lit(True),
    )
    return parsed, [
        (
            F.col("value").isNull() | parsed.isNull() | every_field_null,
            "value",
            "not an Avro record of the source's schema",
        ),
        (parsed[spec.join_key].isNull(), spec.join_key, "missing or null entity key"),
    ]


def first_failing(checks: list[Check]) -> tuple[Column, Column]:
    """(field, reason) of the first check whose condition holds, in order; nulls when none."""
    from pyspark.sql import functions as F

    error_field: Column = F.lit(None).cast("string")
    error_reason: Column = F.lit(None).cast("string")
    for condition, field_name, reason in reversed(checks):  # so the first check wins
        error_field = F.when(condition, F.lit(field_name)).otherwise(error_field)
        error_reason = F.when(condition, F.lit(reason)).otherwise(error_reason)
    return error_field, error_reason


def parse_events(raw: DataFrame, spec: StreamViewSpec) -> DataFrame:
    """Parse the ``value`` of Kafka records (``spark.readStream.format("kafka")``) as events
    (JSON, or Avro when the view's source is Avro).

    Returns:
        Columns: the view's JSON fields (typed as its schema declares, the
        timestamp field as text), ``event_ts``, ``event_ns``, ``error_field``,
        ``error_reason``, ``topic``, ``partition``, ``offset``, ``key`` and ``value``
        (the record's raw bytes).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(spec.json_schema)
    if not isinstance(schema, StructType):
        msg = f"view {spec.name!r}: the JSON schema {spec.json_schema!r} is not a list of fields"
        raise RepoError(msg)
    if spec.avro_schema is not None:
        parsed, checks = _avro_record(spec, schema)
    else:
        parsed, checks = _json_object(spec, schema)

    stamp = parsed[spec.timestamp_field].cast("string")
    is_millis = F.coalesce(stamp.rlike(r"^-?[0-9]+$"), F.lit(False))
    millis = stamp.try_cast("long")
    millis_in_range = F.coalesce(millis.between(-_MAX_ABS_MILLIS, _MAX_ABS_MILLIS), F.lit(False))
    event_ts = (
        F.when(is_millis & millis_in_range, F.timestamp_millis(millis))
        .when(is_millis, F.lit(None).cast("timestamp"))
        .otherwise(F.try_to_timestamp(stamp))
    )  # fmt: skip
    # Epoch ns in int64 covers 1677-09-21 .. 2262-04-11; beyond, the product overflows.
    event_ns = F.try_multiply(F.unix_micros(event_ts), F.lit(1000))
    out_of_range = "outside the years 1677-2262 (not representable in epoch nanoseconds)"
    checks += [
        (stamp.isNull(), spec.timestamp_field, "missing or null event timestamp"),
        (is_millis & ~millis_in_range, spec.timestamp_field, out_of_range),
        (
            event_ts.isNull(),
            spec.timestamp_field,
            "not an RFC 3339 timestamp or epoch milliseconds",
        ),
        (event_ns.isNull(), spec.timestamp_field, out_of_range),
    ]
    if spec.avro_schema is None:
        for field in schema.fields:
            if field.name in (spec.join_key, spec.timestamp_field):
                continue
            wrong_type = _raw_json_field(field.name).isNotNull() & parsed[field.name].isNull()
            checks.append((wrong_type, field.name, f"not a valid {field.dataType.simpleString()}"))

    error_field, error_reason = first_failing(checks)
    return raw.select(
        *(parsed[field.name].cast(field.dataType).alias(field.name) for field in schema.fields),
        event_ts.alias(EVENT_TIME),
        event_ns.alias(EVENT_NS),
        error_field.alias(ERROR_FIELD),
        error_reason.alias(ERROR_REASON),
        *(F.col(name) for name in KAFKA_COLUMNS),
        F.col("key"),
        F.col("value"),
    )
