"""The schema reader on the committed schema and on hand-made broken files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from featureflow.errors import SchemaParseError
from featureflow.schema import read_schema, read_schemas
from featureflow.schema.model import (
    ListType,
    Role,
    Scalar,
    ScalarType,
    TimestampType,
)
from featureflow.schema.typeexpr import TypeSyntaxError, field_type

HEADER = "from featureflow_schema import EntityKey, EventTimestamp, Timestamp\n\n\nstruct S:\n"


def write(tmp_path: Path, body: str, name: str = "s.mojo") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + body)
    return path


def test_committed_schema_reads_as_the_view(example_schema: Path) -> None:
    schema = read_schema(example_schema)
    assert (schema.view, schema.version, schema.struct_name) == (
        "user_txn_stats",
        "1.0.0",
        "UserTxnStats",
    )
    assert [f.name for f in schema.entity_keys] == ["user_id"]
    assert schema.entity_keys[0].type == ScalarType(Scalar.INT64)
    (event,) = schema.event_timestamps
    assert (event.name, event.type, event.nullable) == (
        "event_timestamp",
        TimestampType("us", "UTC"),
        False,
    )
    assert len(schema.features) == 18
    count, std, key = (schema.get(n) for n in ("count_amount_600s", "std_amount_86400s", "user_id"))
    assert count is not None and std is not None and key is not None
    assert count.type == ScalarType(Scalar.INT64)
    assert std.line > key.line


def test_every_type_of_the_table(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """    comptime VIEW = "v"
    comptime VERSION = "0.1.0"
    var k: EntityKey[String]
    var ts: EventTimestamp["ms", "UTC"]
    var a: Int32
    var b: Float32
    var c: Bool
    var d: Optional[String]
    var e: Timestamp["ns", "Europe/Paris"]
    var f: List[Timestamp["s", "UTC"]]
    var g: Optional[List[Float64]]
""",
    )
    schema = read_schema(path)
    types = {f.name: (f.type, f.role, f.nullable) for f in schema.fields}
    assert types["k"] == (ScalarType(Scalar.STRING), Role.ENTITY_KEY, False)
    assert types["ts"] == (TimestampType("ms", "UTC"), Role.EVENT_TIMESTAMP, False)
    assert types["d"] == (ScalarType(Scalar.STRING), Role.FEATURE, True)
    assert types["e"] == (TimestampType("ns", "Europe/Paris"), Role.FEATURE, False)
    assert types["f"] == (ListType(TimestampType("s", "UTC")), Role.FEATURE, False)
    assert types["g"] == (ListType(ScalarType(Scalar.FLOAT64)), Role.FEATURE, True)


@pytest.mark.parametrize(
    ("body", "line", "expected"),
    [
        # The compiler's own diagnostics: file, line, message.
        (
            '    comptime VIEW = "v"\n    comptime VERSION = "1.0.0"\n    var x: Int65\n',
            7,
            "unknown declaration 'Int65'",
        ),
        (
            '    comptime VIEW = "v"\n    comptime VERSION = "1.0.0"\n    var x Int64\n',
            7,
            "must have a type",
        ),
        # The schema's own rules.
        (
            '    comptime VIEW = "v"\n    comptime VERSION = "1.0.0"\n    var x: Int8\n',
            7,
            "field `x` of type Int64, Int32",
        ),
        (
            '    comptime VIEW = "v"\n    comptime VERSION = "1.0.0"\n'
            '    var t: EventTimestamp["hours", "UTC"]\n',
            7,
            "time unit among s, ms, us, ns",
        ),
        ('    comptime VIEW = "v"\n    var x: Int64\n', 4, '`comptime VERSION = "1.0.0"`'),
        (
            '    comptime VIEW = "v"\n    comptime VERSION = "1.0"\n    var x: Int64\n',
            6,
            "MAJOR.MINOR.PATCH",
        ),
        (
            '    comptime VIEW = 3\n    comptime VERSION = "1.0.0"\n    var x: Int64\n',
            5,
            "non-empty string literal",
        ),
        (
            '    comptime VIEW = "v"\n    comptime VERSION = "1.0.0"\n'
            "    var x: List[List[Int64]]\n",
            7,
            "not List",
        ),
        (
            '    comptime VIEW = "v"\n    comptime VERSION = "1.0.0"\n    var x: Int64\n\n'
            "struct T:\n    var y: Int64\n",
            9,
            "exactly one struct",
        ),
    ],
)
def test_parse_errors_name_file_line_and_expectation(
    tmp_path: Path, body: str, line: int, expected: str
) -> None:
    path = write(tmp_path, body)
    with pytest.raises(SchemaParseError) as caught:
        read_schema(path)
    error = caught.value
    assert (error.file, error.line) == (str(path), line), str(error)
    assert expected in error.expected
    assert str(error).startswith(f"{path}:{line}: expected ")


def test_one_bad_file_in_a_batch_is_the_one_named(tmp_path: Path, example_schema: Path) -> None:
    good = tmp_path / "good.mojo"
    good.write_bytes(example_schema.read_bytes())
    bad = write(tmp_path, '    comptime VIEW = "v"\n    var x: Nope\n', "bad.mojo")
    with pytest.raises(SchemaParseError) as caught:
        read_schemas([good, bad])
    assert caught.value.file == str(bad)


def test_cache_by_content_makes_rereads_free(tmp_path: Path, example_schema: Path) -> None:
    # A fresh copy with a new comment: new content, so the compiler runs once.
    path = tmp_path / "copy.mojo"
    path.write_text(example_schema.read_text() + f"# {time.time_ns()}\n")
    start = time.perf_counter()
    first = read_schema(path)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    again = read_schema(path)
    warm = time.perf_counter() - start
    assert first == again
    assert warm < 0.05 < cold


@pytest.mark.parametrize(
    "text",
    [
        "Int64[",
        "EntityKey[]",
        'Timestamp["us"]',
        "Optional[Int64, Int64]",
        "EntityKey",
        'Timestamp[StringSpan(3), "UTC"]',
        "List[Int64]]",
        "Int64 $",
    ],
)
def test_type_expression_errors_are_typed(text: str) -> None:
    with pytest.raises(TypeSyntaxError):
        field_type(text)
