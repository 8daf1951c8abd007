"""Property tests of the schema reader (each example runs the real ``mojo doc``).

Valid generated schemas round-trip through writer and reader; garbage gives
a SchemaParseError naming the file and a line, never another exception.
Examples are few (the compiler starts in about 1 s) and each round-trip
example batches several schema files into one compiler run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from featureflow.errors import SchemaParseError
from featureflow.schema import read_schemas
from featureflow.schema.model import (
    TIME_UNITS,
    FeatureSchema,
    ListType,
    Role,
    Scalar,
    ScalarType,
    SchemaField,
    TimestampType,
)
from featureflow.schema.writer import MOJO_KEYWORDS, render_schema, struct_name

COMPILER_SETTINGS = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

identifiers = st.text("abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=12).filter(
    lambda s: s[0].isalpha() and s not in MOJO_KEYWORDS
)
scalars = st.sampled_from(list(Scalar)).map(ScalarType)
timestamps = st.builds(
    TimestampType, st.sampled_from(TIME_UNITS), st.sampled_from(["UTC", "Europe/Paris"])
)
elements = scalars | timestamps
value_types = elements | elements.map(ListType)
key_types = st.sampled_from([Scalar.INT64, Scalar.INT32, Scalar.STRING]).map(ScalarType)
versions = st.tuples(*[st.integers(0, 30)] * 3).map(lambda v: ".".join(map(str, v)))


@st.composite
def feature_schemas(draw: st.DrawFn) -> FeatureSchema:
    names = draw(st.lists(identifiers, min_size=1, max_size=10, unique=True))
    fields: list[SchemaField] = []
    has_event = False
    for name in names:
        role = draw(st.sampled_from(list(Role)))
        if role is Role.EVENT_TIMESTAMP and has_event:
            role = Role.FEATURE
        has_event = has_event or role is Role.EVENT_TIMESTAMP
        if role is Role.ENTITY_KEY:
            value_type: ScalarType | TimestampType | ListType = draw(key_types)
        elif role is Role.EVENT_TIMESTAMP:
            value_type = draw(timestamps)
        else:
            value_type = draw(value_types)
        fields.append(SchemaField(name, value_type, role, draw(st.booleans())))
    view = draw(identifiers)
    return FeatureSchema(view, draw(versions), struct_name(view), tuple(fields))


@COMPILER_SETTINGS
@given(st.lists(feature_schemas(), min_size=1, max_size=4))
def test_valid_schemas_round_trip(schemas: list[FeatureSchema]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for index, schema in enumerate(schemas):
            path = Path(tmp) / f"s{index}.mojo"
            path.write_text(render_schema(schema))
            paths.append(path)
        assert read_schemas(paths) == schemas


def assert_clear_or_valid(source: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "garbage.mojo"
        path.write_bytes(source)
        try:
            read_schemas([path])
        except SchemaParseError as error:
            assert error.file == str(path)
            assert error.line >= 1
            assert error.expected
            assert str(error).startswith(f"{path}:{error.line}: expected ")


@COMPILER_SETTINGS
@given(st.binary(max_size=120) | st.text(max_size=120).map(str.encode))
def test_garbage_gives_only_the_parse_error(source: bytes) -> None:
    assert_clear_or_valid(source)


@COMPILER_SETTINGS
@given(feature_schemas(), st.data())
def test_damaged_schemas_give_only_the_parse_error(
    schema: FeatureSchema, data: st.DataObject
) -> None:
    text = render_schema(schema)
    start = data.draw(st.integers(0, len(text) - 1))
    end = data.draw(st.integers(start, min(len(text), start + 40)))
    insert = data.draw(st.sampled_from(["", "[", '"', "Int8", "\n    var", "struct X:"]))
    assert_clear_or_valid((text[:start] + insert + text[end:]).encode())
