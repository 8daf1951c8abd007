"""The parser's checks in Arrow (featureflow.events.checks) against the job's own Spark
expressions (parse_events): the same field, reason and event time for every record the
Arrow reading decides, and only records whose timestamp Spark alone reads left undecided."""

from __future__ import annotations

import json_messages
import pyarrow as pa
import pytest
from duckdb_oracle import EXAMPLE_SPEC
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_parse import CASES, _records

from featureflow.columns import EVENT_NS
from featureflow.events import ddl
from featureflow.events.checks import first_failing, read_stamps_as_spark
from featureflow.events.json_batch import BatchJsonParser
from featureflow.events.json_records import STAMP, JsonRecordParser
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON, parse_events

pytestmark = pytest.mark.integration

SPEC = EXAMPLE_SPEC
STAMPS = [
    '"2026-11-30T00:00:00.250Z"', '"2026-11-30 00:00:00"', '"2026-11-30"', "1795996800250",
    "9223372036854775807", "99999999999999999999", "-9223372036854", "9223372036854",
    "1234567890123456", '"1795996800250"', '"0001"', '"-0"', '"+1"', "1.5e12", '"x"',
    '"2026-11-30T00:00:00.123456789Z"', '"2026-11-30T00:00:60Z"', "null", '"2262-04-12T00:00:00Z"',
]  # fmt: skip


def _in_arrow(values: list[bytes | None]) -> tuple[pa.Array, pa.Array, list[int], list[bool]]:
    fields = ddl.canonical_fields(SPEC.json_schema)
    parsed = BatchJsonParser(JsonRecordParser(fields, SPEC.join_key, SPEC.timestamp_field))(
        pa.array(values, pa.binary())
    )
    stamps = read_stamps_as_spark(parsed.column(STAMP))
    checked = first_failing(parsed, fields, SPEC.join_key, SPEC.timestamp_field, stamps)
    return checked.field, checked.reason, stamps.ns.tolist(), checked.undecided.tolist()


def _same_as_spark(spark, values: list[bytes | None]) -> None:  # type: ignore[no-untyped-def]
    rows = sorted(parse_events(_records(spark, values), SPEC).collect(), key=lambda r: r["offset"])
    field, reason, ns, undecided = _in_arrow(values)
    assert len(rows) == len(values)
    for at, row in enumerate(rows):
        if undecided[at]:
            continue
        assert (field[at].as_py(), reason[at].as_py()) == (row[ERROR_FIELD], row[ERROR_REASON]), (
            values[at],
            row,
        )
        if row[ERROR_REASON] is None:
            assert ns[at] == row[EVENT_NS], (values[at], row)


def test_the_parsers_cases(spark) -> None:  # type: ignore[no-untyped-def]
    values = [case[0] for case in CASES]
    _same_as_spark(spark, values)
    _, _, _, undecided = _in_arrow(values)
    # only the texts Spark alone reads stay undecided: a word, and a year beyond 2199
    assert [value for value, left in zip(values, undecided, strict=True) if left] == [
        b'{"user_id":3,"event_timestamp":"yesterday"}',
        b'{"user_id":3,"event_timestamp":"9999-12-31T00:00:00Z"}',
    ]


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=json_messages.batches,
    stamped=st.lists(st.tuples(st.integers(-3, 3), st.sampled_from(STAMPS)), max_size=20),
)
def test_any_records_as_spark_checks_them(spark, values, stamped) -> None:  # type: ignore[no-untyped-def]
    extra = [
        f'{{"user_id":{user},"amount":1.5,"event_timestamp":{stamp}}}'.encode()
        for user, stamp in stamped
    ]
    _same_as_spark(spark, [*values, *extra])
