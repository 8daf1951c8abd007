"""Bounded waits of the stream job's driver: Kafka client timeouts and the Feast registry read.

Kafka (``--kafka-timeout T``, default :data:`DEFAULT_KAFKA_TIMEOUT_S`): every
Kafka call the job makes gives up after about ``T`` and fails the query, which
the job restarts from its checkpoint within ``--retry-budget``
(:mod:`featureflow.spark.supervisor`):

=================================  =======================  ==========================
setting                            value                    bounds
=================================  =======================  ==========================
``kafka.request.timeout.ms``       T                        one request (all clients)
``kafka.default.api.timeout.ms``   T                        one offset lookup (driver)
``fetchOffset.numRetries``         2                        lookups per planning, so the
``fetchOffset.retryIntervalMs``    1000                     driver waits ~2 T + 1 s
``kafkaConsumer.pollTimeoutMs``    T                        one fetch (executors)
``kafka.delivery.timeout.ms``      2 T                      one dead letter (producer)
``kafka.max.block.ms``             T                        producer metadata
=================================  =======================  ==========================

The driver's dead-letter producer (librdkafka) takes the same bounds as
``request.timeout.ms`` (T) and ``delivery.timeout.ms`` (2 T), and waits at most
2 T + 1 s for a batch's acknowledgements.

Spark's defaults wait minutes (60 s per offset lookup, 3 lookups; 120 s per
fetch); the job's restart does the retrying instead, and logs each outage.
``--kafka-option`` settings of the same name win over these.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from featureflow.errors import FeatureflowError, ServiceTimeoutError

DEFAULT_KAFKA_TIMEOUT_S = 30.0
"""``--kafka-timeout``: seconds one Kafka request or fetch may take."""

DEFAULT_REGISTRY_TIMEOUT_S = 60.0
"""``--registry-timeout``: seconds the job waits for the Feast registry at start."""

T = TypeVar("T")


def kafka_source_options(timeout_s: float) -> dict[str, str]:
    """Options of Spark's Kafka source (driver and executors) for a ``timeout_s`` bound."""
    ms = _ms(timeout_s)
    return {
        "kafka.request.timeout.ms": ms,
        "kafka.default.api.timeout.ms": ms,
        "fetchOffset.numRetries": "2",
        "fetchOffset.retryIntervalMs": "1000",
        "kafkaConsumer.pollTimeoutMs": ms,
    }


def kafka_producer_options(timeout_s: float) -> dict[str, str]:
    """Options of Spark's Kafka sink (dead letters, where librdkafka cannot take the
    settings) for a ``timeout_s`` bound.

    ``delivery.timeout.ms`` must be at least ``request.timeout.ms + linger.ms``
    (Kafka refuses the producer otherwise), hence twice the request timeout.
    """
    ms = _ms(timeout_s)
    return {
        "kafka.request.timeout.ms": ms,
        "kafka.delivery.timeout.ms": _ms(2 * timeout_s),
        "kafka.max.block.ms": ms,
    }


def librdkafka_producer_timeouts(timeout_s: float) -> dict[str, str]:
    """:func:`kafka_producer_options` as librdkafka takes them (the driver's dead-letter
    producer, :class:`~featureflow.spark.dead_letter.DeadLetterWriter`)."""
    return {"request.timeout.ms": _ms(timeout_s), "delivery.timeout.ms": _ms(2 * timeout_s)}


def _ms(seconds: float) -> str:
    if not seconds > 0:
        msg = f"a Kafka timeout must be > 0 s, got {seconds}"
        raise FeatureflowError(msg)
    return str(max(1, round(seconds * 1000)))


def bounded(call: Callable[[], T], timeout_s: float, service: str, check: str) -> T:
    """``call()`` if it returns within ``timeout_s`` seconds; else ``ServiceTimeoutError``.

    For calls without a timeout of their own (Feast's registry read). The call
    runs on a daemon thread, which is left behind on timeout (the job then exits).
    Exceptions of ``call`` are raised here unchanged.
    """
    result: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(call())
        except BaseException as error:  # handed to the caller's thread
            failure.append(error)

    worker = threading.Thread(target=target, name=f"bounded-{service}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        msg = f"{service} did not answer within {timeout_s:g} s: {check}"
        raise ServiceTimeoutError(msg)
    if failure:
        raise failure[0]
    return result[0]
