"""The gate's checks of schemas against Feast views.

Each check returns :class:`Row` objects; in every row ``expected`` is what
the reviewed ``.mojo`` schema (or, for aggregations, the aggregation) says
and ``actual`` what Feast has. The version rule is in ``compat``, the
micro-batch check in ``batch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from featureflow.schema.compat import check_compatibility
from featureflow.schema.feast_repo import VERSION_TAG, ViewSpec
from featureflow.schema.model import (
    FeatureSchema,
    ListType,
    Role,
    SchemaField,
    TimestampType,
)
from featureflow.schema.report import ABSENT, Row, Status
from featureflow.schema.typemap import (
    FEAST_TIMESTAMP,
    aggregation_output,
    feast_name,
    from_feast,
    to_feast,
)

if TYPE_CHECKING:
    from feast.types import FeastType


def _declaration(name: str, dtype: FeastType | None, role: Role = Role.FEATURE) -> str:
    """The ``var`` line that would declare a Feast field in a schema."""
    value_type = from_feast(dtype) if dtype is not None else None
    if value_type is None:
        return f"a field `{name}` (Feast type {feast_name(dtype)} has no schema type)"
    return f"`var {name}: {SchemaField(name, value_type, role).mojo_type}`"


def check_coverage(views: Sequence[ViewSpec], schemas: Sequence[FeatureSchema]) -> list[Row]:
    """Every schema names a view; every materialised view has exactly one schema."""
    rows: list[Row] = []
    names = {v.name for v in views}
    seen: dict[str, str] = {}
    for schema in schemas:
        if schema.view in seen:
            rows.append(
                Row(
                    Status.FAIL,
                    schema.view,
                    "schema file",
                    "",
                    seen[schema.view],
                    schema.path,
                    "two schema files declare this view: delete one",
                )
            )
        seen.setdefault(schema.view, schema.path)
        if schema.view not in names:
            rows.append(
                Row(
                    Status.FAIL,
                    schema.view,
                    "view",
                    "",
                    schema.view,
                    ABSENT,
                    f"{schema.path} declares VIEW {schema.view!r} but the Feast repo "
                    f"has no such view (views: {', '.join(sorted(names)) or 'none'})",
                )
            )
    for view in views:
        if view.name in seen:
            rows.append(Row(Status.PASS, view.name, "schema file", "", seen[view.name], view.name))
        elif view.materialised:
            rows.append(
                Row(
                    Status.FAIL,
                    view.name,
                    "schema file",
                    "",
                    ABSENT,
                    view.name,
                    "featureflow materialises this view but it has no schema: run "
                    f"`featureflow schema init ... {view.name}` and review the file",
                )
            )
        else:
            rows.append(
                Row(
                    Status.WARN,
                    view.name,
                    "schema file",
                    "",
                    ABSENT,
                    view.name,
                    "no schema; featureflow does not materialise this view, so it is not gated",
                )
            )
    return rows


def _check_fields(view: ViewSpec, schema: FeatureSchema) -> list[Row]:
    rows: list[Row] = []
    feast = dict(view.features)
    for field in schema.features:
        dtype = feast.get(field.name)
        expected = feast_name(to_feast(field.type))
        if dtype is None:
            rows.append(
                Row(
                    Status.FAIL,
                    view.name,
                    "field",
                    field.name,
                    expected,
                    ABSENT,
                    f"extra field: {schema.path}:{field.line} declares it, the Feast "
                    "view does not; add it to the view or remove it from the schema",
                )
            )
        elif to_feast(field.type) != dtype:
            rows.append(
                Row(
                    Status.FAIL,
                    view.name,
                    "field",
                    field.name,
                    expected,
                    feast_name(dtype),
                    "re-typed: the schema and the Feast view disagree; change one "
                    "side (a re-type needs a major version bump)",
                )
            )
        else:
            rows.append(Row(Status.PASS, view.name, "field", field.name, expected, expected))
    declared = {f.name for f in schema.fields}
    for name, dtype in view.features:
        if name not in declared:
            rows.append(
                Row(
                    Status.FAIL,
                    view.name,
                    "field",
                    name,
                    ABSENT,
                    feast_name(dtype),
                    f"missing from the schema: add {_declaration(name, dtype)} to "
                    f"{schema.path} or drop it from the view",
                )
            )
    schema_count, feast_count = len(schema.features), len(view.features)
    rows.append(
        Row(
            Status.PASS if schema_count == feast_count else Status.FAIL,
            view.name,
            "feature count",
            "",
            str(schema_count),
            str(feast_count),
            ""
            if schema_count == feast_count
            else "the schema and the Feast view declare different numbers of features",
        )
    )
    return rows


def _check_entity_keys(view: ViewSpec, schema: FeatureSchema) -> list[Row]:
    rows: list[Row] = []
    join_keys = dict(view.join_keys)
    for name, dtype in view.join_keys:
        field = schema.get(name)
        actual = feast_name(dtype)
        if field is None:
            rows.append(
                Row(
                    Status.FAIL,
                    view.name,
                    "entity key",
                    name,
                    ABSENT,
                    actual,
                    f"add {_declaration(name, dtype, Role.ENTITY_KEY)}",
                )
            )
            continue
        expected = feast_name(to_feast(field.type))
        if field.role is not Role.ENTITY_KEY:
            problem = f"mark it as a key: `var {name}: EntityKey[{field.type}]`"
        elif field.nullable:
            problem = "entity keys are required: drop Optional[...]"
        elif to_feast(field.type) != dtype:
            problem = "the join key's type differs from the entity's: change one side"
        else:
            rows.append(Row(Status.PASS, view.name, "entity key", name, expected, actual))
            continue
        rows.append(Row(Status.FAIL, view.name, "entity key", name, expected, actual, problem))
    for field in schema.entity_keys:
        if field.name not in join_keys:
            rows.append(
                Row(
                    Status.FAIL,
                    view.name,
                    "entity key",
                    field.name,
                    feast_name(to_feast(field.type)),
                    ABSENT,
                    f"not a join key of the view (join keys: {', '.join(join_keys) or 'none'})",
                )
            )
    return rows


def _check_event_timestamp(view: ViewSpec, schema: FeatureSchema) -> list[Row]:
    name = view.timestamp_field
    declared = schema.event_timestamps
    field = declared[0] if declared else schema.get(name)
    wanted = f'`var {name}: EventTimestamp["us", "UTC"]`'
    if field is None:
        return [
            Row(
                Status.FAIL,
                view.name,
                "event timestamp",
                name,
                ABSENT,
                name,
                f"the event timestamp is not declared: add {wanted}",
            )
        ]
    expected = field.mojo_type
    if field.role is not Role.EVENT_TIMESTAMP:
        problem = (
            f"declared as a feature; mark it {wanted}"
            if isinstance(field.type, TimestampType)
            else f"not a timestamp: declare {wanted}"
        )
    elif field.name != name:
        problem = f"Feast's timestamp_field is {name!r}: rename the field"
    elif field.nullable:
        problem = "the event timestamp is required: drop Optional[...]"
    else:
        return [Row(Status.PASS, view.name, "event timestamp", field.name, expected, name)]
    return [Row(Status.FAIL, view.name, "event timestamp", field.name, expected, name, problem)]


def _check_timestamp_units(view: ViewSpec, schema: FeatureSchema) -> list[Row]:
    rows: list[Row] = []
    canonical = f"{FEAST_TIMESTAMP.unit}, {FEAST_TIMESTAMP.zone}"
    for field in schema.fields:
        ts = field.type.element if isinstance(field.type, ListType) else field.type
        if not isinstance(ts, TimestampType):
            continue
        actual = f"{ts.unit}, {ts.zone}"
        if ts.zone != FEAST_TIMESTAMP.zone:
            rows.append(
                Row(
                    Status.FAIL,
                    view.name,
                    "timestamp unit/zone",
                    field.name,
                    actual,
                    canonical,
                    "Feast keeps UTC instants without a zone: declare "
                    'zone "UTC" and convert at the source',
                )
            )
        elif ts.unit != FEAST_TIMESTAMP.unit:
            rows.append(
                Row(
                    Status.WARN,
                    view.name,
                    "timestamp unit/zone",
                    field.name,
                    actual,
                    canonical,
                    f"Feast and Spark hand timestamps as {canonical}; "
                    "values are converted on the way",
                )
            )
        else:
            rows.append(
                Row(Status.PASS, view.name, "timestamp unit/zone", field.name, actual, canonical)
            )
    return rows


def _check_version(view: ViewSpec, schema: FeatureSchema) -> list[Row]:
    tag = view.version
    if tag is None:
        return [
            Row(
                Status.FAIL,
                view.name,
                "version",
                VERSION_TAG,
                schema.version,
                ABSENT,
                f"add tags={{{VERSION_TAG!r}: {schema.version!r}}} to the Feast view",
            )
        ]
    if tag != schema.version:
        return [
            Row(
                Status.FAIL,
                view.name,
                "version",
                VERSION_TAG,
                schema.version,
                tag,
                f"the view's {VERSION_TAG} tag and the schema's VERSION must be equal: "
                "bump both together",
            )
        ]
    return [Row(Status.PASS, view.name, "version", VERSION_TAG, schema.version, tag)]


def _check_aggregations(view: ViewSpec, schema: FeatureSchema) -> list[Row]:
    rows: list[Row] = []
    declared = dict(view.features)
    for agg in view.aggregations:
        column_type = view.source_columns.get(agg.column)
        yields = aggregation_output(agg.function, column_type)
        field = schema.get(agg.output)
        actual = feast_name(to_feast(field.type)) if field is not None else ABSENT
        what = f"{agg.function}({agg.column})"
        if yields is None:
            rows.append(
                Row(
                    Status.WARN,
                    view.name,
                    "aggregation",
                    agg.output,
                    feast_name(declared.get(agg.output)),
                    actual,
                    f"cannot tell what {what} yields: the source does not type "
                    f"column {agg.column!r}",
                )
            )
            continue
        expected = feast_name(yields)
        if field is None:
            rows.append(
                Row(
                    Status.FAIL,
                    view.name,
                    "aggregation",
                    agg.output,
                    expected,
                    ABSENT,
                    f"{what} produces this feature: add "
                    f"{_declaration(agg.output, yields)} to the schema",
                )
            )
        elif to_feast(field.type) != yields:
            rows.append(
                Row(
                    Status.FAIL,
                    view.name,
                    "aggregation",
                    agg.output,
                    expected,
                    actual,
                    f"{what} yields {expected}: declare that type",
                )
            )
        elif agg.output in declared and declared[agg.output] != yields:
            rows.append(
                Row(
                    Status.FAIL,
                    view.name,
                    "aggregation",
                    agg.output,
                    expected,
                    feast_name(declared[agg.output]),
                    f"the Feast view declares {feast_name(declared[agg.output])} but "
                    f"{what} yields {expected}: fix the view's schema",
                )
            )
        else:
            rows.append(
                Row(Status.PASS, view.name, "aggregation", agg.output, expected, actual, what)
            )
    return rows


def check_view(view: ViewSpec, schema: FeatureSchema, previous: ViewSpec | None) -> list[Row]:
    """All checks of one schema against its Feast view (and the registry's previous one)."""
    return [
        *_check_entity_keys(view, schema),
        *_check_event_timestamp(view, schema),
        *_check_timestamp_units(view, schema),
        *_check_fields(view, schema),
        *_check_aggregations(view, schema),
        *_check_version(view, schema),
        *check_compatibility(view, previous),
    ]
