"""The per-micro-batch check: an Arrow schema against a view's feature schema.

Imports no Feast: it runs on Spark's executors before every write."""

from __future__ import annotations

import pyarrow as pa

from featureflow.errors import SchemaMismatchError
from featureflow.schema.arrowmap import arrow_matches, to_arrow
from featureflow.schema.model import FeatureSchema
from featureflow.schema.report import ABSENT, Report, Row, Status


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


_batch_cache: dict[tuple[int, FeatureSchema], Report] = {}


def check_batch(arrow_schema: pa.Schema, view_schema: FeatureSchema) -> Report:
    """Check one micro-batch's Arrow schema before writing it.

    Column types must be exactly the schema's (timestamps in unit and zone);
    extra columns are warnings. Results are cached per Arrow schema, so a
    stream of batches of one shape pays the check once.

    Raises:
        SchemaMismatchError: A column is missing or has another type.
    """
    key = (hash(arrow_schema.to_string()), view_schema)
    report = _batch_cache.get(key)
    if report is None:
        report = Report(tuple(check_arrow(arrow_schema, view_schema)))
        if len(_batch_cache) > 1024:
            _batch_cache.clear()
        _batch_cache[key] = report
    if not report.ok:
        failed = "; ".join(
            f"{r.field}: expected {r.expected}, got {r.actual}" for r in report.failures
        )
        msg = f"micro-batch of {view_schema.view} does not match its schema: {failed}"
        raise SchemaMismatchError(msg, report)
    return report
