"""Render a :class:`FeatureSchema` as a ``schemas/<view>.mojo`` file.

The inverse of :mod:`featureflow.schema.reader`: reading what this writes
gives back an equal schema (the property tests check it).
"""

from __future__ import annotations

import keyword

from featureflow.errors import SchemaError
from featureflow.schema.model import FeatureSchema, Role
from featureflow.schema.reader import VERSION_CONSTANT, VIEW_CONSTANT

# Words Mojo reserves beyond Python's, which cannot name a struct field.
MOJO_KEYWORDS: frozenset[str] = frozenset(keyword.kwlist) | {
    "var",
    "ref",
    "def",
    "fn",
    "struct",
    "trait",
    "comptime",
    "alias",
    "let",
    "mut",
    "out",
    "imm",
    "read",
    "deinit",
    "owned",
    "inout",
    "borrowed",
    "raises",
    "Self",
    "self",
    "std",
}


def check_identifier(name: str, what: str) -> None:
    """Raise SchemaError unless ``name`` can be a Mojo field or struct name."""
    if not name.isidentifier() or not name.isascii() or name in MOJO_KEYWORDS:
        msg = (
            f"{what} {name!r} cannot be a Mojo identifier (ASCII letters, digits and _, "
            "not starting with a digit, not a keyword): rename it in the Feast repo"
        )
        raise SchemaError(msg)


def struct_name(view: str) -> str:
    """``user_txn_stats`` -> ``UserTxnStats``."""
    name = "".join(part[:1].upper() + part[1:] for part in view.split("_") if part)
    if name.isidentifier() and name not in MOJO_KEYWORDS:
        return name
    return f"View{name}"  # "2fa" -> View2fa, "true" -> True is a keyword -> ViewTrue


def _markers(schema: FeatureSchema) -> list[str]:
    used = set()
    for field in schema.fields:
        if field.role is Role.ENTITY_KEY:
            used.add("EntityKey")
        if field.role is Role.EVENT_TIMESTAMP:
            used.add("EventTimestamp")
        if "Timestamp[" in str(field.type):
            used.add("Timestamp")
    return sorted(used)


def render_schema(schema: FeatureSchema) -> str:
    """The Mojo source of ``schema``."""
    check_identifier(schema.struct_name, "struct name")
    for field in schema.fields:
        check_identifier(field.name, f"field of view {schema.view!r}")
    markers = _markers(schema)
    lines = [
        f'"""Feature schema of the Feast feature view `{schema.view}`.',
        "",
        "The reviewed contract between the stream job and the Feast registry:",
        "`featureflow validate` and `featureflow apply` refuse any drift from it.",
        "Bump VERSION with every change; removing or re-typing a field needs a",
        "major bump (see docs/schema-gate.md).",
        '"""',
        "",
    ]
    if markers:
        lines += [f"from featureflow_schema import {', '.join(markers)}", "", ""]
    lines += [
        f"struct {schema.struct_name}:",
        f'    """One row of `{schema.view}`: entity keys, event timestamp, features."""',
        "",
        f"    comptime {VIEW_CONSTANT} = {_mojo_string(schema.view)}",
        f"    comptime {VERSION_CONSTANT} = {_mojo_string(schema.version)}",
        "",
    ]
    lines += [f"    var {field.name}: {field.mojo_type}" for field in schema.fields]
    return "\n".join(lines) + "\n"


def _mojo_string(text: str) -> str:
    """A Mojo string literal for ``text`` (double quotes, escapes as in JSON)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    if not escaped.isprintable():
        msg = f"{text!r} must be printable to appear in a schema file"
        raise SchemaError(msg)
    return f'"{escaped}"'
