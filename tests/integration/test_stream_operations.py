"""The stream job with both example views: sessions, dead letters, SIGTERM, Redis.

Real broker, real ``spark-submit``, real Feast repo; DuckDB is the oracle.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from duckdb_oracle import END_NS, events_table, latest_features
from job_harness import (
    apply,
    assert_online_rolling_equal,
    assert_sessions_equal,
    consume,
    env,
    job_command,
    run,
    run_job,
    topic_with,
)

from featureflow.events import sample
from featureflow.infra import kafka_broker, kafka_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MS = 1_795_996_800_000 - 3_600_000  # an on-time epoch-ms timestamp inside the sample span
# (raw record, field the job blames, reason): 12 kinds of unusable records.
BAD_RECORDS: list[tuple[bytes | None, str, str]] = [
    (b"{this is not json", "value", "not a JSON object"),
    (b"[1, 2, 3]", "value", "not a JSON object"),
    (b"", "value", "not a JSON object"),
    (None, "value", "not a JSON object"),  # a tombstone
    (b"\xff\xfe\x00garbage", "value", "not a JSON object"),
    (b'{"amount": 1.0, "event_timestamp": %d}' % MS, "user_id", "missing or null entity key"),
    (b'{"user_id": null, "amount": 1.0, "event_timestamp": %d}' % MS, "user_id",
     "missing or null entity key"),
    (b'{"user_id": "abc", "amount": 1.0, "event_timestamp": %d}' % MS, "user_id",
     "entity key is not an integer"),
    (b'{"user_id": 99999999999999999999999, "amount": 1.0, "event_timestamp": %d}' % MS,
     "user_id", "entity key is not an integer"),
    (b'{"user_id": 1, "amount": 1.0}', "event_timestamp", "missing or null event timestamp"),
    (b'{"user_id": 1, "amount": 1.0, "event_timestamp": "not a time"}', "event_timestamp",
     "not an RFC 3339 timestamp or epoch milliseconds"),
    (b'{"user_id": 1, "amount": "lots", "event_timestamp": %d}' % MS, "amount",
     "not a valid double"),
]  # fmt: skip
LATE_REASON = "later than the watermark"


def _metrics(log: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in re.findall(r"featureflow\.metrics: (\{.*\})", log)]


def test_sessions_and_dead_letters_with_both_views_on_one_topic(
    kafka_bootstrap: str, feature_repo_copy: Path, tmp_path: Path
) -> None:
    topic = f"test-ops-{uuid.uuid4().hex[:10]}"
    # One partition: micro-batches follow arrival order exactly.
    kafka_broker.create_topic(kafka_bootstrap, topic, partitions=1)
    good = sample.generate(
        2400, users=30, seed=41, end_ns=END_NS, span_s=8 * 3600, out_of_order_share=0.0
    )
    records = list(sample.to_json(good))
    late = [
        b'{"user_id": 2, "amount": 5.0, "event_timestamp": %d}'
        % ((END_NS - 7 * 3600 * 10**9) // 10**6 + i)
        for i in range(3)
    ]
    kafka_client.produce(kafka_bootstrap, topic, records[:1500])
    kafka_client.produce(kafka_bootstrap, topic, [(b"bad", value) for value, _, _ in BAD_RECORDS])
    kafka_client.produce(kafka_bootstrap, topic, [(b"late", value) for value in late])
    kafka_client.produce(kafka_bootstrap, topic, records[1500:])
    apply(feature_repo_copy, topic)

    log = run_job(
        feature_repo_copy, kafka_bootstrap, tmp_path / "checkpoint",
        "--max-offsets-per-trigger", "500",
    )  # fmt: skip

    expected_reasons = Counter(reason for _, _, reason in BAD_RECORDS)
    expected_reasons[LATE_REASON] += len(late)
    total_records = len(records) + len(BAD_RECORDS) + len(late)
    for view in ("user_txn_stats", "user_sessions"):
        batches = [m for m in _metrics(log) if m["view"] == view]
        assert len(batches) >= 4, view
        assert sum(int(m["records"]) for m in batches) == total_records, view  # type: ignore[call-overload]
        assert sum(int(m["events"]) for m in batches) == len(records), view  # type: ignore[call-overload]
        reasons: Counter[str] = Counter()
        for m in batches:
            reasons.update(m["dead_letters"])  # type: ignore[arg-type]
        assert reasons == expected_reasons, view

    # Each unusable record is dead-lettered exactly once (two views read the topic),
    # untouched, with the field and reason that made it unusable.
    letters = consume(kafka_bootstrap, f"{topic}.dlq")
    assert len(letters) == len(BAD_RECORDS) + len(late)
    by_value = dict(letters)
    for value, field, reason in BAD_RECORDS:
        headers = by_value[value]
        assert (headers["featureflow.field"], headers["featureflow.reason"]) == (field, reason)
        assert headers["featureflow.topic"] == topic
    for value in late:
        assert by_value[value]["featureflow.reason"] == LATE_REASON
        assert by_value[value]["featureflow.field"] == "event_timestamp"

    assert_sessions_equal(feature_repo_copy, events_table(good))


FUTURE_SKEW_S = 3_600  # --max-future-skew's default


def _pin_batch_clock(checkpoint: Path, clock_ns: int, batches: int) -> None:
    """Record ``clock_ns`` as the driver's clock of the first ``batches`` micro-batches, as
    their first run would have (the job takes a replayed batch's clock from there)."""
    for view in ("user_txn_stats", "user_sessions"):
        clock = checkpoint / view / "featureflow-state" / "clock"
        clock.mkdir(parents=True)
        for batch in range(batches):
            (clock / f"batch-{batch}.json").write_text(json.dumps({"clock_ns": clock_ns}))


def test_poison_events_are_dead_lettered_once_and_every_feature_stays_exact(
    kafka_bootstrap: str, feature_repo_copy: Path, tmp_path: Path
) -> None:
    """Non-finite amounts and events in the future go to the dead letters with their
    reason; they neither reach a window nor become a latest row nor move the watermark."""
    topic = f"test-poison-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(kafka_bootstrap, topic, partitions=1)
    good = sample.generate(
        1200, users=20, seed=43, end_ns=END_NS, span_s=4 * 3600, out_of_order_share=0.0
    )
    clock_ms = END_NS // 10**6 + 600_000  # the driver's clock: 10 minutes after the events
    bound_ms = clock_ms + FUTURE_SKEW_S * 1000  # the newest event time still accepted

    def event(user: int, amount: str, stamp: object) -> bytes:
        return b'{"user_id": %d, "amount": %s, "event_timestamp": %s}' % (
            user, amount.encode(), json.dumps(stamp).encode())  # fmt: skip

    poison = [
        (event(1, "1e400", MS), "amount", "not a finite number"),
        (event(2, "-1e400", MS), "amount", "not a finite number"),
        (event(3, '"Infinity"', MS), "amount", "not a finite number"),
        (event(4, '"-Infinity"', MS), "amount", "not a finite number"),
        (event(5, '"NaN"', MS), "amount", "not a finite number"),
        (event(1, "7.0", "2100-01-01T00:00:00Z"), "event_timestamp", "in the future"),
        (event(6, "7.0", bound_ms + 1), "event_timestamp", "in the future"),
    ]
    at_bound = event(7, "3.0", bound_ms)  # exactly at the bound: accepted
    records = list(sample.to_json(good))
    kafka_client.produce(kafka_bootstrap, topic, records[:400])
    kafka_client.produce(kafka_bootstrap, topic, [(b"poison", value) for value, _, _ in poison])
    kafka_client.produce(kafka_bootstrap, topic, records[400:])
    kafka_client.produce(kafka_bootstrap, topic, [(b"bound", at_bound)])
    apply(feature_repo_copy, topic)
    checkpoint = tmp_path / "checkpoint"
    _pin_batch_clock(checkpoint, clock_ms * 10**6, batches=20)

    log = run_job(feature_repo_copy, kafka_bootstrap, checkpoint,
                  "--max-offsets-per-trigger", "300")  # fmt: skip

    reasons: Counter[str] = Counter()
    for m in _metrics(log):
        if m["view"] == "user_txn_stats":
            reasons.update(m["dead_letters"])  # type: ignore[arg-type]
    assert reasons == Counter(reason for _, _, reason in poison)
    letters = consume(kafka_bootstrap, f"{topic}.dlq")
    assert sorted(value for value, _ in letters) == sorted(value for value, _, _ in poison)
    by_value = dict(letters)
    for value, field, reason in poison:
        headers = by_value[value]
        assert (headers["featureflow.field"], headers["featureflow.reason"]) == (field, reason)

    accepted = sample.SampleEvents(
        user_id=np.append(good.user_id, 7), event_ns=np.append(good.event_ns, bound_ms * 10**6),
        amount=np.append(good.amount, 3.0), merchant=np.append(good.merchant, ""),
        millis_encoded=np.append(good.millis_encoded, True),
    )  # fmt: skip
    assert_online_rolling_equal(feature_repo_copy, latest_features(events_table(accepted)))
    assert_sessions_equal(feature_repo_copy, events_table(accepted))

    # A truncated state file stops the next run with a message naming it.
    state = checkpoint / "user_txn_stats" / "featureflow-state"
    truncated = sorted(state.rglob("part-*/batch-*.arrow"))
    assert truncated
    for path in truncated:
        path.write_bytes(path.read_bytes()[:100])
    on_time = [(b"k", event(user, "1.0", bound_ms - user)) for user in range(1, 21)]
    kafka_client.produce(kafka_bootstrap, topic, on_time)  # every user: every partition loads
    rerun = run(job_command(feature_repo_copy, kafka_bootstrap, checkpoint, "--available-now"))
    assert rerun.returncode == 1
    log = rerun.stdout + rerun.stderr
    assert "is truncated or unreadable" in log and "new --checkpoint" in log, log[-3000:]
    assert any(str(path) in log for path in truncated), log[-3000:]


def test_sigterm_stops_at_a_batch_boundary_and_the_restart_continues(
    kafka_bootstrap: str, feature_repo_copy: Path, tmp_path: Path
) -> None:
    events = sample.generate(
        3000, users=40, seed=43, end_ns=END_NS, span_s=4 * 3600, out_of_order_share=0.0
    )
    topic = topic_with(kafka_bootstrap, "test-term", events, partitions=1)
    apply(feature_repo_copy, topic)
    checkpoint = tmp_path / "checkpoint"
    batch = ("--max-offsets-per-trigger", "300", "--view", "user_txn_stats")
    log_path = tmp_path / "job.log"
    with log_path.open("wb") as out:
        job = subprocess.Popen(
            job_command(feature_repo_copy, kafka_bootstrap, checkpoint, *batch,
                        "--trigger", "1 second"),
            stdout=out, stderr=subprocess.STDOUT, env=env(), start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 900
            while len(_metrics(log_path.read_text(errors="replace"))) < 2:
                assert job.poll() is None, log_path.read_text(errors="replace")[-4000:]
                assert time.monotonic() < deadline, "the job made no progress"
                time.sleep(0.5)
            pid = re.search(r"driver pid (\d+)", log_path.read_text(errors="replace"))
            assert pid, "the driver logs its pid"
            os.kill(int(pid.group(1)), signal.SIGTERM)
            assert job.wait(timeout=180) == 0, log_path.read_text(errors="replace")[-4000:]
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
    log = log_path.read_text(errors="replace")
    stopped = re.search(r"stopped cleanly after micro-batch (\d+)", log)
    assert stopped, log[-4000:]
    done = [int(m["batch_id"]) for m in _metrics(log)]  # type: ignore[call-overload]
    assert done and int(stopped.group(1)) == max(done)
    assert sum(int(m["events"]) for m in _metrics(log)) < len(events)  # type: ignore[call-overload]

    run_job(feature_repo_copy, kafka_bootstrap, checkpoint, *batch)
    assert_online_rolling_equal(feature_repo_copy, latest_features(events_table(events)))


def test_job_writes_redis_when_the_repo_says_so(
    kafka_bootstrap: str, feature_repo_copy: Path, tmp_path: Path
) -> None:
    from featureflow.infra.redis_server import RedisServer

    events = sample.generate(2000, users=50, seed=47, end_ns=END_NS, span_s=3 * 3600)
    topic = topic_with(kafka_bootstrap, "test-redis", events)
    with RedisServer() as redis:
        config = feature_repo_copy / "feature_store.yaml"
        config.write_text(
            config.read_text().replace(
                "  type: sqlite\n  path: data/online_store.db\n",
                f"  type: redis\n  connection_string: {redis.connection_string}\n",
            )
        )
        assert "type: redis" in config.read_text()
        apply(feature_repo_copy, topic)
        run_job(feature_repo_copy, kafka_bootstrap, tmp_path / "checkpoint",
                "--view", "user_txn_stats")  # fmt: skip
        assert not (feature_repo_copy / "data" / "online_store.db").exists()
        assert_online_rolling_equal(feature_repo_copy, latest_features(events_table(events)))


def test_avro_source_end_to_end(
    kafka_bootstrap: str, feature_repo_copy: Path, tmp_path: Path
) -> None:
    from featureflow.events.avro import TRANSACTION_SCHEMA, to_avro

    events = sample.generate(1500, users=40, seed=53, end_ns=END_NS, span_s=3 * 3600)
    topic = topic_with(kafka_bootstrap, "test-avro", events, encode=to_avro)
    truncated = b"\x02"  # user_id 1, then nothing: not a record of the schema
    kafka_client.produce(kafka_bootstrap, topic, [(b"bad", truncated)])
    definitions = feature_repo_copy / "features.py"
    json_format = (
        "message_format=JsonFormat(\n        schema_json="
        '"user_id long, amount double, merchant string, event_timestamp string"\n    ),'
    )
    text = definitions.read_text()
    assert json_format in text
    definitions.write_text(
        text.replace(json_format, f"message_format=AvroFormat(schema_json={TRANSACTION_SCHEMA!r}),")
        .replace("from feast.data_format import JsonFormat",
                 "from feast.data_format import AvroFormat, JsonFormat")
    )  # fmt: skip
    apply(feature_repo_copy, topic)

    log = run_job(feature_repo_copy, kafka_bootstrap, tmp_path / "checkpoint",
                  "--view", "user_txn_stats")  # fmt: skip
    assert re.search(r"field 'value': not an Avro record of the source's schema", log), log[-3000:]
    assert sum(int(m["events"]) for m in _metrics(log)) == len(events)  # type: ignore[call-overload]
    assert_online_rolling_equal(feature_repo_copy, latest_features(events_table(events)))
    letters = consume(kafka_bootstrap, f"{topic}.dlq")
    assert [value for value, _ in letters] == [truncated]
