"""Spark DDL of a view's messages (``"user_id long, amount double"``): the one type map.

A Feast ``KafkaSource`` declares its JSON message schema as Spark DDL. Every
layer that reads it (the JSON parser, the notebook loader, the schema gate's
Feast types, the Avro source's translation) takes its field types from here.
Keys are Spark's type names and aliases, lower case; :data:`CANONICAL` maps
each alias to the ``simpleString`` Spark itself prints (``long`` -> ``bigint``).
"""

from __future__ import annotations

import pyarrow as pa

ARROW_TYPES: dict[str, pa.DataType] = {
    "bigint": pa.int64(), "long": pa.int64(),
    "int": pa.int32(), "integer": pa.int32(),
    "smallint": pa.int16(), "short": pa.int16(),
    "tinyint": pa.int8(), "byte": pa.int8(),
    "double": pa.float64(),
    "float": pa.float32(), "real": pa.float32(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}  # fmt: skip
"""Spark DDL scalar type -> the Arrow type of its values (timestamps: Spark's us, UTC)."""

CANONICAL: dict[str, str] = {
    "long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint", "real": "float",
}  # fmt: skip
"""Alias -> Spark's own name of the type (``DataType.simpleString()``)."""


def canonical(ddl_type: str) -> str:
    """Spark's name of a DDL type (``"LONG"`` -> ``"bigint"``); other text lower-cased."""
    name = ddl_type.strip().lower()
    return CANONICAL.get(name, name)


def arrow_type(ddl_type: str) -> pa.DataType | None:
    """The Arrow type of a DDL scalar type, or None for a type outside :data:`ARROW_TYPES`."""
    return ARROW_TYPES.get(ddl_type.strip().lower())


def fields(ddl: str) -> list[tuple[str, str]]:
    """(name, type text) of each top-level field of a DDL schema, in order.

    Commas inside ``<...>`` or ``(...)`` (``map<string,int>``, ``decimal(10,2)``)
    do not split fields; backquotes around a name are dropped.
    """
    parts: list[str] = []
    depth, start = 0, 0
    for index, char in enumerate(ddl):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(ddl[start:index])
            start = index + 1
    parts.append(ddl[start:])
    result = []
    for part in parts:
        name, _, kind = part.strip().partition(" ")
        if name:
            result.append((name.strip("`"), kind.strip()))
    return result


def canonical_fields(ddl: str) -> tuple[tuple[str, str], ...]:
    """(name, Spark's own type name) of each top-level field, as the JSON parsers take them."""
    return tuple((name, canonical(kind)) for name, kind in fields(ddl))
