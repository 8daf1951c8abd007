"""Kafka records -> typed events, with a reason for every record that can't be used.

JSON messages are decoded on the executors, in ``mapInArrow``, a whole Arrow
batch at a time by :mod:`featureflow.events.json_batch` (a column at a time,
with the decoder and converters of the per-record parser,
:mod:`featureflow.events.json_records`, so every output and dead-letter
reason is the per-record parser's); Avro messages by Spark's ``from_avro``
(on the JVM: nothing to vectorise in Python); the timestamp and the
first-failing-check logic are Spark SQL expressions shared by both, except that
a JSON timestamp in one of the usual forms (epoch milliseconds, zoned RFC 3339)
is read in the same ``mapInArrow`` pass, exactly as Spark would read it
(:mod:`featureflow.events.timestamps`). Every
output row keeps its Kafka coordinates and raw bytes; rows that fail a check
carry ``error_field`` and ``error_reason`` (the first failing check, in the
order below) instead of being dropped:

1. ``value``: the message is empty or not a JSON object (Avro sources: not a
   record of the source's Avro schema);
2. the entity key: missing / null, or not an integer;
3. the event timestamp: missing, neither RFC 3339 text nor epoch milliseconds,
   or outside what epoch nanoseconds in int64 represent (years 1677-2262);
4. any other declared field: present but of the wrong type (a null is fine;
   Avro records are typed by their schema, so this check is JSON's only);
5. a ``double`` or ``float`` field that is NaN or infinite ("not a finite
   number": ``1e400``, ``-1e400`` and the words ``NaN``/``Infinity`` parse to
   them, and one such value would poison every window it falls in).

The event-time rules that need the micro-batch's clock and watermark
(events in the future, late events) are applied by the pipeline
(:mod:`featureflow.spark.event_time`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from featureflow.columns import EVENT_NS
from featureflow.errors import RepoError
from featureflow.events import reasons
from featureflow.events.json_batch import BatchJsonParser
from featureflow.events.json_records import (
    IS_OBJECT,
    KEY_PRESENT,
    STAMP,
    VALID_PREFIX,
    JsonRecordParser,
)
from featureflow.events.timestamps import event_micros
from featureflow.repo import StreamViewSpec

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    Check = tuple[Column, str, str]  # (condition, field, reason)

EVENT_TIME = "event_ts"
"""Output column: the event time as a Spark timestamp (UTC)."""
ERROR_FIELD = "error_field"
ERROR_REASON = "error_reason"
KAFKA_COLUMNS = ("topic", "partition", "offset")
PASSED_THROUGH = (*KAFKA_COLUMNS, "key", "value")
"""Columns of the Kafka record that every parsed row keeps."""


_DECODED = "__decoded"
"""Staging column (Avro): the record decoded into the view's schema."""
_ERROR = "__error"
"""Staging column: struct(field, reason) of the first failing check, null when none fails."""
_STAMP_MICROS = "__stamp_micros"
"""Staging column (JSON): the timestamp in epoch µs where :func:`~featureflow.events.timestamps.
event_micros` reads it (the usual forms, exactly as Spark would), else null (Spark reads it)."""


def _json_decoded(
    raw: DataFrame, spec: StreamViewSpec, schema: StructType, *, vectorised: bool = True
) -> DataFrame:
    """The Kafka columns, every declared field typed, the parser's check columns and
    :data:`_STAMP_MICROS`.

    Parsed on the executors in one ``mapInArrow`` pass by
    :class:`~featureflow.events.json_batch.BatchJsonParser` (``vectorised``), or
    record by record by :class:`~featureflow.events.json_records.JsonRecordParser`
    (the same table; kept for the differential test and the benchmark). Either
    decodes each record once, where Spark's ``from_json`` needed three (typed, as
    text, object keys).
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructType

    parser = JsonRecordParser(
        tuple((field.name, field.dataType.simpleString()) for field in schema.fields),
        spec.join_key,
        spec.timestamp_field,
    )
    decode = BatchJsonParser(parser) if vectorised else parser
    passed = raw.select(*PASSED_THROUGH)
    parsed_schema = parser.output_schema().append(pa.field(_STAMP_MICROS, pa.int64()))
    out = StructType(passed.schema.fields + from_arrow_schema(parsed_schema).fields)

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from featureflow.spark import allocators, worker_gc

        allocators.use_returning_allocators()
        for batch in batches:
            parsed = decode(batch.column("value"))
            yield pa.RecordBatch.from_arrays(
                [
                    *batch.columns,
                    *(column.combine_chunks() for column in parsed.columns),
                    event_micros(parsed.column(STAMP)),
                ],
                names=[*batch.schema.names, *parsed.column_names, _STAMP_MICROS],
            )
        worker_gc.settle()

    return passed.mapInArrow(parse, out)


def _json_checks(spec: StreamViewSpec) -> list[Check]:
    """The checks of a JSON message's shape and entity key (on the parser's columns)."""
    from pyspark.sql import functions as F

    return [
        (~F.col(IS_OBJECT), "value", reasons.NOT_JSON_OBJECT),
        (~F.col(KEY_PRESENT), spec.join_key, reasons.MISSING_KEY),
        (~F.col(VALID_PREFIX + spec.join_key), spec.join_key, reasons.KEY_NOT_INTEGER),
    ]


def _avro_decoder(spec: StreamViewSpec) -> Column:
    """The decoded Avro record (plain Avro binary, no schema-registry header)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    assert spec.avro_schema is not None
    # PERMISSIVE: a record that does not decode becomes a row of nulls (measured: a
    # truncated record gives a struct whose every field is null) instead of failing
    # the batch.
    return from_avro(F.col("value"), spec.avro_schema, {"mode": "PERMISSIVE"}).alias(_DECODED)


def _avro_checks(spec: StreamViewSpec, schema: StructType) -> list[Check]:
    """The checks of an Avro record's shape and entity key (on the staged columns)."""
    from functools import reduce

    from pyspark.sql import functions as F

    decoded = F.col(_DECODED)
    every_field_null = reduce(
        lambda acc, name: acc & decoded[name].isNull(),
        [field.name for field in schema.fields],
        F.lit(True),
    )
    return [
        (
            F.col("value").isNull() | decoded.isNull() | every_field_null,
            "value",
            "not an Avro record of the source's schema",
        ),
        (decoded[spec.join_key].isNull(), spec.join_key, reasons.MISSING_KEY),
    ]


def first_failing(checks: list[Check]) -> Column:
    """struct(field, reason) of the first check whose condition holds, in order; null when none.

    One CASE, so each condition is evaluated at most once per row. Select its
    ``field`` and ``reason`` in a later projection: Spark then evaluates the CASE
    once, where two separate CASE columns would evaluate the conditions twice.
    """
    from pyspark.sql import functions as F

    error: Column = F.lit(None).cast("struct<field:string,reason:string>")
    for condition, field_name, reason in reversed(checks):  # so the first check wins
        found = F.struct(F.lit(field_name).alias("field"), F.lit(reason).alias("reason"))
        error = F.when(condition, found).otherwise(error)
    return error


def with_first_failing(frame: DataFrame, checks: list[Check]) -> DataFrame:
    """``frame`` plus ``error_field`` and ``error_reason`` (null: every check passes)."""
    from pyspark.sql import functions as F

    staged = frame.select("*", first_failing(checks).alias(_ERROR))
    return staged.select(
        *(F.col(f"`{name}`") for name in frame.columns),
        F.col(_ERROR)["field"].alias(ERROR_FIELD),
        F.col(_ERROR)["reason"].alias(ERROR_REASON),
    )


def timestamp_read_in_spark(stamp: Column) -> tuple[Column, Column, Column]:
    """Spark's reading of timestamp texts: (the event time as a Spark timestamp, null when
    the text is none; whether the text is digits, i.e. epoch milliseconds; whether those
    are within what epoch nanoseconds hold).

    Digits are epoch milliseconds, anything else goes through Spark's timestamp cast
    (RFC 3339 and the other forms Spark reads; a text without a zone is UTC, the
    session's time zone).
    """
    from pyspark.sql import functions as F

    is_millis = F.coalesce(stamp.rlike(r"^-?[0-9]+$"), F.lit(False))
    # Only digit strings are cast: try_cast catches an exception per value it can't
    # cast, which made casting every RFC 3339 stamp the costliest step of parsing.
    millis = F.when(is_millis, stamp.try_cast("long"))
    millis_in_range = F.coalesce(
        millis.between(-reasons.MAX_ABS_MILLIS, reasons.MAX_ABS_MILLIS), F.lit(False)
    )
    event_ts = (
        F.when(is_millis & millis_in_range, F.timestamp_millis(millis))
        .when(is_millis, F.lit(None).cast("timestamp"))
        .otherwise(F.try_to_timestamp(stamp))
    )  # fmt: skip
    return event_ts, is_millis, millis_in_range


def parse_events(raw: DataFrame, spec: StreamViewSpec, *, vectorised: bool = True) -> DataFrame:
    """Parse the ``value`` of Kafka records (``spark.readStream.format("kafka")``) as events
    (JSON, or Avro when the view's source is Avro).

    ``vectorised=False`` decodes JSON record by record (the same rows; the reference
    the vectorised decode is tested and benchmarked against).

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
    avro = spec.avro_schema is not None
    # Stage by stage, so that Spark evaluates each costly expression (decoding,
    # timestamp parsing, the checks) once per record: a condition that names the
    # decoded struct in one big projection re-decodes the message in every branch
    # of the CASE.
    if avro:
        decoded = raw.select(*PASSED_THROUGH, _avro_decoder(spec))
        stamp = F.col(_DECODED)[spec.timestamp_field].cast("string")
        read_by_spark = F.lit(True)
    else:
        decoded = _json_decoded(raw, spec, schema, vectorised=vectorised)
        stamp = F.col(STAMP)
        read_by_spark = F.col(_STAMP_MICROS).isNull()
    # A stamp read in Arrow (JSON's usual forms) skips Spark's reading: every
    # condition on is_millis below is guarded by read_by_spark, which an AND and a
    # CASE evaluate first, so the regular expressions run only for the other stamps.
    read_in_spark, is_millis, millis_in_range = timestamp_read_in_spark(stamp)
    event_ts = read_in_spark if avro else (
        F.when(~read_by_spark, F.timestamp_micros(F.col(_STAMP_MICROS))).otherwise(read_in_spark)
    )  # fmt: skip
    timed = decoded.select("*", event_ts.alias(EVENT_TIME))
    # Epoch ns in int64 covers 1677-09-21 .. 2262-04-11; beyond, the product overflows.
    event_ns = F.try_multiply(F.unix_micros(EVENT_TIME), F.lit(1000))
    timed = timed.select("*", event_ns.alias(EVENT_NS))

    checks = _avro_checks(spec, schema) if avro else _json_checks(spec)
    checks += [
        (stamp.isNull(), spec.timestamp_field, reasons.MISSING_TIMESTAMP),
        (read_by_spark & is_millis & ~millis_in_range, spec.timestamp_field, reasons.OUT_OF_RANGE),
        (F.col(EVENT_TIME).isNull(), spec.timestamp_field, reasons.NOT_A_TIMESTAMP),
        (F.col(EVENT_NS).isNull(), spec.timestamp_field, reasons.OUT_OF_RANGE),
    ]
    for field in schema.fields:
        if field.name in (spec.join_key, spec.timestamp_field):
            continue
        if not avro:
            wrong_type = ~F.col(VALID_PREFIX + field.name)
            kind = field.dataType.simpleString()
            checks.append((wrong_type, field.name, reasons.wrong_type(kind)))
        if field.dataType.simpleString() in ("double", "float"):
            value = F.col(_DECODED)[field.name] if avro else F.col(field.name)
            not_finite = F.isnan(value) | (F.abs(value) == F.lit(float("inf")))
            checks.append((not_finite, field.name, reasons.NOT_FINITE))

    checked = with_first_failing(timed, checks)
    typed = (F.col(_DECODED)[field.name] if avro else F.col(field.name) for field in schema.fields)
    return checked.select(
        *(
            column.cast(field.dataType).alias(field.name)
            for column, field in zip(typed, schema.fields, strict=True)
        ),
        EVENT_TIME,
        EVENT_NS,
        ERROR_FIELD,
        ERROR_REASON,
        *PASSED_THROUGH,
    )
