"""Producing to and reading from Kafka with confluent-kafka (librdkafka)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from featureflow.errors import KafkaBrokerError
from featureflow.infra import kafka_settings


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None]],
    *,
    timeout_s: float = 60.0,
    partition: int | None = None,
    settings: Mapping[str, str] | None = None,
) -> int:
    """Send (key, value) records to ``topic`` and wait until all are acknowledged.

    ``partition``: write every record to this partition (default: the producer's
    partitioner, which hashes the key). ``settings``: Kafka client settings (SASL,
    TLS; Java names, :mod:`featureflow.infra.kafka_settings`).

    Returns:
        The number of records acknowledged by the broker.

    Raises:
        KafkaBrokerError: a record failed or the broker did not acknowledge
            everything within ``timeout_s`` seconds.
    """
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "compression.type": "lz4",
            "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000,
            # librdkafka's transient warnings (e.g. "coordinator load in progress"
            # right after the broker starts) are retried internally; errors still show.
            "log_level": 3,
            **kafka_settings.librdkafka_config(settings or {}),
        }
    )
    # -1 is librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose.
    to_partition = -1 if partition is None else partition
    delivery = deliver(
        producer, topic, ((key, value, None) for key, value in records), timeout_s, to_partition
    )
    if delivery.remaining or delivery.failures:
        msg = (
            f"{delivery.remaining} of {delivery.sent} records to {topic!r} were not "
            f"acknowledged by {bootstrap}{delivery.first_error()}"
        )
        raise KafkaBrokerError(msg)
    return delivery.sent


Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class Delivery:
    """What :func:`deliver` sent and what did not arrive."""

    sent: int
    remaining: int
    """Records still unacknowledged when the wait ran out."""
    failures: list[str]
    """The delivery errors the broker or the client reported, in order."""

    def first_error(self) -> str:
        return f"; first error: {self.failures[0]}" if self.failures else ""


def deliver(
    producer: Any, topic: str, records: Iterable[tuple[bytes | None, bytes | None, Headers | None]],
    timeout_s: float, partition: int = -1,
) -> Delivery:  # fmt: skip
    """Send (key, value, headers) records to ``topic`` through a confluent-kafka
    ``producer`` and wait up to ``timeout_s`` seconds until each is acknowledged
    (``partition`` -1: the producer's partitioner chooses)."""
    from confluent_kafka import KafkaError

    failures: list[str] = []
    sent = 0

    def on_delivery(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    for key, value, headers in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition,
                                 headers=headers, on_delivery=on_delivery)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: let deliveries drain
        sent += 1
        if sent % 10_000 == 0:
            producer.poll(0)
    return Delivery(sent, producer.flush(timeout_s), failures)


def end_offsets(
    bootstrap: str,
    topic: str,
    timeout_s: float = 30.0,
    *,
    settings: Mapping[str, str] | None = None,
) -> dict[int, int]:
    """The next offset to be written, per partition of ``topic`` (``settings``: as
    :func:`produce`'s)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "featureflow-offsets",
            **kafka_settings.librdkafka_config(settings or {}),
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        partitions = metadata.topics[topic].partitions
        result = {}
        for partition in partitions:
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
            result[partition] = high
        return result
    finally:
        consumer.close()
