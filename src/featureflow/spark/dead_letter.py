"""Dead letters: records the job can't use go to a Kafka topic, untouched, with the reason.

Each dead letter keeps the original key and value bytes; Kafka headers say why
and where it came from:

=========================  ==============================================
header                     value (UTF-8)
=========================  ==============================================
``featureflow.reason``     e.g. ``not a JSON object``
``featureflow.field``      the field that failed, e.g. ``user_id``
``featureflow.topic``      source topic
``featureflow.partition``  source partition
``featureflow.offset``     source offset
=========================  ==============================================

Sent by the driver, where the micro-batch's pass returns them (:class:`DeadLetterWriter`),
before the batch ends, so delivery is at-least-once: a micro-batch replayed after a
crash writes its dead letters again. The writer gets the job's Kafka settings (SASL,
TLS: :mod:`featureflow.infra.kafka_settings`). Header values are a fixed vocabulary of
reasons and fields and Kafka coordinates, never a setting, so they hold no secret
(``tests/integration/test_secured_services.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from featureflow.errors import DeadLetterError, KafkaSettingsError
from featureflow.infra import kafka_client, kafka_settings
from featureflow.spark.kafka_source import kafka_client_options
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON
from featureflow.spark.timeouts import librdkafka_producer_timeouts

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

HEADER_PREFIX = "featureflow."


def dead_letter_topic(source_topic: str) -> str:
    """The default dead-letter topic of a source topic: ``<topic>.dlq``."""
    return f"{source_topic}.dlq"


HEADERS = (
    ("reason", ERROR_REASON), ("field", ERROR_FIELD), ("topic", "topic"),
    ("partition", "partition"), ("offset", "offset"),
)  # fmt: skip
"""Each header's name (after :data:`HEADER_PREFIX`) and the column its value comes from."""


def dead_letters(bad_records: DataFrame) -> DataFrame:
    """The Kafka records (key, value, headers) of parsed rows that carry an error."""
    from pyspark.sql import functions as F

    def header(name: str, column: str) -> Column:
        return F.struct(
            F.lit(HEADER_PREFIX + name).alias("key"),
            F.col(column).cast("string").cast("binary").alias("value"),
        )

    return bad_records.select(
        F.col("key"),
        F.col("value"),
        F.array(*(header(name, column) for name, column in HEADERS)).alias("headers"),
    )


def write_dead_letters(
    bad_records: DataFrame, bootstrap: str, topic: str, kafka_options: dict[str, str]
) -> None:
    """Append the dead letters of ``bad_records`` to ``topic`` (created by the broker if needed)."""
    (
        dead_letters(bad_records)
        .write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .options(**kafka_client_options(kafka_options))
        .save()
    )


class DeadLetterWriter:
    """Appends each micro-batch's dead letters to the dead-letter topic, from the driver.

    The pass returns a batch's dead letters to the driver, so one producer there sends
    them (librdkafka, idempotent, kept for the job's life) and waits for the broker's
    acknowledgement of every one before the batch ends; a failure raises
    :class:`~featureflow.errors.DeadLetterError`, which fails the batch (it runs again:
    at least once). Spark's Kafka sink did the same with a Spark job of its own in every
    batch that had dead letters: 0.55-0.63 s of each 1 M-record batch in
    ``bench/stream.py`` (~680 letters), longer than a whole small batch.

    Records as Spark's sink writes them: the key and value bytes untouched, the headers
    of :data:`HEADERS` as UTF-8 text, the partition chosen as Java's client chooses it
    (``murmur2_random``). Settings librdkafka cannot take (a Java or PKCS12 trust store
    without ``librdkafka.ssl.ca.location``: :func:`~featureflow.infra.kafka_settings.
    librdkafka_config`) keep Spark's sink (:func:`write_dead_letters`), which the writer
    logs once with the reason.
    """

    def __init__(
        self, bootstrap: str, topic: str, settings: Mapping[str, str],
        spark_options: Mapping[str, str], timeout_s: float,
    ) -> None:  # fmt: skip
        """``settings``: the job's Kafka settings as loaded (keys without ``kafka.``);
        ``spark_options``: what Spark's sink takes instead (``kafka.*``); ``timeout_s``:
        ``--kafka-timeout`` (one request; a letter's delivery may take twice it)."""
        self.bootstrap, self.topic, self.timeout_s = bootstrap, topic, timeout_s
        self.spark_options = dict(spark_options)
        self._lock = threading.Lock()
        self._producer: Any = None
        self.config: dict[str, object] | None
        try:
            self.config = {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "partitioner": "murmur2_random",  # Java's: a key's partition as Spark's sink
                "linger.ms": 5,
                "log_level": 3,
                **librdkafka_producer_timeouts(timeout_s),
                **kafka_settings.librdkafka_config(settings),
            }
        except KafkaSettingsError as error:
            self.config = None
            log.warning("dead letters go through Spark's Kafka sink (a Spark job each "
                        "batch that has any): %s", error)  # fmt: skip
        else:
            log.info("dead letters go to %s through the driver's producer (librdkafka)", topic)

    @property
    def client(self) -> str:
        """Which client sends: ``librdkafka`` (the driver's producer) or ``spark``."""
        return "spark" if self.config is None else "librdkafka"

    def write(self, letters: pa.Table, spark: SparkSession) -> None:
        """Send ``letters`` (``key``, ``value``, ``topic``, ``partition``, ``offset``, the
        error field and reason) and wait until the broker acknowledged each one."""
        if not letters.num_rows:
            return
        if self.config is None:
            write_dead_letters(spark.createDataFrame(letters), self.bootstrap, self.topic,
                               self.spark_options)  # fmt: skip
            return
        with self._lock:
            self._send(letters)

    def _send(self, letters: pa.Table) -> None:
        from confluent_kafka import Producer

        if self._producer is None:
            assert self.config is not None  # write sends through Spark's sink otherwise
            self._producer = Producer(self.config)
        names = [HEADER_PREFIX + name for name, _ in HEADERS]
        records = (
            (key, value, [(name, None if v is None else str(v).encode())
                          for name, v in zip(names, values, strict=True)])
            for key, value, *values in zip(
                letters.column("key").to_pylist(), letters.column("value").to_pylist(),
                *(letters.column(column).to_pylist() for _, column in HEADERS), strict=True,
            )
        )  # fmt: skip
        wait_s = 2 * self.timeout_s + 1
        delivery = kafka_client.deliver(self._producer, self.topic, records, wait_s)
        if delivery.remaining or delivery.failures:
            self._producer = None  # a producer that failed starts afresh on the retry
            msg = (
                f"{delivery.remaining} of {delivery.sent} dead letters to {self.topic!r} were "
                f"not acknowledged by {self.bootstrap} within {wait_s:.0f} s"
                f"{delivery.first_error()} (the batch fails and runs again; check the broker "
                "and --kafka-timeout)"
            )
            raise DeadLetterError(msg)
