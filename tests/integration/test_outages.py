"""Outages under a running job: Kafka stopped for 20 s, Redis restarted and paused, SQLite locked.

The job must carry on by itself (restarting its query from the checkpoint,
:mod:`featureflow.spark.supervisor`) and end with exactly what an uninterrupted
run and DuckDB compute: online (read through Feast's ``get_online_features``)
and offline (row for row, micro-batch ids included), and its log must name
each outage and its recovery.

Everything runs against a broker and a redis-server of this module's own (the
shared broker on 127.0.0.1:9092 is never touched). The topic has two Kafka
partitions of uneven sizes and time spans, 1,100 users, each partition in
event-time order (so an event's features do not depend on how the stream is
cut into micro-batches, and the uninterrupted run may read it all in one); the
outage runs read 100 (Redis) or 300 (SQLite) records a micro-batch, so the
outages land mid-stream.
Two job runs share the outages: Redis as the online store (Kafka stopped,
then Redis restarted, then Redis SIGSTOPped past its 2 s socket timeout) and
SQLite (a write lock held by another process past the 2 s lock wait).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from duckdb_oracle import END_NS, FEATURE_NAMES, events_table, latest_features, per_event_features
from job_harness import (
    WATERMARK_DELAY_NS,
    apply,
    assert_online_rolling_equal,
    assert_sessions_equal,
    copy_repo,
    env,
    job_command,
    run_job,
    sorted_history,
)
from local_processes import free_port_pair

from featureflow.events import sample
from featureflow.infra import kafka_broker, kafka_client
from featureflow.infra.redis_server import RedisServer
from featureflow.online.sqlite import LOCK_TIMEOUT_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Per Kafka partition: (events, users, span in s, end before END_NS in s).
LAYOUT = ((1100, 800, 5 * 3600, 0), (400, 300, 2 * 3600, 1200))
COMMON = ("--partitions", "8", "--idle-partition-timeout", "1h")
OPTIONS = (*COMMON, "--retry-budget", "3m", "--kafka-timeout", "5s")
REDIS_RUN = (*OPTIONS, "--max-offsets-per-trigger", "100")  # 15 batches: room for 3 outages
SQLITE_RUN = (*OPTIONS, "--max-offsets-per-trigger", "300")  # 5 batches: room for 1
TIMEOUT_S = 2  # Redis socket timeout and SQLite lock wait of the outage runs
KAFKA_DOWN_S = 20
REDIS_DOWN_S = 5
REDIS_PAUSED_S = 3 * TIMEOUT_S + 2
SQLITE_LOCKED_S = 3 * TIMEOUT_S + 2


@dataclasses.dataclass(frozen=True)
class Topic:
    name: str
    bootstrap: str
    broker: kafka_broker.BrokerConfig
    events: sample.SampleEvents
    final_watermark_ns: int


def _take(events: sample.SampleEvents, keep: np.ndarray) -> sample.SampleEvents:
    return sample.SampleEvents(
        **{f.name: getattr(events, f.name)[keep] for f in dataclasses.fields(events)}
    )


def _partitions() -> list[sample.SampleEvents]:
    """Each partition's events in event-time order (disjoint users, one event per user and
    time so every history row has one oracle row)."""
    parts, first_user = [], 0
    for at, (count, users, span_s, before_s) in enumerate(LAYOUT):
        events = sample.generate(
            count, users=users, seed=91 + at, end_ns=END_NS - before_s * 10**9, span_s=span_s,
            out_of_order_share=0.0,
        )  # fmt: skip
        events = dataclasses.replace(events, user_id=events.user_id + first_user)
        first_user += users
        _, first = np.unique(np.stack([events.user_id, events.event_ns]), axis=1,
                             return_index=True)  # fmt: skip
        events = _take(events, np.sort(first))
        parts.append(_take(events, np.argsort(events.event_ns, kind="stable")))
    return parts


@pytest.fixture(scope="module")
def topic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topic]:
    """A broker of this module's own (it is stopped and restarted), with the topic."""
    broker = kafka_broker.BrokerConfig(
        port=free_port_pair(), directory=tmp_path_factory.mktemp("kafka"), heap="384m"
    )
    bootstrap = kafka_broker.start(broker)
    try:
        name = f"test-outages-{uuid.uuid4().hex[:10]}"
        kafka_broker.create_topic(bootstrap, name, partitions=len(LAYOUT))
        parts = _partitions()
        for partition, events in enumerate(parts):
            kafka_client.produce(bootstrap, name, sample.to_json(events), partition=partition)
        union = sample.SampleEvents(
            **{
                f.name: np.concatenate([getattr(p, f.name) for p in parts])
                for f in dataclasses.fields(parts[0])
            }
        )
        watermark = min(int(p.event_ns.max()) for p in parts) - WATERMARK_DELAY_NS
        yield Topic(name, bootstrap, broker, union, watermark)
    finally:
        kafka_broker.stop(broker)


def _assert_equals_oracle(repo: Path, topic: Topic) -> None:
    """Online (through Feast) and offline features equal DuckDB's."""
    events = events_table(topic.events)
    assert_online_rolling_equal(repo, latest_features(events))
    assert_sessions_equal(repo, events, watermark_ns=topic.final_watermark_ns)
    history = sorted_history(repo)
    assert history.num_rows == len(topic.events), "every event exactly once"
    order = np.lexsort((topic.events.event_ns, topic.events.user_id))
    got_ns = history.column("event_timestamp").cast("int64").to_numpy() * 1000
    np.testing.assert_array_equal(got_ns, topic.events.event_ns[order])
    oracle = per_event_features(events)
    for name in FEATURE_NAMES:
        got = np.array(history.column(name).to_pylist(), dtype=float)
        want = np.array(oracle.column(name).to_pylist(), dtype=float)[order]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True,
                                   err_msg=name)  # fmt: skip


@pytest.fixture(scope="module")
def uninterrupted(topic: Topic, tmp_path_factory: pytest.TempPathFactory) -> dict[str, pa.Table]:
    """The offline histories of one run without outages (SQLite), checked against DuckDB."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    repo = copy_repo(tmp)
    apply(repo, topic.name)
    log = run_job(repo, topic.bootstrap, tmp / "checkpoint", *COMMON)
    assert "outage:" not in log
    _assert_equals_oracle(repo, topic)
    return {view: sorted_history(repo, view) for view in ("user_txn_stats", "user_sessions")}


def _assert_equals_uninterrupted(repo: Path, uninterrupted: dict[str, pa.Table]) -> None:
    """Offline histories equal, row for row (but for the micro-batch ids)."""
    for view, want in uninterrupted.items():
        got = sorted_history(repo, view)
        assert got.column_names == want.column_names, view
        assert got.num_rows == want.num_rows, view
        for name in got.column_names:
            if name == "batch":
                continue
            a, b = got.column(name), want.column(name)
            if pa.types.is_floating(a.type):
                np.testing.assert_allclose(a.to_numpy(zero_copy_only=False),
                                           b.to_numpy(zero_copy_only=False), rtol=1e-12,
                                           equal_nan=True, err_msg=f"{view}.{name}")  # fmt: skip
            else:
                assert a.equals(b), (view, name)


class RunningJob:
    """The job as a subprocess writing its log to a file; waits on its log lines."""

    def __init__(self, command: list[str], log_path: Path, extra_env: dict[str, str]) -> None:
        self.log_path = log_path
        self._out = log_path.open("wb")
        self.process = subprocess.Popen(
            command, stdout=self._out, stderr=subprocess.STDOUT,
            env={**env(), **extra_env}, start_new_session=True,
        )  # fmt: skip

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def batches(self) -> int:
        """Micro-batches of ``user_txn_stats`` the job completed so far."""
        return len(re.findall(r"view user_txn_stats batch \d+:", self.log))

    def wait_for_batches(self, count: int, timeout_s: float = 240) -> float:
        """Wait until ``count`` batches are done; returns when (monotonic s)."""
        deadline = time.monotonic() + timeout_s
        while self.batches() < count:
            assert self.process.poll() is None, f"the job ended early:\n{self.log[-4000:]}"
            assert time.monotonic() < deadline, f"no batch {count}:\n{self.log[-4000:]}"
            time.sleep(0.2)
        return time.monotonic()

    def finish(self, timeout_s: float = 300) -> str:
        try:
            self.process.wait(timeout=timeout_s)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            self._out.close()
        log = self.log
        assert self.process.returncode == 0, log[-5000:]
        return log


def _outage(
    run: RunningJob, name: str, cause: Callable[[], object], end: Callable[[], object]
) -> dict[str, float]:
    """Once the job has run one more batch, cause an outage and end it; times the
    outage and the recovery (seconds from its end to the next completed batch)."""
    run.wait_for_batches(run.batches() + 1)
    started = time.monotonic()
    cause()
    end()
    ended = time.monotonic()
    back = run.wait_for_batches(run.batches() + 1)
    timing = {"outage_s": round(ended - started, 1), "recovered_after_s": round(back - ended, 1)}
    print(f"outage {name}: {timing}", file=sys.stderr)
    return timing


def test_kafka_stopped_redis_restarted_and_paused_the_job_carries_on(
    topic: Topic, uninterrupted: dict[str, pa.Table], tmp_path: Path
) -> None:
    with RedisServer() as redis:
        online = (
            f"  type: redis\n  connection_string: {redis.connection_string},"
            f"socket_timeout={TIMEOUT_S},socket_connect_timeout={TIMEOUT_S}\n"
        )
        repo = copy_repo(tmp_path, online)
        apply(repo, topic.name)
        run = RunningJob(
            job_command(repo, topic.bootstrap, tmp_path / "checkpoint", "--available-now",
                        *REDIS_RUN), tmp_path / "job.log", {})  # fmt: skip
        try:
            kafka = _outage(
                run, "kafka", lambda: kafka_broker.stop(topic.broker),
                lambda: (time.sleep(KAFKA_DOWN_S), kafka_broker.start(topic.broker)),
            )  # fmt: skip
            _outage(run, "redis restart", lambda: redis.restart(REDIS_DOWN_S), lambda: None)
            _outage(
                run, "redis paused", lambda: os.kill(redis.pid, signal.SIGSTOP),
                lambda: (time.sleep(REDIS_PAUSED_S), os.kill(redis.pid, signal.SIGCONT)),
            )  # fmt: skip
            log = run.finish()
        finally:
            os.kill(redis.pid, signal.SIGCONT)
        assert kafka["outage_s"] >= KAFKA_DOWN_S
        outages = re.findall(r"outage: (\w+) unavailable, query \S+ failed: ([^;]*);", log)
        services = [service for service, _ in outages]
        assert "Kafka" in services, log[-5000:]
        redis_causes = [what for service, what in outages if service == "Redis"]
        assert any(re.search(r"[Tt]imeout|timed out", what) for what in redis_causes), outages
        assert any(re.search(r"[Cc]onnection|closed", what) for what in redis_causes), outages
        recovered = re.findall(r"recovered: query \S+ carries on after the (\w+) outage", log)
        assert "Kafka" in recovered and recovered.count("Redis") >= 2, recovered
        _assert_equals_oracle(repo, topic)
    _assert_equals_uninterrupted(repo, uninterrupted)


HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


def test_sqlite_locked_by_another_process_the_job_carries_on(
    topic: Topic, uninterrupted: dict[str, pa.Table], tmp_path: Path
) -> None:
    repo = copy_repo(tmp_path)
    apply(repo, topic.name)
    run = RunningJob(
        job_command(repo, topic.bootstrap, tmp_path / "checkpoint", "--available-now", *SQLITE_RUN),
        tmp_path / "job.log", {LOCK_TIMEOUT_ENV: str(TIMEOUT_S)},
    )  # fmt: skip
    holder: list[subprocess.Popen[str]] = []

    def lock() -> None:
        process = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(repo / "data" / "online_store.db"),
             str(SQLITE_LOCKED_S)], stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdout is not None and process.stdout.readline().strip() == "locked"
        holder.append(process)

    try:
        _outage(run, "sqlite locked", lock, lambda: holder[0].wait(timeout=60))
        log = run.finish()
    finally:
        for process in holder:
            process.kill()
    outages = re.findall(r"outage: (\w+) unavailable, query \S+ failed: ([^;]*);", log)
    assert [service for service, _ in outages] and {s for s, _ in outages} == {"SQLite"}, log
    assert all("locked" in what for _, what in outages), outages
    assert "recovered: query" in log
    _assert_equals_oracle(repo, topic)
    _assert_equals_uninterrupted(repo, uninterrupted)
