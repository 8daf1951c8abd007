"""The per-micro-batch check: an Arrow schema against a view's feature schema."""

from __future__ import annotations

import pyarrow as pa

from featureflow.schema.model import FeatureSchema
from featureflow.schema.report import ABSENT, Row, Status
from featureflow.schema.typemap import arrow_matches, to_arrow


def check_arrow(arrow_schema: pa.Schema, schema: FeatureSchema) -> list[Row]:
    """A micro-batch's Arrow schema against the view's schema (types, units and zones exact)."""
    rows: list[Row] = []
    names = set(arrow_schema.names)
    for field in schema.fields:
        expected = str(to_arrow(field.type))
        if field.name not in names:
            rows.append(
                Row(
                    Status.FAIL,
                    schema.view,
                    "batch column",
                    field.name,
                    expected,
                    ABSENT,
                    "the micro-batch lacks this column",
                )
            )
            continue
        actual_type = arrow_schema.field(field.name).type
        if arrow_matches(actual_type, field.type):
            rows.append(
                Row(
                    Status.PASS, schema.view, "batch column", field.name, expected, str(actual_type)
                )
            )
        else:
            rows.append(
                Row(
                    Status.FAIL,
                    schema.view,
                    "batch column",
                    field.name,
                    expected,
                    str(actual_type),
                    "cast the column before writing, or fix the "
                    "schema (timestamps must agree in unit and zone)",
                )
            )
    declared = {f.name for f in schema.fields}
    for name in arrow_schema.names:
        if name not in declared:
            rows.append(
                Row(
                    Status.WARN,
                    schema.view,
                    "batch column",
                    name,
                    ABSENT,
                    str(arrow_schema.field(name).type),
                    "not in the schema: it will not be written",
                )
            )
    return rows
