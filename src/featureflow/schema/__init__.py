"""The schema gate: ``.mojo`` feature schemas checked against Feast before apply.

Public API:

- :func:`validate` — a repo (or one Feast view) against schemas -> :class:`Report`
- :func:`check_repo` — the stream job's start-up guard against the live registry
- :func:`check_batch` — a micro-batch's Arrow schema against a view's schema
- :func:`read_schema` / :func:`read_schemas` — parse schema files via ``mojo doc``
- :func:`init_schemas` — write schemas from the Feast definitions

Modules: ``model`` (schema as data), ``typeexpr`` (type-expression parser),
``toolchain`` (``mojo doc`` with a cache), ``reader``, ``writer``, ``typemap`` and ``arrowmap``
(the Mojo/Feast/Arrow table), ``feast_repo`` (Feast access), ``checks``,
``report`` and ``gate`` (the entry points). See docs/schema-gate.md.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from featureflow.schema.batch import check_batch
    from featureflow.schema.gate import apply_repo, check_repo, evaluate, init_schemas, validate
    from featureflow.schema.model import FeatureSchema, Role, SchemaField
    from featureflow.schema.reader import read_schema, read_schemas
    from featureflow.schema.report import Report, Row, Status
    from featureflow.schema.toolchain import include_path

_HOMES = {
    "check_batch": "batch",
    **dict.fromkeys(("apply_repo", "check_repo", "evaluate", "init_schemas", "validate"), "gate"),
    **dict.fromkeys(("FeatureSchema", "Role", "SchemaField"), "model"),
    **dict.fromkeys(("read_schema", "read_schemas"), "reader"),
    **dict.fromkeys(("Report", "Row", "Status"), "report"),
    "include_path": "toolchain",
}
"""The module of each public name, imported on first use: unpickling a
``FeatureSchema`` on Spark's executors, or checking a batch there, loads
``model`` and ``batch`` only, not the gate's Feast side (Feast's import costs a
Python worker seconds of CPU)."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
    "FeatureSchema",
    "Report",
    "Role",
    "Row",
    "SchemaField",
    "Status",
    "apply_repo",
    "check_batch",
    "check_repo",
    "evaluate",
    "include_path",
    "init_schemas",
    "read_schema",
    "read_schemas",
    "validate",
]
