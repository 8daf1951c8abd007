"""The driver's dead-letter producer against Spark's Kafka sink, on the real broker."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from job_harness import consume_records

from featureflow.errors import DeadLetterError
from featureflow.infra import kafka_broker
from featureflow.spark.dead_letter import DeadLetterWriter
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON


def _letters(n: int) -> pa.Table:
    return pa.table({
        "key": pa.array([None if i % 7 == 0 else b"k%d" % (i % 5) for i in range(n)], pa.binary()),
        "value": pa.array([b"\xff{not json %d" % i for i in range(n)], pa.binary()),
        "topic": pa.array(["events"] * n, pa.string()),
        "partition": pa.array([i % 3 for i in range(n)], pa.int32()),
        "offset": pa.array([10_000_000_000 + i for i in range(n)], pa.int64()),
        ERROR_FIELD: pa.array([None if i == 3 else "user_id" for i in range(n)], pa.string()),
        ERROR_REASON: pa.array(["not a JSON object", "later than the watermark"] * (n // 2)
                               + ["in the future"] * (n % 2), pa.string()),
    })  # fmt: skip


def _new_topic(bootstrap: str) -> str:
    name = f"test-dlq-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(bootstrap, name, partitions=3)
    return name


def test_the_driver_writes_what_sparks_sink_writes(kafka_bootstrap: str, spark: Any) -> None:
    """Same keys, values and headers (partition and offset as text, a null field as a null
    header), and each key in the partition Java's partitioner gives it, as Spark's sink."""
    letters = _letters(41)
    by_driver, by_spark = _new_topic(kafka_bootstrap), _new_topic(kafka_bootstrap)
    driver = DeadLetterWriter(kafka_bootstrap, by_driver, {}, {}, timeout_s=30)
    assert driver.client == "librdkafka"
    driver.write(letters, spark)
    driver.write(letters.slice(0, 0), spark)  # nothing to send: nothing sent
    sink = DeadLetterWriter(
        kafka_bootstrap, by_spark, {"ssl.truststore.location": "/nowhere.p12",
                                    "ssl.truststore.type": "PKCS12"}, {}, timeout_s=30,
    )  # fmt: skip
    assert sink.client == "spark"  # librdkafka reads no PKCS12 trust store
    sink.write(letters, spark)

    def records(topic: str) -> Counter[tuple[Any, ...]]:
        return Counter(
            (key, value, tuple(sorted(headers.items())))
            for key, value, headers in consume_records(kafka_bootstrap, topic)
        )

    written = records(by_driver)
    assert written == records(by_spark)
    assert sum(written.values()) == letters.num_rows
    some = next(h for (_, v, h) in written if v == b"\xff{not json 3")
    assert dict(some) == {
        "featureflow.reason": "later than the watermark", "featureflow.field": None,
        "featureflow.topic": "events", "featureflow.partition": "0",
        "featureflow.offset": "10000000003",
    }  # fmt: skip
    keyed = {key for key, _, _ in consume_records(kafka_bootstrap, by_driver) if key}
    assert keyed == {b"k%d" % i for i in range(5)}
    assert _partitions_of_keys(kafka_bootstrap, by_driver) == _partitions_of_keys(
        kafka_bootstrap, by_spark
    )


def _partitions_of_keys(bootstrap: str, topic: str) -> dict[bytes, set[int]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic})
    found: dict[bytes, set[int]] = {}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
        for message in consumer.consume(200, timeout=10):
            if message.error() is None and message.key() is not None:
                found.setdefault(message.key(), set()).add(message.partition())
    finally:
        consumer.close()
    return found


def test_letters_no_broker_acknowledged_fail_the_batch(spark: Any) -> None:
    """Nothing listens: the write raises within its timeout, naming the topic, instead of
    returning as if the letters were sent (the batch then runs again)."""
    writer = DeadLetterWriter("127.0.0.1:1", "nowhere.dlq", {}, {}, timeout_s=1)
    with pytest.raises(DeadLetterError, match=r"'nowhere\.dlq'"):
        writer.write(_letters(3), spark)
