"""Bounded waits of the driver: the Kafka options of --kafka-timeout, and ``bounded``."""

from __future__ import annotations

import threading
import time

import pytest

from featureflow.errors import FeatureflowError, ServiceTimeoutError
from featureflow.spark.job import build_parser
from featureflow.spark.timeouts import bounded, kafka_producer_options, kafka_source_options


def test_kafka_timeout_sets_every_wait_of_source_and_producer() -> None:
    assert kafka_source_options(5) == {
        "kafka.request.timeout.ms": "5000",
        "kafka.default.api.timeout.ms": "5000",
        "fetchOffset.numRetries": "2",
        "fetchOffset.retryIntervalMs": "1000",
        "kafkaConsumer.pollTimeoutMs": "5000",
    }
    producer = kafka_producer_options(0.25)
    assert producer["kafka.request.timeout.ms"] == "250"
    assert producer["kafka.max.block.ms"] == "250"
    # Kafka refuses a producer whose delivery timeout is below request timeout + linger.
    assert int(producer["kafka.delivery.timeout.ms"]) >= 2 * 250
    with pytest.raises(FeatureflowError, match="> 0 s"):
        kafka_source_options(0)


def test_job_options_default_and_parse() -> None:
    args = build_parser().parse_args(["--repo", "r", "--checkpoint", "c"])
    assert (args.retry_budget, args.kafka_timeout, args.registry_timeout) == (
        300 * 10**9, 30 * 10**9, 60 * 10**9)  # fmt: skip
    args = build_parser().parse_args(["--repo", "r", "--checkpoint", "c", "--retry-budget", "90s",
                                      "--kafka-timeout", "500ms"])  # fmt: skip
    assert (args.retry_budget, args.kafka_timeout) == (90 * 10**9, 500 * 10**6)


def test_bounded_returns_raises_or_times_out() -> None:
    assert bounded(lambda: 7, 5, "svc", "check it") == 7
    with pytest.raises(KeyError):
        bounded(lambda: {}["x"], 5, "svc", "check it")
    never = threading.Event()
    started = time.monotonic()
    with pytest.raises(ServiceTimeoutError, match=r"the Feast registry did not answer within "
                                                  r"0.2 s: check the path"):  # fmt: skip
        bounded(never.wait, 0.2, "the Feast registry", "check the path")
    assert time.monotonic() - started < 2
    never.set()
