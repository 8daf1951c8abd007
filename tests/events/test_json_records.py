"""The JSON message parser against Spark's ``from_json`` (the independent oracle)."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from featureflow.errors import RepoError
from featureflow.events.json_records import (
    IS_OBJECT,
    KEY_PRESENT,
    STAMP,
    VALID_PREFIX,
    JsonRecordParser,
)

DDL = "k bigint, i int, s smallint, t tinyint, d double, f float, b boolean, txt string, ts string"
FIELDS = tuple(tuple(column.split()) for column in DDL.split(", "))
PARSER = JsonRecordParser(FIELDS, join_key="k", timestamp_field="ts")  # type: ignore[arg-type]


def test_typed_values_flags_and_stamp_text() -> None:
    out = PARSER(
        pa.array(
            [
                b'{"k":7,"i":-3,"d":2,"f":1e300,"b":true,"txt":5,"ts":"2026-11-30T00:00:00Z"}',
                b'{"k":7.0,"i":2147483648,"d":"NaN","b":"true","ts":1795996800250}',
                b'{"k":null,"ts":18446744073709551616}',
                b"[1]",
                b"{bad",
                None,
            ],
            pa.binary(),
        )
    ).to_pylist()
    first, second, third, *not_objects = out
    assert first["k"] == 7 and first["i"] == -3 and first["d"] == 2.0
    assert first["f"] == math.inf and first["b"] is True and first["txt"] == "5"
    assert first[STAMP] == "2026-11-30T00:00:00Z" and first[KEY_PRESENT]
    assert all(first[VALID_PREFIX + name] for name, _ in FIELDS)
    assert second[KEY_PRESENT] and not second[VALID_PREFIX + "k"] and second["k"] is None
    assert not second[VALID_PREFIX + "i"] and not second[VALID_PREFIX + "b"]
    assert math.isnan(second["d"]) and second[STAMP] == "1795996800250"
    assert not third[KEY_PRESENT] and third[STAMP] == "18446744073709551616"
    assert [row[IS_OBJECT] for row in out] == [True, True, True, False, False, False]
    assert all(not row[KEY_PRESENT] and row[STAMP] is None for row in not_objects)


def test_unsupported_declarations_are_refused_with_the_field_named() -> None:
    with pytest.raises(RepoError, match=r"'when'.*timestamp"):
        JsonRecordParser((("k", "bigint"), ("when", "timestamp")), "k", "k")
    with pytest.raises(RepoError, match="timestamp field 'ts'"):
        JsonRecordParser((("k", "bigint"),), "k", "ts")


def test_a_timestamp_field_of_any_type_is_read_as_its_text() -> None:
    parser = JsonRecordParser((("k", "bigint"), ("ts", "timestamp")), "k", "ts")
    assert parser.fields == (("k", "bigint"), ("ts", "string"))
    row = parser([b'{"k":1,"ts":"2026-11-30T00:00:00Z"}']).to_pylist()[0]
    assert row["ts"] == row[STAMP] == "2026-11-30T00:00:00Z"


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.integers(-300, 300)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["NaN", "Infinity", "-Infinity", "+INF", "true", "12", "x"])
    | st.text(max_size=6)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=4,
)
_records = st.fixed_dictionaries({}, optional={name: _values for name, _ in FIELDS}).map(
    lambda record: json.dumps(record).encode()
)
_messages = st.one_of(_records, st.binary(max_size=20), st.none())


def _same(got: object, expected: object) -> bool:
    if isinstance(got, float) and isinstance(expected, float):
        return got == expected or (math.isnan(got) and math.isnan(expected))
    return got == expected


@pytest.mark.integration
@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages=st.lists(_messages, min_size=1, max_size=80))
def test_agrees_with_spark_from_json(spark, messages) -> None:  # type: ignore[no-untyped-def]
    """Typed values and "present but of the wrong type" as Spark's ``from_json`` decides them
    (a string field's non-string value is text in both, but not the same text: Spark
    writes ``1.0E7`` for ``10000000.0``, the parser keeps JSON's form)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ByteType, StringType, StructField, StructType

    schema = StructType.fromDDL(DDL)
    as_text = StructType([StructField(field.name, StringType()) for field in schema.fields])
    frame = spark.createDataFrame([(m,) for m in messages], "value binary")
    text = F.col("value").cast("string")
    rows = frame.select(
        F.from_json(text, schema).alias("typed"), F.from_json(text, as_text).alias("text")
    ).collect()
    parsed = PARSER(pa.array(messages, pa.binary())).to_pylist()
    for message, row, got in zip(messages, rows, parsed, strict=True):
        if not got[IS_OBJECT]:
            continue
        record = json.loads(message)  # type: ignore[arg-type]
        for field in schema.fields:
            name = field.name
            expected = row["typed"][name] if row["typed"] is not None else None
            present = row["text"] is not None and row["text"][name] is not None
            value = record.get(name)
            if isinstance(field.dataType, ByteType) and type(value) is int and 127 < value <= 255:
                # Jackson's getByteValue takes 128..255 as an unsigned byte, so Spark
                # reads 128 as -128; the parser refuses the out-of-range value instead
                assert not got[VALID_PREFIX + name], (message, name)
                continue
            assert got[VALID_PREFIX + name] == (not present or expected is not None), (
                message, name)  # fmt: skip
            if name in ("txt", "ts") and not isinstance(value, str):
                continue
            if name == "f" and expected is not None:
                expected = float(pa.array([expected], pa.float32())[0].as_py())
            assert _same(got[name], expected), (message, name, got[name], expected)


def test_a_record_with_an_overflowing_number_is_read_as_orjson_reads_the_rest() -> None:
    """``1e400`` sends the record to the standard library's decoder; what it accepts beyond
    orjson (a lone surrogate, integers beyond 64 bits) must neither crash nor differ."""
    rows = PARSER(
        [
            b'{"k":1,"d":1e400,"txt":"\\ud800"}',
            b'{"k":1,"d":1e400,"txt":-9223372036854775809,"ts":18446744073709551616}',
            b'{"k":1,"d":1' + b"0" * 400 + b"}",
        ]
    ).to_pylist()
    assert not rows[0][IS_OBJECT]
    assert rows[1]["d"] == math.inf and rows[1]["txt"] == "-9.223372036854776e+18"
    assert rows[1][STAMP] == "18446744073709551616"
    assert rows[2]["d"] == math.inf and rows[2][VALID_PREFIX + "d"]
