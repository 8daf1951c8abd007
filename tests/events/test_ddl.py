"""The DDL field reader the JSON parsers take their field types from."""

from __future__ import annotations

from featureflow.events import ddl


def test_fields_keep_nested_commas_and_drop_backquotes() -> None:
    assert ddl.fields("`user_id` long, tags map<string,int>, price decimal(10,2)") == [
        ("user_id", "long"), ("tags", "map<string,int>"), ("price", "decimal(10,2)"),
    ]  # fmt: skip


def test_canonical_fields_use_sparks_own_type_names() -> None:
    assert ddl.canonical_fields("user_id LONG, n Integer, amount double, ok boolean") == (
        ("user_id", "bigint"), ("n", "int"), ("amount", "double"), ("ok", "boolean"),
    )  # fmt: skip
