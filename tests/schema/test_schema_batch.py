"""check_batch: a micro-batch's Arrow schema against the view's schema."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from featureflow.errors import SchemaMismatchError
from featureflow.schema import FeatureSchema, check_batch, read_schema
from featureflow.schema.arrowmap import to_arrow
from featureflow.schema.report import Status


@pytest.fixture(scope="module")
def schema(example_schema: Path) -> FeatureSchema:
    return read_schema(example_schema)


def batch_schema(schema: FeatureSchema, **override: pa.DataType) -> pa.Schema:
    return pa.schema([(f.name, override.get(f.name, to_arrow(f.type))) for f in schema.fields])


def test_matching_batch_passes(schema: FeatureSchema) -> None:
    arrow = batch_schema(schema)
    assert str(arrow.field("event_timestamp").type) == "timestamp[us, tz=UTC]"
    report = check_batch(arrow, schema)
    assert report.ok_strict and len(report.rows) == len(schema.fields)


@pytest.mark.parametrize(
    ("field", "arrow_type"),
    [
        ("event_timestamp", pa.timestamp("ms", tz="UTC")),  # unit
        ("event_timestamp", pa.timestamp("us")),  # zone
        ("sum_amount_600s", pa.float32()),
        ("count_amount_600s", pa.float64()),
        ("user_id", pa.string()),
    ],
)
def test_wrong_column_type_is_refused(
    schema: FeatureSchema, field: str, arrow_type: pa.DataType
) -> None:
    with pytest.raises(SchemaMismatchError) as caught:
        check_batch(batch_schema(schema, **{field: arrow_type}), schema)
    (row,) = caught.value.report.failures
    assert (row.field, row.actual) == (field, str(arrow_type))


def test_missing_column_fails_and_extra_column_warns(schema: FeatureSchema) -> None:
    arrow = batch_schema(schema).remove(2).append(pa.field("merchant", pa.string()))
    with pytest.raises(SchemaMismatchError) as caught:
        check_batch(arrow, schema)
    report = caught.value.report
    assert [r.field for r in report.failures] == [schema.fields[2].name]
    assert [(r.field, r.status) for r in report.warnings] == [("merchant", Status.WARN)]


def test_large_string_and_large_list_are_accepted() -> None:
    from featureflow.schema.model import ListType, Role, Scalar, ScalarType, SchemaField

    schema = FeatureSchema(
        "v",
        "1.0.0",
        "V",
        (
            SchemaField("k", ScalarType(Scalar.STRING), Role.ENTITY_KEY),
            SchemaField("xs", ListType(ScalarType(Scalar.INT64))),
        ),
    )
    arrow = pa.schema([("k", pa.large_string()), ("xs", pa.large_list(pa.int64()))])
    assert check_batch(arrow, schema).ok
