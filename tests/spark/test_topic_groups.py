"""Which views share a streaming query: those whose records are parsed alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from duckdb_oracle import EXAMPLE_SPEC

from featureflow.spark.pipeline import checkpoint_order, topic_groups


def test_views_of_one_topic_share_a_query_in_declaration_order() -> None:
    rolling = EXAMPLE_SPEC
    sessions = dataclasses.replace(EXAMPLE_SPEC, name="sessions", session_gap_ns=1_800 * 10**9)
    other_topic = dataclasses.replace(EXAMPLE_SPEC, name="clicks", topic="clicks")
    groups = topic_groups([rolling, other_topic, sessions])
    assert [[spec.name for spec in group] for group in groups] == [
        [rolling.name, sessions.name],
        ["clicks"],
    ]


def test_views_parsed_differently_do_not_share_a_query() -> None:
    variants = [
        dataclasses.replace(EXAMPLE_SPEC, name="servers", bootstrap_servers="other:9092"),
        dataclasses.replace(EXAMPLE_SPEC, name="schema", json_schema="user_id long, ts string"),
        dataclasses.replace(EXAMPLE_SPEC, name="avro", avro_schema='{"type": "record"}'),
        dataclasses.replace(EXAMPLE_SPEC, name="key", join_key="account_id"),
        dataclasses.replace(EXAMPLE_SPEC, name="stamp", timestamp_field="ts"),
        dataclasses.replace(EXAMPLE_SPEC, name="delay", watermark_ns=60 * 10**9),
    ]
    groups = topic_groups([EXAMPLE_SPEC, *variants])
    assert len(groups) == 1 + len(variants)
    assert all(len(group) == 1 for group in groups)


def test_a_query_keeps_the_view_order_its_checkpoint_was_started_with(tmp_path: Path) -> None:
    """The order names the query's checkpoint and picks the view keeping the watermarks:
    the registry's order may change between applies, the checkpoint's must not."""
    rolling = EXAMPLE_SPEC
    sessions = dataclasses.replace(EXAMPLE_SPEC, name="a_sessions", session_gap_ns=1_800 * 10**9)
    fresh = tmp_path / "fresh"
    assert [spec.name for spec in checkpoint_order(str(fresh), [rolling, sessions])] == sorted(
        [rolling.name, sessions.name]
    )
    started = tmp_path / "started"
    (started / f"{rolling.name}+{sessions.name}").mkdir(parents=True)
    (started / rolling.name / "featureflow-state").mkdir(parents=True)  # a view's own state
    for listed in ([rolling, sessions], [sessions, rolling]):
        assert [spec.name for spec in checkpoint_order(str(started), listed)] == [
            rolling.name,
            sessions.name,
        ]
    assert checkpoint_order(str(started), [sessions]) == [sessions]
