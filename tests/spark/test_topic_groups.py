"""Which views share a streaming query: those whose records are parsed alike."""

from __future__ import annotations

import dataclasses

from duckdb_oracle import EXAMPLE_SPEC

from featureflow.spark.pipeline import topic_groups


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
