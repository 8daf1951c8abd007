"""The job's real Prometheus endpoint, fed one report of every kind of value."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest

from featureflow.spark.metrics import BatchReport, PrometheusExporter


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """The exporter's Prometheus text after one batch of every kind of value."""
    exporter = PrometheusExporter(0)
    try:
        exporter.describe_views({"user_txn_stats": "transactions"})
        exporter.observe(
            BatchReport(
                "user_txn_stats", 0, records=9, events=6, dead_letters={"not a JSON object": 3},
                duration_s=1.5, freshness_p50_s=0.2, freshness_p99_s=1.5, state_rows=6,
                freshness_buckets={"0.1995": 3, "1.585": 3},
                watermark_lag_s={"0": 12.5, "1": 400.0}, idle_partitions=[1],
            )
        )  # fmt: skip
        exporter.observe_consumer_lag("transactions", {0: 250, 1: 0})
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            yield response.read().decode()
    finally:
        exporter.close()
