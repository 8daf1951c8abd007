"""Read ``schemas/<view>.mojo`` files into :class:`FeatureSchema` objects.

The Mojo toolchain does the parsing: ``mojo doc`` type-checks each file and
returns its struct, the struct's ``comptime`` constants and its fields with
their types as JSON (see :mod:`featureflow.schema.toolchain`). The field
types are then parsed by :mod:`featureflow.schema.typeexpr`. Python's own
tokenizer only serves to find the line of a declaration for error messages.

A schema file holds exactly one struct::

    struct UserTxnStats:
        comptime VIEW = "user_txn_stats"
        comptime VERSION = "1.0.0"
        var user_id: EntityKey[Int64]
        var event_timestamp: EventTimestamp["us", "UTC"]
        var count_amount_600s: Int64

Every problem raises :class:`~featureflow.errors.SchemaParseError` with the
file, the line and what was expected.
"""

from __future__ import annotations

import io
import json
import tokenize
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from featureflow.errors import SchemaParseError
from featureflow.schema.model import FeatureSchema, Role, SchemaField, SemVer
from featureflow.schema.toolchain import DocResult, document
from featureflow.schema.typeexpr import TypeSyntaxError, field_type

VIEW_CONSTANT = "VIEW"
VERSION_CONSTANT = "VERSION"


def schema_files(schemas: Path) -> list[Path]:
    """The schema files under ``schemas`` (a folder, or a single ``.mojo`` file), sorted."""
    if schemas.is_file():
        return [schemas]
    if not schemas.is_dir():
        raise SchemaParseError(str(schemas), 1, "a folder of <view>.mojo schema files")
    return sorted(p for p in schemas.glob("*.mojo") if p.is_file())


def _declaration_lines(source: str) -> dict[str, int]:
    """Line of each ``var x`` / ``comptime X`` / ``struct S``, keyed ``"var x"`` etc.

    Uses Python's tokenizer, which reads Mojo's tokens (names, strings,
    brackets, comments) the same way; a file it cannot tokenize gives the
    lines found before the problem.
    """
    lines: dict[str, int] = {}
    previous: str | None = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME:
                if previous in ("var", "comptime", "struct"):
                    lines.setdefault(f"{previous} {token.string}", token.start[0])
                previous = token.string
            elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
                previous = None
    except (tokenize.TokenError, SyntaxError):
        pass
    return lines


def _string_constant(
    aliases: dict[str, dict[str, Any]], name: str, file: str, lines: dict[str, int], line: int
) -> tuple[str, int]:
    where = lines.get(f"comptime {name}", line)
    alias = aliases.get(name)
    if alias is None:
        example = '"user_txn_stats"' if name == VIEW_CONSTANT else '"1.0.0"'
        raise SchemaParseError(file, line, f"`comptime {name} = {example}` in the struct")
    try:
        value = json.loads(str(alias.get("value", "")))
    except ValueError:
        value = None
    if not isinstance(value, str) or not value:
        raise SchemaParseError(file, where, f"`comptime {name}` to be a non-empty string literal")
    return value, where


def _to_schema(result: DocResult, file: str, source: str) -> FeatureSchema:
    lines = _declaration_lines(source)
    if result.module is None:
        first = min(result.errors, key=lambda d: d.line)
        raise SchemaParseError(file, first.line, f"valid Mojo; the compiler says: {first.message}")
    structs = result.module.get("structs", [])
    if len(structs) != 1:
        names = ", ".join(s.get("name", "?") for s in structs) or "none"
        line = lines.get(f"struct {structs[1]['name']}", 1) if len(structs) > 1 else 1
        raise SchemaParseError(
            file, line, f"exactly one struct, the schema of one feature view (found: {names})"
        )
    struct = structs[0]
    struct_line = lines.get(f"struct {struct['name']}", 1)
    aliases = {a["name"]: a for a in struct.get("aliases", [])}
    view, _ = _string_constant(aliases, VIEW_CONSTANT, file, lines, struct_line)
    version, version_line = _string_constant(aliases, VERSION_CONSTANT, file, lines, struct_line)
    try:
        SemVer.parse(version)
    except ValueError as error:
        raise SchemaParseError(file, version_line, str(error)) from None
    fields: list[SchemaField] = []
    for entry in struct.get("fields", []):
        name = entry["name"]
        line = lines.get(f"var {name}", struct_line)
        try:
            value_type, role, nullable = field_type(entry["type"])
        except TypeSyntaxError as error:
            raise SchemaParseError(file, line, f"field `{name}` of type {error.expected}") from None
        if role is Role.EVENT_TIMESTAMP and any(f.role is role for f in fields):
            raise SchemaParseError(file, line, "a single EventTimestamp field per schema")
        fields.append(SchemaField(name, value_type, role, nullable, line))
    if not fields:
        raise SchemaParseError(file, struct_line, f"fields (`var name: Type`) in {struct['name']}")
    return FeatureSchema(view, version, struct["name"], tuple(fields), file, struct_line)


def read_schemas(paths: Iterable[Path]) -> list[FeatureSchema]:
    """Read schema files with one compiler run; SchemaParseError names the first bad one."""
    files = list(paths)
    sources: list[bytes] = []
    for path in files:
        try:
            sources.append(path.read_bytes())
        except OSError as error:
            raise SchemaParseError(str(path), 1, f"a readable schema file ({error})") from None
    results = document(sources)
    return [
        _to_schema(result, str(path), source.decode("utf-8", errors="replace"))
        for path, source, result in zip(files, sources, results, strict=True)
    ]


def read_schema(path: Path) -> FeatureSchema:
    """Read one schema file; raises SchemaParseError naming file, line and what was expected."""
    return read_schemas([path])[0]
