"""Parsing Kafka records in Spark: typed events, or the field and reason they can't be used."""

from __future__ import annotations

import json

import json_messages
import pytest
from duckdb_oracle import EXAMPLE_SPEC
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from featureflow.columns import EVENT_NS
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON, parse_events

pytestmark = pytest.mark.integration

SPEC = EXAMPLE_SPEC

CASES: list[tuple[bytes | None, str | None, str | None, int | None]] = [
    # value, error field, reason (substring), expected event ns
    (b'{"user_id":1,"amount":2.5,"merchant":"a","event_timestamp":"2026-11-30T00:00:00.250Z"}',
     None, None, 1_795_996_800_250_000_000),
    (b'{"user_id":2,"amount":null,"event_timestamp":1795996800250}',
     None, None, 1_795_996_800_250_000_000),
    (b'{"user_id":3,"amount":4,"event_timestamp":"2026-11-30T01:00:00+01:00"}', None, None,
     1_795_996_800_000_000_000),
    (b"not json", "value", "not a JSON object", None),
    (b"", "value", "not a JSON object", None),
    (None, "value", "not a JSON object", None),
    (b"[1, 2]", "value", "not a JSON object", None),
    (b'{"user_id":1,"amount":2.5', "value", "not a JSON object", None),
    (b'{"amount":1,"event_timestamp":1}', "user_id", "missing or null entity key", None),
    (b'{"user_id":null,"event_timestamp":1}', "user_id", "missing or null entity key", None),
    (b'{"user_id":"abc","event_timestamp":1}', "user_id", "not an integer", None),
    (b'{"user_id":3.5,"event_timestamp":1}', "user_id", "not an integer", None),
    (b'{"user_id":3}', "event_timestamp", "missing or null event timestamp", None),
    (b'{"user_id":3,"event_timestamp":"yesterday"}', "event_timestamp", "not an RFC 3339", None),
    (b'{"user_id":3,"event_timestamp":1,"amount":"x"}', "amount", "not a valid double", None),
    (b'{"user_id":3,"event_timestamp":"9999-12-31T00:00:00Z"}', "event_timestamp",
     "outside the years 1677-2262", None),
    (b'{"user_id":3,"event_timestamp":253402214400000}', "event_timestamp",
     "outside the years 1677-2262", None),
    (b'{"user_id":3,"event_timestamp":1180591620717411303424}', "event_timestamp",
     "outside the years 1677-2262", None),
    (b'{"user_id":3,"event_timestamp":-9223372036854}', None, None,
     -9_223_372_036_854_000_000),
    # non-finite numbers: by overflow and by word
    (b'{"user_id":4,"amount":1e400,"event_timestamp":1}', "amount", "not a finite number", None),
    (b'{"user_id":4,"amount":-1e400,"event_timestamp":1}', "amount", "not a finite number", None),
    (b'{"user_id":4,"amount":"Infinity","event_timestamp":1}', "amount", "not a finite number",
     None),
    (b'{"user_id":4,"amount":"-INF","event_timestamp":1}', "amount", "not a finite number", None),
    (b'{"user_id":4,"amount":"NaN","event_timestamp":1}', "amount", "not a finite number", None),
    (b'{"user_id":4,"amount":1.7976931348623157e308,"event_timestamp":1}', None, None, 1_000_000),
    (b'{"user_id":4,"amount":NaN,"event_timestamp":1}', "value", "not a JSON object", None),
]  # fmt: skip


def _records(spark, values):  # type: ignore[no-untyped-def]
    rows = [(b"k", value, "t", 0, offset) for offset, value in enumerate(values)]
    return spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long"
    )


def test_each_bad_record_names_its_field_and_reason(spark) -> None:  # type: ignore[no-untyped-def]
    parsed = parse_events(_records(spark, [case[0] for case in CASES]), SPEC)
    rows = sorted(parsed.collect(), key=lambda row: row["offset"])
    assert len(rows) == len(CASES)
    for row, (value, field, reason, event_ns) in zip(rows, CASES, strict=True):
        assert row[ERROR_FIELD] == field, value
        if reason is None:
            assert row[ERROR_REASON] is None, value
            assert row[EVENT_NS] == event_ns, value
        else:
            assert reason in row[ERROR_REASON], value
        assert row["value"] == (bytearray(value) if value is not None else None)


def test_avro_non_finite_amounts_are_dead_letters(spark) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    from featureflow.events.avro import TRANSACTION_SCHEMA, encode_transaction

    spec = dataclasses.replace(SPEC, avro_schema=TRANSACTION_SCHEMA)
    amounts = [1.5, float("inf"), float("-inf"), None]
    values = [encode_transaction(7, amount, "m", 1_000) for amount in amounts]
    rows = sorted(parse_events(_records(spark, values), spec).collect(), key=lambda r: r["offset"])
    assert [(row[ERROR_FIELD], row[ERROR_REASON]) for row in rows] == [
        (None, None), ("amount", "not a finite number"), ("amount", "not a finite number"),
        (None, None),
    ]  # fmt: skip


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_events = st.fixed_dictionaries(
    {},
    optional={
        "user_id": _json_values,
        "amount": _json_values,
        "merchant": _json_values,
        "event_timestamp": _json_values,
    },
).map(lambda event: json.dumps(event).encode())
_record_values = st.one_of(_events, st.binary(max_size=40), st.none())


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(_record_values, min_size=1, max_size=60))
def test_every_record_is_either_an_event_or_has_a_reason(spark, values) -> None:  # type: ignore[no-untyped-def]
    rows = parse_events(_records(spark, values), SPEC).collect()
    assert len(rows) == len(values)  # nothing vanishes
    for row in rows:
        if row[ERROR_REASON] is None:
            assert row["user_id"] is not None
            assert row[EVENT_NS] is not None
            assert row[ERROR_FIELD] is None
        else:
            assert row[ERROR_FIELD] in {"value", "user_id", "event_timestamp", "amount", "merchant"}


def test_dead_letters_keep_the_bytes_and_say_why(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    from featureflow.spark.dead_letter import dead_letter_topic, dead_letters

    assert dead_letter_topic("transactions") == "transactions.dlq"
    parsed = parse_events(_records(spark, [case[0] for case in CASES]), SPEC)
    letters = dead_letters(parsed.filter(F.col(ERROR_REASON).isNotNull())).collect()
    bad_cases = [case for case in CASES if case[1] is not None]
    assert len(letters) == len(bad_cases)
    by_offset = {
        int(dict((h["key"], h["value"]) for h in row["headers"])["featureflow.offset"]): row
        for row in letters
    }
    for offset, (value, field, reason, _) in enumerate(CASES):
        if field is None:
            assert offset not in by_offset
            continue
        row = by_offset[offset]
        headers = {h["key"]: bytes(h["value"]).decode() for h in row["headers"]}
        assert row["value"] == (bytearray(value) if value is not None else None)
        assert row["key"] == bytearray(b"k")
        assert headers["featureflow.field"] == field
        assert reason in headers["featureflow.reason"]
        assert headers["featureflow.topic"] == "t"
        assert headers["featureflow.partition"] == "0"


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=json_messages.batches)
def test_vectorised_rows_and_dead_letters_are_the_per_record_ones(spark, values) -> None:  # type: ignore[no-untyped-def]
    """Every output column, dead-letter field and reason included, row for row."""
    frame = _records(spark, [*values, *(case[0] for case in CASES)])
    got = sorted(parse_events(frame, SPEC).collect(), key=lambda row: row["offset"])
    expected = sorted(
        parse_events(frame, SPEC, vectorised=False).collect(), key=lambda row: row["offset"]
    )
    assert len(got) == len(expected) == len(values) + len(CASES)
    for row, oracle in zip(got, expected, strict=True):
        assert _same_row(row.asDict(), oracle.asDict()), (row, oracle)


def _same_row(row: dict[str, object], oracle: dict[str, object]) -> bool:
    def same(a: object, b: object) -> bool:
        return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)

    return row.keys() == oracle.keys() and all(same(row[k], oracle[k]) for k in row)
