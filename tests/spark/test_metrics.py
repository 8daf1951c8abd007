"""Batch metrics: freshness histograms, the JSON line, the Prometheus endpoint."""

from __future__ import annotations

import json
import re
import urllib.request

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from featureflow.spark.metrics import (
    FRESHNESS_EDGES_S,
    PROMETHEUS_FRESHNESS_EDGES,
    BatchReport,
    PrometheusExporter,
    bucket_array,
    freshness_histogram,
    histogram_quantile,
    nonempty_buckets,
)


@settings(max_examples=50, deadline=None)
@given(lags_s=st.lists(st.floats(0.002, 1e6), min_size=1, max_size=200))
def test_histogram_quantiles_bound_the_exact_ones_within_a_bucket(lags_s: list[float]) -> None:
    now = 2_000_000_000 * 10**9
    event_ns = np.array([now - int(lag * 1e9) for lag in lags_s], dtype=np.int64)
    counts = freshness_histogram(event_ns, now)
    assert sum(counts) == len(lags_s)
    step = FRESHNESS_EDGES_S[1] / FRESHNESS_EDGES_S[0]
    for q in (0.5, 0.99):
        exact = float(np.quantile((now - event_ns) / 1e9, q, method="inverted_cdf"))
        estimate = histogram_quantile(counts, q)
        assert estimate is not None
        assert exact <= estimate * (1 + 1e-9) <= exact * step * (1 + 1e-6)


def test_histograms_merge_by_adding() -> None:
    now = 10**18
    a = freshness_histogram(np.array([now - 10**9]), now)
    b = freshness_histogram(np.array([now - 10**12, now - 10**12]), now)
    merged = np.sum([a, b], axis=0)
    assert histogram_quantile(merged, 0.5) == histogram_quantile(b, 0.5)
    assert histogram_quantile([0] * len(a), 0.5) is None


@settings(max_examples=50, deadline=None)
@given(batches=st.lists(st.lists(st.one_of(st.floats(0.0, 1e8), st.sampled_from(
    [float(edge) for edge in FRESHNESS_EDGES_S[::7]])), max_size=50), min_size=1, max_size=6))
def test_metrics_lines_buckets_add_up_to_the_histogram_of_all_events(
        batches: list[list[float]]) -> None:
    """Each batch's buckets, through its JSON line, summed: the histogram of every event
    of the batches (lags on bucket edges, past the last edge, and 0 included)."""
    now = 2_000_000_000 * 10**9
    lines, every = [], []
    for batch_id, lags_s in enumerate(batches):
        event_ns = np.array([now - int(lag * 1e9) for lag in lags_s], dtype=np.int64)
        every.append(event_ns)
        counts = freshness_histogram(event_ns, now)
        report = BatchReport("v", batch_id, records=len(lags_s), events=len(lags_s),
                             freshness_buckets=nonempty_buckets(counts))
        lines.append(json.loads(report.to_json()))
    summed = np.sum([bucket_array(line["freshness_buckets"]) for line in lines], axis=0)
    assert summed.tolist() == freshness_histogram(np.concatenate(every), now)
    assert all(count > 0 for line in lines for count in line["freshness_buckets"].values())


def test_report_json_line() -> None:
    report = BatchReport("v", 3, records=12, events=10, dead_letters={"late": 2}, duration_s=2.0)
    line = json.loads(report.to_json())
    assert line["events_per_s"] == 5.0
    assert line["dead_letters"] == {"late": 2}
    assert line["batch_id"] == 3


def test_report_json_line_says_where_the_time_went() -> None:
    phases = {"summary": 1.23456, "executors_online_write": 0.5}
    report = BatchReport("v", 0, records=1, events=1, duration_s=2.0, phases_s=phases)
    assert json.loads(report.to_json())["phases_s"] == {
        "summary": 1.235,
        "executors_online_write": 0.5,
    }


def test_prometheus_endpoint_serves_the_batch() -> None:
    exporter = PrometheusExporter(0)
    try:
        for batch_id, cold in enumerate((3, 1)):  # the counter adds the batches' cold tasks
            exporter.observe(
                BatchReport(
                    "user_txn_stats", batch_id, records=7, events=5,
                    dead_letters={"not a JSON object": 2}, duration_s=0.5,
                    freshness_p50_s=0.2, freshness_p99_s=1.5, partitions_run=8,
                    cold_partitions=cold, freshness_buckets={"0.1995": 3, "1": 2, "1e+07": 1},
                    state_bytes=1000 * (batch_id + 1), state_frame_bytes=300 * (batch_id + 1),
                )
            )  # fmt: skip
        text = (
            urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10)
            .read()
            .decode()
        )
    finally:
        exporter.close()
    assert 'featureflow_events_total{view="user_txn_stats"} 10.0' in text
    assert 'featureflow_records_total{view="user_txn_stats"} 14.0' in text
    assert (
        'featureflow_dead_letters_total{reason="not a JSON object",view="user_txn_stats"} 4.0'
        in text
    )
    assert 'featureflow_cold_partitions_total{view="user_txn_stats"} 4.0' in text
    # gauges: the last batch's state sizes, events and the frame states beside them
    assert 'featureflow_state_bytes{view="user_txn_stats"} 2000.0' in text
    assert 'featureflow_state_frame_bytes{view="user_txn_stats"} 600.0' in text
    assert 'featureflow_freshness_seconds{quantile="0.99",view="user_txn_stats"} 1.5' in text
    # cumulative buckets, summed over the two batches: PromQL's histogram_quantile reads them
    at_most = {
        le: float(count)
        for le, count in re.findall(
            r'featureflow_freshness_events_total\{le="([^"]+)",view="user_txn_stats"\} (\S+)', text)
    }
    assert len(at_most) == len(PROMETHEUS_FRESHNESS_EDGES) + 1
    assert (at_most["0.1"], at_most["0.1995"], at_most["0.7943"], at_most["1"]) == (0, 6, 6, 10)
    assert (at_most["100"], at_most["+Inf"]) == (10, 12)


def test_exporters_keep_their_own_counts_after_feast_turned_on_multiprocess_mode() -> None:
    """Importing Feast sets PROMETHEUS_MULTIPROC_DIR before prometheus_client chooses where
    values live: its Counters then shared memory-mapped values by name, and a second
    exporter in the process started at the first one's counts. A fresh interpreter, Feast
    imported first, as in the job's driver and in a long test run."""
    import subprocess
    import sys

    script = """
import feast.metrics, os, urllib.request
assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
from featureflow.spark.metrics import BatchReport, PrometheusExporter
for _ in range(2):
    exporter = PrometheusExporter(0)
    exporter.observe(BatchReport("v", 0, records=7, events=5))
    url = f"http://127.0.0.1:{exporter.port}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    exporter.close()
    assert 'featureflow_events_total{view="v"} 5.0' in text, text
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
