"""Soak: the real job on a live producer for 300+ micro-batches stays flat.

A producer thread writes to a topic of its own (two partitions, on the shared
broker) at a steady wall-clock rate (~45 events/s) while the job (both example
views, short trigger) runs. Event time is compressed 880x against wall time
(55-110 h of event time in 3.75-7.5 min), so the soak covers at least twice the 24 h
rolling window and the 24 h maximum session length. One entity sends an event
every 3 minutes of event time throughout: it never pauses for the 30 minute gap,
so only the maximum session length closes its sessions. The producer stops once
``MIN_BATCHES`` micro-batches are done and half of ``CAP_S`` has passed
(or at ``CAP_S``, when the machine is too slow: then the batch count fails).

Asserted, comparing the last third of the micro-batches (or RSS samples, or
events sent) with the first third, after the cold first micro-batch:
- the state rows of each view (``state_rows`` of the ``featureflow.metrics``
  lines) and the RSS of the job's Python workers (``/proc``) level off: the last
  third's largest value is at most ``LEVEL_BOUND`` times the first third's. For
  state rows the middle third stands in for the first: the first third covers
  the first ~18-22 h of event time, while the 24 h window and the 24 h maximum
  session length are still filling, so its state is below the plateau by design;
- freshness p99 of the last third's events is within 1.5x of the first third's.
  Event times are compressed, so freshness is measured in wall time: from the
  moment the producer sent an event to the moment the job wrote its batch's
  offline history file (written right after the online rows);
- the final online and offline features equal DuckDB's (the oracle applies the
  maximum session length on its own).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from duckdb_oracle import events_table, latest_features
from job_harness import (
    WATERMARK_DELAY_NS,
    apply,
    assert_online_rolling_equal,
    assert_sessions_equal,
    env,
    job_command,
)

from featureflow.events import sample
from featureflow.infra import kafka_broker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAP_S = float(os.environ.get("FEATUREFLOW_SOAK_S", "450"))
"""Wall seconds the producer may run at most (FEATUREFLOW_SOAK_S to change it while
developing): the events are laid out over this time, ``EVENT_SPAN_NS`` of event time."""
MIN_PRODUCE_S = CAP_S / 2
"""The producer stops after this, once ``MIN_BATCHES`` micro-batches are done (55 h of
event time: more than 2 rolling windows and 2 maximum session lengths). 300 batches in
CAP_S need at most 1.5 s a batch."""
EVENT_SPAN_NS = 110 * 3600 * 10**9  # event time over CAP_S: compressed 880x
BACKGROUND_EVENTS = 13_750  # 60 users, one event every ~29 min of event time each
NEVER_IDLE = 1_000_000  # the entity with an event every 3 minutes of event time
NEVER_IDLE_STEP_NS = 3 * 60 * 10**9
MIN_BATCHES = 300
VIEWS = ("user_txn_stats", "user_sessions")
LEVEL_BOUND = 1.25
"""Last third's largest state rows / worker RSS over the first third's largest."""
FRESHNESS_BOUND = 1.5
TRIGGER = "200 milliseconds"


def _events(end_ns: int) -> sample.SampleEvents:
    """The background users (sample events, in time order) and the never-idle entity,
    merged in event-time order; times are whole milliseconds (what JSON carries)."""
    background = sample.generate(
        BACKGROUND_EVENTS, users=60, seed=16, end_ns=end_ns, span_s=EVENT_SPAN_NS / 1e9,
        out_of_order_share=0.0,
    )  # fmt: skip
    rng = np.random.default_rng(16)
    steps = np.arange(EVENT_SPAN_NS // NEVER_IDLE_STEP_NS, dtype=np.int64)
    jitter = rng.integers(-30_000, 30_000, len(steps)) * 1_000_000  # ±30 s, whole ms
    busy_ns = end_ns - EVENT_SPAN_NS + steps * NEVER_IDLE_STEP_NS + jitter
    n = len(busy_ns)
    event_ns = np.concatenate([background.event_ns // 1_000_000 * 1_000_000, busy_ns])
    order = np.argsort(event_ns, kind="stable")
    return sample.SampleEvents(
        user_id=np.concatenate([background.user_id, np.full(n, NEVER_IDLE)])[order],
        event_ns=event_ns[order],
        amount=np.concatenate([background.amount, rng.lognormal(3.0, 1.0, n)])[order],
        merchant=np.concatenate([background.merchant, np.full(n, "coffee", dtype=object)])[order],
        millis_encoded=np.ones(len(order), dtype=bool),
    )


class Producer(threading.Thread):
    """Sends ``events`` at a steady wall-clock pace (event time mapped linearly onto
    ``PRODUCE_S``), user ``u`` to partition ``u % 2``; records each send's wall time."""

    def __init__(self, bootstrap: str, topic: str, events: sample.SampleEvents) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.events = bootstrap, topic, events
        self.sent_at_ns = np.zeros(len(events), dtype=np.int64)
        self.sent = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        try:
            producer = KafkaProducer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
            first = int(self.events.event_ns[0])
            due_s = (self.events.event_ns - first) / EVENT_SPAN_NS * CAP_S
            started = time.monotonic()
            records = sample.to_json(self.events)
            for i, ((key, value), user) in enumerate(
                zip(records, self.events.user_id.tolist(), strict=True)
            ):
                while (wait := started + due_s[i] - time.monotonic()) > 0:
                    producer.poll(min(wait, 0.05))  # serves delivery reports meanwhile
                if self.stop.is_set():
                    break
                producer.produce(self.topic, value=value, key=key, partition=user % 2)
                self.sent_at_ns[i] = time.time_ns()
                self.sent = i + 1
                producer.poll(0)
            assert producer.flush(60) == 0, "records not acknowledged"
        except BaseException as error:  # surfaced by the test
            self.error = error


def _session_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[3])  # field 6: session id


def python_workers_rss(session: int) -> tuple[int, int]:
    """(bytes of RSS summed, how many) of the pyspark daemon and worker processes in
    the process session ``session`` (the job's)."""
    total = count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or _session_of(int(entry.name)) != session:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if b"pyspark" not in cmdline or b"java" in cmdline.split(b"\0", 1)[0]:
            continue
        rss = re.search(r"VmRSS:\s+(\d+) kB", status)
        if rss:
            total += int(rss.group(1)) * 1024
            count += 1
    return total, count


def _metrics(log: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in re.findall(r"featureflow\.metrics: (\{.*\})", log)]


def _thirds(values: list[float]) -> tuple[list[float], list[float]]:
    third = len(values) // 3
    return values[:third], values[-third:]


def _middle_and_last_thirds(values: list[float]) -> tuple[list[float], list[float]]:
    third = len(values) // 3
    return values[third : 2 * third], values[-third:]


def _freshness_s(offline: Path, events: sample.SampleEvents, sent_at_ns: np.ndarray) -> np.ndarray:
    """Per event (in send order): its batch's offline file's mtime minus its send time, s."""
    written = np.zeros(len(events), dtype=np.int64)
    position: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(events.user_id.tolist(), events.event_ns.tolist(), strict=True)):
        position.setdefault(key, []).append(i)
    for path in (offline / "user_txn_stats").glob("batch=*/part-*.parquet"):
        table = pq.read_table(path, columns=["user_id", "event_timestamp"])
        mtime_ns = path.stat().st_mtime_ns
        users = table.column("user_id").to_pylist()
        stamps = (table.column("event_timestamp").cast(pa.int64()).to_numpy() * 1_000).tolist()
        for user, ns in zip(users, stamps, strict=True):
            for at in position[(user, ns)]:
                written[at] = mtime_ns if not written[at] else min(written[at], mtime_ns)
    assert np.all(written > 0), "every event's features reached the offline history"
    return np.asarray((written - sent_at_ns) / 1e9)


def test_soak_state_memory_and_freshness_level_off(
    kafka_bootstrap: str, feature_repo_copy: Path, tmp_path: Path
) -> None:
    end_ns = (time.time_ns() // 1_000_000 - 60_000) * 1_000_000  # a minute ago, whole ms
    events = _events(end_ns)
    topic = f"test-soak-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(kafka_bootstrap, topic, partitions=2)
    apply(feature_repo_copy, topic)
    offline = feature_repo_copy / "data" / "offline"  # the job's default
    log_path = tmp_path / "job.log"
    command = job_command(
        feature_repo_copy, kafka_bootstrap, tmp_path / "checkpoint", "--trigger", TRIGGER,
        "--partitions", "2",
    )  # fmt: skip
    producer = Producer(kafka_bootstrap, topic, events)
    rss: list[tuple[int, int]] = []  # (bytes, workers), sampled every second once warm
    with log_path.open("wb") as out:
        job = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env(), start_new_session=True
        )
        try:
            deadline = time.monotonic() + 180
            while "driver pid" not in log_path.read_text(errors="replace"):
                assert job.poll() is None, log_path.read_text(errors="replace")[-4000:]
                assert time.monotonic() < deadline, "the job did not start"
                time.sleep(0.5)
            producer.start()
            started = time.monotonic()
            warm_ns = None  # when the first micro-batch (cold JVM and workers) was done
            while producer.is_alive():
                assert job.poll() is None, log_path.read_text(errors="replace")[-4000:]
                done = len(_done(log_path, VIEWS[-1]))
                if done and warm_ns is None:
                    warm_ns = time.time_ns()
                if warm_ns is not None:
                    rss.append(python_workers_rss(job.pid))
                if done >= MIN_BATCHES and time.monotonic() - started >= MIN_PRODUCE_S:
                    producer.stop.set()
                time.sleep(1.0)
            produced_s = time.monotonic() - started
            assert producer.error is None, producer.error
            # Drain: every record read by both views, then a clean stop.
            deadline = time.monotonic() + 120
            while any(
                sum(int(m["records"]) for m in _done(log_path, view)) < producer.sent  # type: ignore[call-overload]
                for view in VIEWS
            ):
                assert job.poll() is None, log_path.read_text(errors="replace")[-4000:]
                assert time.monotonic() < deadline, "the job did not catch up"
                time.sleep(0.5)
            pid = re.search(r"driver pid (\d+)", log_path.read_text(errors="replace"))
            assert pid, "the driver logs its pid"
            os.kill(int(pid.group(1)), signal.SIGTERM)
            assert job.wait(timeout=120) == 0, log_path.read_text(errors="replace")[-4000:]
        finally:
            producer.stop.set()
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)

    log = log_path.read_text(errors="replace")
    assert "stopped cleanly" in log
    sent = _first(events, producer.sent)
    table = events_table(sent)
    assert_online_rolling_equal(feature_repo_copy, latest_features(table))
    # Each partition's watermark: its largest event time minus the delay; the job's: the least.
    partition_max = [int(sent.event_ns[sent.user_id % 2 == p].max()) for p in (0, 1)]
    assert_sessions_equal(
        feature_repo_copy, table, watermark_ns=min(partition_max) - WATERMARK_DELAY_NS
    )

    reports = {view: _done(log_path, view)[1:] for view in VIEWS}  # after the cold first
    batches = len(reports[VIEWS[0]]) + 1
    summary: dict[str, object] = {
        "batches": batches,
        "batches_per_min": round(batches / produced_s * 60, 1),
        "produced_s": round(produced_s, 1),
        "events": producer.sent,
        "event_hours": round(float(sent.event_ns[-1] - sent.event_ns[0]) / 3.6e12, 1),
    }
    levels: dict[str, tuple[float, float]] = {}
    for view, view_reports in reports.items():
        assert not any(m["dead_letters"] for m in view_reports), view
        first, last = _middle_and_last_thirds(
            [float(m["state_rows"]) for m in view_reports]  # type: ignore[arg-type]
        )
        levels[f"{view}_state_rows"] = (max(first), max(last))
    first_rss, last_rss = _thirds([float(r) / 2**20 for r, workers in rss if workers])
    levels["worker_rss_mib"] = (round(max(first_rss), 1), round(max(last_rss), 1))
    summary.update(levels)
    summary["workers"] = max(workers for _, workers in rss)
    assert warm_ns is not None
    freshness = _freshness_s(offline, sent, producer.sent_at_ns[: producer.sent])
    first_f, last_f = _thirds(freshness[producer.sent_at_ns[: producer.sent] > warm_ns].tolist())
    p99 = (round(float(np.percentile(first_f, 99)), 3), round(float(np.percentile(last_f, 99)), 3))
    summary["freshness_p99_s"] = p99
    print("soak:", json.dumps(summary))  # the measurements, for the record
    assert batches >= MIN_BATCHES, summary
    for name, (first_max, last_max) in levels.items():
        assert last_max <= LEVEL_BOUND * first_max, (name, summary)
    assert p99[1] <= FRESHNESS_BOUND * p99[0], summary


def _first(events: sample.SampleEvents, n: int) -> sample.SampleEvents:
    """The first ``n`` events (the ones the producer sent)."""
    return sample.SampleEvents(
        events.user_id[:n], events.event_ns[:n], events.amount[:n], events.merchant[:n],
        events.millis_encoded[:n],
    )  # fmt: skip


def _done(log_path: Path, view: str) -> list[dict[str, object]]:
    """The ``featureflow.metrics`` reports of ``view`` so far, one per micro-batch."""
    return [m for m in _metrics(log_path.read_text(errors="replace")) if m["view"] == view]
