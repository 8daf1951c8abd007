"""The walking skeleton end to end: Kafka -> spark-submit jobs/realtime.py -> Feast online store.

Real broker, real ``spark-submit`` (no --jars/--packages), real Feast repo and
SQLite online store. The online values are checked against DuckDB computing
the same windows from the same events.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
from duckdb_oracle import (
    END_NS,
    FEATURE_NAMES,
    events_table,
    latest_features,
    per_event_features,
)
from job_harness import apply, assert_online_rolling_equal, consume, run_job

from featureflow.events import sample
from featureflow.infra import kafka_broker, kafka_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BAD_RECORDS = [
    b"{this is not json",
    b'{"user_id": "abc", "amount": 1.0, "event_timestamp": 1795996800000}',
    b'{"user_id": 1, "amount": 1.0, "event_timestamp": "not a time"}',
]
ROLLING_ONLY = ("--view", "user_txn_stats")


def test_job_writes_online_features_equal_to_duckdb(
    kafka_bootstrap: str, topic: str, feature_repo_copy: Path, tmp_path: Path
) -> None:
    events = sample.generate(4000, users=80, seed=11, end_ns=END_NS, span_s=6 * 3600)
    kafka_client.produce(kafka_bootstrap, topic, sample.to_json(events))
    before = kafka_client.end_offsets(kafka_bootstrap, topic)
    kafka_client.produce(kafka_bootstrap, topic, [(b"bad", value) for value in BAD_RECORDS])
    after = kafka_client.end_offsets(kafka_bootstrap, topic)
    (bad_partition,) = [p for p in after if after[p] != before[p]]
    bad_offsets = range(before[bad_partition], after[bad_partition])

    apply(feature_repo_copy, topic)
    log = run_job(feature_repo_copy, kafka_bootstrap, tmp_path / "checkpoint", *ROLLING_ONLY)
    # Bad input is counted and skipped, each with a log line naming its offset.
    for offset, reason in zip(
        bad_offsets,
        ("not a JSON object", "entity key is not an integer", "not an RFC 3339"),
        strict=True,
    ):
        pattern = rf"skipped record {topic}\[{bad_partition}\]@{offset}: field '\w+': {reason}"
        assert re.search(pattern, log), pattern
    assert re.search(rf"{len(events)} events, {len(BAD_RECORDS)} skipped", log), log[-3000:]
    # One JSON metrics line per micro-batch; the totals add up.
    metrics = [json.loads(line) for line in re.findall(r"featureflow\.metrics: (\{.*\})", log)]
    assert len(metrics) == 1
    assert metrics[0]["records"] == len(events) + len(BAD_RECORDS)
    assert metrics[0]["events"] == len(events)
    assert sum(metrics[0]["dead_letters"].values()) == len(BAD_RECORDS)
    assert metrics[0]["freshness_p99_s"] >= metrics[0]["freshness_p50_s"] > 0
    assert sum(metrics[0]["freshness_buckets"].values()) == len(events)  # every event, once
    # Where the batch's time went: the driver's Spark jobs and the executors' phases.
    phases = metrics[0]["phases_s"]
    assert {"pass", "dead_letters", "executors_compute"} <= set(phases)
    assert phases["executors_compute"] > 0
    assert phases["pass"] + phases["dead_letters"] <= metrics[0]["duration_s"]
    assert metrics[0]["state_bytes"] > 0 and metrics[0]["state_rows"] > 0
    assert metrics[0]["state_frame_bytes"] > 0  # the rolling view's frame states, held
    # ... and lands, untouched, in the dead-letter topic with the reason in its headers.
    letters = consume(kafka_bootstrap, f"{topic}.dlq")
    assert sorted(value for value, _ in letters) == sorted(BAD_RECORDS)
    for value, headers in letters:
        offset = bad_offsets[BAD_RECORDS.index(value)]
        assert headers["featureflow.topic"] == topic
        assert headers["featureflow.partition"] == str(bad_partition)
        assert headers["featureflow.offset"] == str(offset)
        assert headers["featureflow.field"] in {"value", "user_id", "event_timestamp"}
        assert headers["featureflow.reason"]

    assert_online_rolling_equal(feature_repo_copy, latest_features(events_table(events)))


def _enable_tiling(repo: Path, hop_s: int) -> None:
    """Make the repo copy's ``user_txn_stats`` a tiled view (Feast's enable_tiling)."""
    definitions = repo / "features.py"
    text = definitions.read_text()
    anchor = "    aggregations=_TXN_AGGREGATIONS,\n"
    assert text.count(anchor) == 1
    tiling = f"    enable_tiling=True,\n    tiling_hop_size=timedelta(seconds={hop_s}),\n"
    definitions.write_text(text.replace(anchor, anchor + tiling))


@pytest.mark.parametrize("hop_s", [None, 300], ids=["plain", "tiled"])
def test_windows_span_micro_batches_restarts_and_drop_late_events(
    kafka_bootstrap: str, feature_repo_copy: Path, tmp_path: Path, hop_s: int | None
) -> None:
    """With ``hop_s`` the view is tiled: its state keeps tile partials, not old events."""
    # One partition, so micro-batches follow event time exactly (no cross-partition skew).
    topic = f"test-multi-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(kafka_bootstrap, topic, partitions=1)
    on_time = sample.generate(
        3000, users=40, seed=5, end_ns=END_NS, span_s=4 * 3600, out_of_order_share=0.0
    )
    records = list(sample.to_json(on_time))
    if hop_s is not None:
        _enable_tiling(feature_repo_copy, hop_s)
    apply(feature_repo_copy, topic)
    checkpoint = tmp_path / "checkpoint"

    kafka_client.produce(kafka_bootstrap, topic, records[:2000])
    first = run_job(
        feature_repo_copy, kafka_bootstrap, checkpoint, "--max-offsets-per-trigger", "400",
        *ROLLING_ONLY,
    )  # fmt: skip
    assert len(re.findall(r"view user_txn_stats batch \d+:", first)) >= 5

    # Late events: 3 h behind everything accepted so far (the watermark delay is 5 min).
    late = [
        (
            b"1",
            b'{"user_id": 1, "amount": 1000.0, "event_timestamp": %d}'
            % ((END_NS - 3 * 3600 * 10**9) // 10**6 + i),
        )
        for i in range(4)
    ]
    kafka_client.produce(kafka_bootstrap, topic, late + records[2000:])
    second = run_job(
        feature_repo_copy, kafka_bootstrap, checkpoint, "--max-offsets-per-trigger", "400",
        *ROLLING_ONLY,
    )  # fmt: skip
    assert second.count("later than the watermark") >= 4
    batches = [
        json.loads(line)
        for run in (first, second)
        for line in re.findall(r"featureflow\.metrics: (\{.*\})", run)
    ]
    assert sum(batch["events"] for batch in batches) == len(on_time)
    assert sum(batch["records"] for batch in batches) == len(on_time) + len(late)
    assert [batch["dead_letters"] for batch in batches if batch["dead_letters"]] == [
        {"later than the watermark": len(late)}
    ]
    letters = consume(kafka_bootstrap, f"{topic}.dlq")
    assert sorted(value for value, _ in letters) == sorted(value for _, value in late)
    assert {headers["featureflow.reason"] for _, headers in letters} == {"later than the watermark"}

    # The restart continued the windows from the state: equal to one pass over all on-time events.
    expected = latest_features(events_table(on_time), hop_s=hop_s)
    assert_online_rolling_equal(feature_repo_copy, expected)
    # The offline history holds every on-time event once, with its features.
    _assert_history_equals(feature_repo_copy, on_time, hop_s)
    tile_files = list(checkpoint.rglob("tiles/batch-*.arrow"))
    assert bool(tile_files) == (hop_s is not None)
    if hop_s is not None:  # old events left the raw state: fewer rows than a plain view keeps
        last = batches[-1]
        assert last["state_rows"] < sum(1 for t in on_time.event_ns if t >= END_NS - 86_400 * 10**9)


def _assert_history_equals(repo: Path, events: sample.SampleEvents, hop_s: int | None) -> None:
    import numpy as np

    from featureflow.spark.offline_sink import read_history

    table = events_table(events)
    oracle = per_event_features(table, hop_s=hop_s)
    history = read_history(str(repo / "data" / "offline"), "user_txn_stats")
    assert history.num_rows == len(events)
    got_ns = history.column("event_timestamp").cast("int64").to_numpy() * 1000
    got_order = np.lexsort((got_ns, history.column("user_id").to_numpy()))
    want_order = np.lexsort((events.event_ns, events.user_id))
    np.testing.assert_array_equal(got_ns[got_order], events.event_ns[want_order])
    for name in FEATURE_NAMES:
        got = np.array(history.column(name).to_pylist(), dtype=float)[got_order]
        want = np.array(oracle.column(name).to_pylist(), dtype=float)[want_order]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name)
