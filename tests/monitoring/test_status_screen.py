"""``featureflow status``'s screen from the exporter's real Prometheus text, and the consumer
lag the driver reads off Spark's query progress."""

from __future__ import annotations

import json

from featureflow.monitoring.lag import ConsumerLagWatcher, consumer_lag, progress_lag
from featureflow.monitoring.scrape import metrics_url, parse
from featureflow.monitoring.screen import WIDTH, render


def test_the_scrape_reads_every_value_of_the_view(served: str) -> None:
    status = parse(served, "http://127.0.0.1:1/metrics")
    view = status.views["user_txn_stats"]
    assert (view.topic, view.batches, view.records, view.events) == ("transactions", 1, 9, 6)
    assert (view.events_per_s, view.batch_duration_s) == (4.0, 1.5)
    assert (view.freshness_p50_s, view.freshness_p99_s) == (0.2, 1.5)
    assert view.dead_letters == {"not a JSON object": 3}
    assert view.watermark_lag_s == {0: 12.5, 1: 400.0}
    assert view.idle_partitions == {1}
    assert status.consumer_lag == {"transactions": {0: 250, 1: 0}}
    assert status.total_lag() == 250


def test_the_screen_fits_80_columns_and_shows_each_number(served: str) -> None:
    status = parse(served, "http://127.0.0.1:9108/metrics")
    status.view("a_view_with_a_name_longer_than_its_column")
    status.consumer_lag["orders"] = {p: 1_000 * p for p in range(24)}  # wraps
    lines = render(status, clock="12:00:00")
    assert max(len(line) for line in lines) <= WIDTH
    screen = "\n".join(lines)
    row = next(line for line in lines if line.startswith("user_txn_stats"))
    assert row.split() == ["user_txn_stats", "1", "4", "1.50", "0.20", "s", "1.50", "s", "3"]
    assert "transactions  total 250:  p0 250  p1 0" in screen
    assert "p23 23,000" in screen
    assert "user_txn_stats:  p0 12 s  p1 400 s idle" in screen
    assert "not a JSON object: 3;" in screen
    assert "a_view_with_a_name_…" in screen


def test_metrics_url_forms() -> None:
    assert metrics_url(9108) == "http://127.0.0.1:9108/metrics"
    assert metrics_url(url="job:9108") == "http://job:9108/metrics"
    assert metrics_url(url="https://job/x/metrics") == "https://job/x/metrics"


# The sources of a Spark query progress as pyspark returns them: offsets parsed or as text.
PROGRESS = {
    "timestamp": "2026-11-30T00:00:01.000Z",
    "batchId": 3,
    "sources": [
        {
            "description": "KafkaV2[Subscribe[transactions]]",
            "startOffset": {"transactions": {"0": 100, "1": 40}},
            "endOffset": {"transactions": {"0": 300, "1": 90}},
            "latestOffset": json.dumps({"transactions": {"0": 550, "1": 90}}),
        }
    ],
}


def test_lag_is_latest_minus_processed_per_partition() -> None:
    assert progress_lag(PROGRESS) == {"transactions": {0: 250, 1: 0}}
    # A partition Spark has not read yet lags by its whole content; never below 0.
    assert consumer_lag({"t": {0: 9}}, {"t": {0: 5, 1: 7}}) == {"t": {0: 0, 1: 7}}
    assert progress_lag({"sources": [{"endOffset": None, "latestOffset": None}]}) == {}


def test_the_watcher_logs_one_json_line_per_progress(caplog) -> None:  # type: ignore[no-untyped-def]
    class Query:
        id, name, lastProgress = "q1", "transactions", PROGRESS

    watcher = ConsumerLagWatcher()
    with caplog.at_level("INFO", logger="featureflow.lag"):
        watcher.poll([Query()])
        watcher.poll([Query()])  # the same progress: nothing new
    (record,) = caplog.records
    assert json.loads(record.getMessage()) == {
        "query": "transactions", "batch_id": 3, "consumer_lag": {"transactions": {"0": 250, "1": 0}}
    }  # fmt: skip
