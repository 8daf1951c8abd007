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

Written from the micro-batch with Spark's Kafka sink, so delivery is
at-least-once: a micro-batch replayed after a crash writes its dead letters again.
The sink gets the job's Kafka settings (SASL, TLS: :mod:`featureflow.infra.kafka_settings`).
Header values are a fixed vocabulary of reasons and fields and Kafka coordinates,
never a setting, so they hold no secret (``tests/integration/test_secured_services.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from featureflow.spark.kafka_source import kafka_client_options
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

HEADER_PREFIX = "featureflow."


def dead_letter_topic(source_topic: str) -> str:
    """The default dead-letter topic of a source topic: ``<topic>.dlq``."""
    return f"{source_topic}.dlq"


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
        F.array(
            header("reason", ERROR_REASON),
            header("field", ERROR_FIELD),
            header("topic", "topic"),
            header("partition", "partition"),
            header("offset", "offset"),
        ).alias("headers"),
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
