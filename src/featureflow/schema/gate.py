"""The gate's entry points: validate a repo or view, guard the stream job, init schemas."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from featureflow.errors import SchemaError, SchemaMismatchError
from featureflow.schema.checks import check_coverage, check_view
from featureflow.schema.feast_repo import (
    ViewSpec,
    apply_repo,
    load_registry_views,
    load_repo_views,
    view_spec,
)
from featureflow.schema.model import FeatureSchema, Role, SchemaField
from featureflow.schema.reader import read_schemas, schema_files
from featureflow.schema.report import Report
from featureflow.schema.typemap import FEAST_TIMESTAMP, feast_name, from_feast
from featureflow.schema.writer import render_schema, struct_name

DEFAULT_VERSION = "1.0.0"


def evaluate(
    views: Sequence[ViewSpec],
    schemas: Sequence[FeatureSchema],
    previous: Sequence[ViewSpec] | None = None,
) -> Report:
    """Run every check of ``schemas`` against ``views`` (and the registry's ``previous``)."""
    rows = check_coverage(views, schemas)
    by_name = {v.name: v for v in views}
    before = {v.name: v for v in previous or ()}
    for schema in schemas:
        view = by_name.get(schema.view)
        if view is not None:
            rows += check_view(view, schema, before.get(view.name))
    return Report(tuple(rows))


def _schemas(schemas_path: Path) -> list[FeatureSchema]:
    return read_schemas(schema_files(Path(schemas_path)))


def validate(
    view_or_repo: Any, schema_path: str | Path, *, registry: str | Path | None = None
) -> Report:
    """Check schemas against a Feast repo, or one schema against one Feast view.

    Args:
        view_or_repo: A Feast repo folder (``feature_store.yaml`` inside), or a
            Feast ``FeatureView`` / ``StreamFeatureView`` object.
        schema_path: The schemas folder, or one ``.mojo`` schema file.
        registry: For a repo, the registry file holding the previous versions
            (default: the repo's own registry, when it exists). For a view,
            a registry file to compare versions with (default: none).

    Returns:
        The report; ``report.ok`` tells whether the gate passes.

    Raises:
        SchemaParseError: A schema file is not a valid feature schema.
        SchemaError: The repo or the toolchain cannot be used.
    """
    schemas = _schemas(Path(schema_path))
    if isinstance(view_or_repo, str | Path):
        repo = Path(view_or_repo)
        views = load_repo_views(repo)
        previous = load_registry_views(repo, Path(registry) if registry is not None else None)
        return evaluate(views, schemas, previous)
    view = view_spec(view_or_repo)
    mine = [s for s in schemas if s.view == view.name]
    if registry is not None:
        msg = "registry= needs a repo (it names the project); pass the repo folder instead"
        raise SchemaError(msg)
    return evaluate([view], mine)


def check_repo(
    repo_path: str | Path, schemas_path: str | Path, *, registry: str | Path | None = None
) -> Report:
    """The stream job's start-up guard: schemas against the live registry.

    Checks every schema against the views of the registry (``registry``, or
    the one ``feature_store.yaml`` names), and every materialised view there
    for a schema.

    Raises:
        SchemaMismatchError: A check failed; ``error.report`` holds every row.
        SchemaError: The registry does not exist (apply the repo first) or is unreadable.
        SchemaParseError: A schema file is not a valid feature schema.
    """
    repo = Path(repo_path)
    views = load_registry_views(repo, Path(registry) if registry is not None else None)
    if views is None:
        msg = (
            f"no Feast registry for {repo} yet: run `featureflow apply --repo {repo} "
            f"--schemas {schemas_path}` before starting the job"
        )
        raise SchemaError(msg)
    report = evaluate(views, _schemas(Path(schemas_path)))
    if not report.ok:
        failed = ", ".join(
            sorted({f"{r.view}: {r.check} {r.field}".strip() for r in report.failures})
        )
        msg = (
            f"the feature schemas do not match the registry ({report.summary()}); refusing "
            f"to materialise. Failed: {failed}. Run `featureflow validate` for the table."
        )
        raise SchemaMismatchError(msg, report)
    return report


def schema_of_view(view: ViewSpec) -> FeatureSchema:
    """The schema a view's current Feast definition implies (what ``schema init`` writes)."""
    fields: list[SchemaField] = []
    for name, dtype in view.join_keys:
        value_type = from_feast(dtype)
        if value_type is None:
            msg = (
                f"{view.name}: join key {name!r} has Feast type {feast_name(dtype)}, which "
                "schemas cannot express (use Int64, Int32 or String)"
            )
            raise SchemaError(msg)
        fields.append(SchemaField(name, value_type, Role.ENTITY_KEY))
    if view.timestamp_field:
        fields.append(SchemaField(view.timestamp_field, FEAST_TIMESTAMP, Role.EVENT_TIMESTAMP))
    for name, dtype in view.features:
        value_type = from_feast(dtype)
        if value_type is None:
            msg = (
                f"{view.name}: feature {name!r} has Feast type {feast_name(dtype)}, which "
                "schemas cannot express (see the type table in docs/schema-gate.md)"
            )
            raise SchemaError(msg)
        fields.append(SchemaField(name, value_type))
    return FeatureSchema(
        view.name, view.version or DEFAULT_VERSION, struct_name(view.name), tuple(fields)
    )


def init_schemas(
    repo_path: str | Path,
    schemas_path: str | Path,
    views: Sequence[str] = (),
    *,
    force: bool = False,
) -> list[Path]:
    """Write ``<schemas>/<view>.mojo`` for the named views (default: every materialised view).

    Each file is read back through the toolchain before the next is written.

    Raises:
        SchemaError: An unknown view, an existing file without ``force``, or a
            Feast type a schema cannot express.
    """
    specs = {v.name: v for v in load_repo_views(Path(repo_path))}
    unknown = [name for name in views if name not in specs]
    if unknown:
        msg = (
            f"no feature view named {', '.join(unknown)} in {repo_path} "
            f"(views: {', '.join(sorted(specs)) or 'none'})"
        )
        raise SchemaError(msg)
    chosen = [specs[n] for n in views] if views else [v for v in specs.values() if v.materialised]
    folder = Path(schemas_path)
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for view in chosen:
        target = folder / f"{view.name}.mojo"
        if target.exists() and not force:
            msg = f"{target} exists: it is the reviewed contract; pass --force to overwrite it"
            raise SchemaError(msg)
        schema = schema_of_view(view)
        target.write_text(render_schema(schema), encoding="utf-8")
        read_schemas([target])
        written.append(target)
    return written


__all__ = [
    "apply_repo",
    "check_repo",
    "evaluate",
    "init_schemas",
    "schema_of_view",
    "validate",
]
