"""The project's Kafka client settings: its poll size by default, the user's settings win."""

from __future__ import annotations

from featureflow.spark.kafka_source import (
    MAX_POLL_RECORDS,
    kafka_client_options,
    kafka_read_options,
)


def test_a_read_polls_more_than_kafkas_default_500_records() -> None:
    assert kafka_read_options({}) == {"kafka.max.poll.records": str(MAX_POLL_RECORDS)}
    assert MAX_POLL_RECORDS > 500


def test_the_users_settings_win_with_or_without_their_prefix() -> None:
    for key in ("max.poll.records", "kafka.max.poll.records"):
        options = kafka_read_options({key: "500", "security.protocol": "SSL"})
        assert options == {"kafka.max.poll.records": "500", "kafka.security.protocol": "SSL"}


def test_the_sinks_client_settings_are_the_users_alone_prefixed_once() -> None:
    options = kafka_client_options({"acks": "all", "kafka.linger.ms": "5"})
    assert options == {"kafka.acks": "all", "kafka.linger.ms": "5"}
