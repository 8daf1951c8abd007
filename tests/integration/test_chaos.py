"""Chaos test: uneven partitions, cold keys, disorder; the job killed at random and at failpoints.

The topic has three Kafka partitions of deliberately uneven sizes, rates and
time spans (so Spark's ``maxOffsetsPerTrigger``, which advances partitions by
a share of offsets, lets their event times drift apart); 2,500 users, most of
them cold, so that many of the 16 shuffle partitions skip micro-batches; each
partition in event-time order but for displacements of up to 2 minutes; small
triggers. The job runs both example views, and is SIGKILLed three times at
random moments and once at each failpoint (:mod:`featureflow.spark.failpoints`:
mid online write, mid offline write, after the state is saved and before Spark
commits), on the SQLite and on the Redis online store; then a drain is killed in
the sessions close that ends it. After a final drain:

- no event was dead-lettered (none is late under per-partition watermarks);
- online (read through Feast's ``get_online_features``) equals DuckDB's
  features as of each user's latest event, and the sessions DuckDB computes;
- offline equals an uninterrupted run's, row for row, and DuckDB's features
  of each event over the events that had arrived by its micro-batch.

The uninterrupted run shuffles every micro-batch to the executors; the killed runs
take turns between that and the driver's pass of small batches (the default here),
so a batch killed on one path is re-run on the other.

The topic is keyed by the user as librdkafka's default partitioner places keys (CRC-32),
so the same kills also run the pass per Kafka partition (``--keyed-topic crc32``, the
Kafka partitions as the state's): it must end where the shuffled layout ends.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from duckdb_oracle import END_NS, FEATURE_NAMES, aggregates_since_frame_start, events_table
from duckdb_oracle import latest_features as latest_features_oracle
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

from featureflow.events import kafka_keys, sample
from featureflow.infra import kafka_broker, kafka_client
from featureflow.spark import failpoints

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Per Kafka partition: (events, users, span in s, end before END_NS in s).
LAYOUT = ((2400, 1500, 6 * 3600, 0), (700, 700, 2 * 3600, 0), (200, 300, 3 * 3600, 1800))
DISORDER_NS = 120 * 10**9
COUNT_UNNAMED = (
    "--max-offsets-per-trigger", "150",
    # No partition turns idle during the test, so every run closes the same sessions.
    "--idle-partition-timeout", "1h",
)  # fmt: skip
"""The last run's options: no ``--partitions``, so it must continue with the checkpoint's."""
OPTIONS = (*COUNT_UNNAMED, "--partitions", "16")
TRIGGER = ("--trigger", "1 second")
SHUFFLED = ("--driver-pass-records", "0")
"""Every micro-batch through the shuffle; by default these small ones run on the driver."""
KILLS = ("random", "mid_online_write", "random", "after_state_save", "random",
         "mid_offline_write")  # fmt: skip
"""The runs, each SIGKILLed: the failpoints on shuffled runs, the random kills between them
on the driver's pass (the drain and the last run then meet batches of both)."""
KEYED = ("--keyed-topic", kafka_keys.CRC32, "--partitions", str(len(LAYOUT)))
"""The pass per Kafka partition: the options of every run in keyed mode (``--keyed-topic``
always names the topic's partition count)."""


def _take(events: sample.SampleEvents, order: np.ndarray) -> sample.SampleEvents:
    return sample.SampleEvents(
        **{f.name: getattr(events, f.name)[order] for f in dataclasses.fields(events)}
    )


def _partitions(seed: int) -> list[sample.SampleEvents]:
    """The events of each Kafka partition, in production order (disjoint users)."""
    rng = np.random.default_rng(seed)
    # each partition's users are ids whose key (their decimal text) CRC-32 places there
    ids = np.arange(1, 3 * sum(users for _, users, _, _ in LAYOUT))
    keys = pa.array([str(user).encode() for user in ids.tolist()], pa.binary())
    placed = kafka_keys.partitions_of(keys, len(LAYOUT), kafka_keys.CRC32)
    parts = []
    for at, (count, users, span_s, before_s) in enumerate(LAYOUT):
        events = sample.generate(
            count, users=users, seed=seed + at, end_ns=END_NS - before_s * 10**9,
            span_s=span_s, out_of_order_share=0.0,
        )  # fmt: skip
        own = ids[placed == at]
        assert len(own) >= users
        events = dataclasses.replace(events, user_id=own[events.user_id - 1])
        # One event per (user, time), so that every history row has one oracle row.
        _, first = np.unique(np.stack([events.user_id, events.event_ns]), axis=1,
                             return_index=True)  # fmt: skip
        events = _take(events, np.sort(first))
        # Out of order by up to 2 minutes: sent in the order of event time + a delay.
        delay = rng.integers(0, DISORDER_NS, len(events))
        parts.append(_take(events, np.argsort(events.event_ns + delay, kind="stable")))
    return parts


@dataclasses.dataclass(frozen=True)
class ChaosTopic:
    name: str
    events: sample.SampleEvents
    """Every partition's events (their union; per-user order as produced)."""
    final_watermark_ns: int
    """Minimum over partitions of the latest event time, minus the delay."""


@pytest.fixture(scope="module")
def chaos_topic(kafka_bootstrap: str) -> ChaosTopic:
    name = f"test-chaos-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(kafka_bootstrap, name, partitions=len(LAYOUT))
    parts = _partitions(seed=71)
    for partition, events in enumerate(parts):
        kafka_client.produce(kafka_bootstrap, name, sample.to_json(events), partition=partition)
    union = _take(
        sample.SampleEvents(
            **{
                f.name: np.concatenate([getattr(p, f.name) for p in parts])
                for f in dataclasses.fields(parts[0])
            }
        ),
        np.arange(sum(len(p) for p in parts)),
    )
    watermark = min(int(p.event_ns.max()) for p in parts) - WATERMARK_DELAY_NS
    return ChaosTopic(name, union, watermark)


@pytest.fixture(scope="module")
def uninterrupted(
    chaos_topic: ChaosTopic, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> pa.Table:
    """The offline rolling history of one run without interruption (SQLite)."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    repo = copy_repo(tmp)
    apply(repo, chaos_topic.name)
    log = run_job(repo, kafka_bootstrap, tmp / "checkpoint", *OPTIONS, *SHUFFLED)
    assert _dead_letters(log) == {}
    assert {report["pass_on"] for report in _metrics(log)} == {"executors"}
    return sorted_history(repo)


def _metrics(log: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in re.findall(r"featureflow\.metrics: (\{.*\})", log)]


def _dead_letters(log: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for report in _metrics(log):
        for reason, count in report["dead_letters"].items():  # type: ignore[attr-defined]
            total[reason] = total.get(reason, 0) + count
    return total


def _kill_and_restart(
    repo: Path, bootstrap: str, checkpoint: Path, tmp: Path, options: tuple[str, ...]
) -> str:
    """Run the job once per entry of ``KILLS``, each run SIGKILLed; returns the logs.

    Every other run shuffles each micro-batch (the others run them on the driver), so
    batches killed on one path are re-run on the other."""
    rng = random.Random(37)
    logs = []
    for attempt, kill in enumerate(KILLS):
        log_path = tmp / f"run-{attempt}.log"
        run_env = env()
        if kill != "random":
            run_env[failpoints.ENV] = kill
            run_env[failpoints.ONCE_ENV] = str(tmp / f"failpoint-{attempt}")
        with log_path.open("wb") as out:
            job = subprocess.Popen(
                job_command(repo, bootstrap, checkpoint, *options, *TRIGGER,
                            *(SHUFFLED if attempt % 2 else ())),
                stdout=out, stderr=subprocess.STDOUT, env=run_env, start_new_session=True,
            )  # fmt: skip
            try:
                if kill == "random":
                    # Once this run has got going: before, during or between micro-batches.
                    deadline = time.monotonic() + 240
                    while (
                        "featureflow.metrics: " not in log_path.read_text(errors="replace")
                        and time.monotonic() < deadline
                        and job.poll() is None
                    ):
                        time.sleep(0.3)
                    time.sleep(rng.uniform(0.0, 4.0))
                    assert job.poll() is None, log_path.read_text()[-3000:]
                    os.killpg(job.pid, signal.SIGKILL)
                job.wait(timeout=300)
            finally:
                if job.poll() is None:
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()
        text = log_path.read_text(errors="replace")
        assert job.returncode == -signal.SIGKILL, (kill, text[-3000:])
        if kill != "random":  # the point wrote its marker before it killed the job
            marker = tmp / f"failpoint-{attempt}"
            assert marker.exists(), text[-3000:]
            assert marker.read_text().startswith(f"{kill}@"), marker.read_text()
        logs.append(text)
    return "\n".join(logs)


def _drain_killed_in_its_session_close(
    repo: Path, bootstrap: str, checkpoint: Path, tmp: Path, options: tuple[str, ...]
) -> str:
    """An ``--available-now`` run to the end of the topic, SIGKILLed in the sessions close
    that ends it (one partition closed, others maybe not): the next start must finish
    that close before any batch, or sessions would be lost or written twice."""
    run_env = env()
    run_env[failpoints.ENV] = "mid_session_close"
    marker = tmp / "failpoint-drain"
    run_env[failpoints.ONCE_ENV] = str(marker)
    job = subprocess.run(
        job_command(repo, bootstrap, checkpoint, "--available-now", *options),
        capture_output=True, text=True, env=run_env, start_new_session=True, timeout=600,
        check=False,
    )  # fmt: skip
    text = job.stdout + job.stderr
    assert job.returncode == -signal.SIGKILL, text[-3000:]
    assert marker.read_text().startswith("mid_session_close@"), marker.read_text()
    return text


def _arrival_oracle(events: pa.Table, history: pa.Table) -> pa.Table:
    """DuckDB: each event's features over its user's events that had arrived by the event's
    micro-batch (the ``batch`` of its history row) and lie in its frame ``[t - W, t]``;
    rows in the order of ``history``, which is sorted by user and time."""
    batches = pa.table({
        "user_id": history.column("user_id"),
        "event_us": history.column("event_timestamp").cast(pa.int64()),
        "batch": history.column("batch").cast(pa.int64()),
    })  # fmt: skip
    selects = aggregates_since_frame_start("i.event_ns", hop_s=None)
    con = duckdb.connect()
    con.register("events", events)
    con.register("batches", batches)
    return con.sql(
        f"""
        WITH arrived AS (
          SELECT ev.user_id, ev.event_ns, ev.amount, b.batch
          FROM events ev JOIN batches b
            ON b.user_id = ev.user_id AND b.event_us * 1000 = ev.event_ns
        )
        SELECT i.user_id, i.event_ns, {selects}
        FROM arrived i JOIN arrived e ON e.user_id = i.user_id AND e.batch <= i.batch
             AND e.event_ns <= i.event_ns
        GROUP BY i.user_id, i.event_ns ORDER BY i.user_id, i.event_ns
        """
    ).to_arrow_table()


@pytest.mark.parametrize(
    ("store", "layout"), [("sqlite", "shuffled"), ("redis", "shuffled"), ("redis", "keyed")]
)
def test_sigkill_at_random_and_at_every_failpoint_then_drain_equals_one_run_and_duckdb(
    store: str,
    layout: str,
    chaos_topic: ChaosTopic,
    uninterrupted: pa.Table,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    from featureflow.infra.redis_server import RedisServer

    with RedisServer() as redis:
        online = (
            None if store == "sqlite"
            else f"  type: redis\n  connection_string: {redis.connection_string}\n"
        )  # fmt: skip
        repo = copy_repo(tmp_path, online)
        apply(repo, chaos_topic.name)
        checkpoint = tmp_path / "checkpoint"
        keyed = layout == "keyed"
        options = (*COUNT_UNNAMED, *KEYED) if keyed else OPTIONS
        logs = _kill_and_restart(repo, kafka_bootstrap, checkpoint, tmp_path, options)
        logs += _drain_killed_in_its_session_close(
            repo, kafka_bootstrap, checkpoint, tmp_path, options
        )
        logs += run_job(repo, kafka_bootstrap, checkpoint, *COUNT_UNNAMED, *(KEYED * keyed))
        layouts = {path.name for path in checkpoint.rglob("partitions=*")}
        if keyed:  # each Kafka partition cut into 3 slices: 4 state partitions per core
            assert layouts == {f"partitions={len(LAYOUT) * 3}"}
        else:
            assert layouts == {"partitions=16"}, "a run without --partitions keeps the checkpoint's"

        assert _dead_letters(logs) == {}, "no event is late under per-partition watermarks"
        assert {report["pass_on"] for report in _metrics(logs)} == {"driver", "executors"}
        lags = [report["watermark_lag_s"] for report in _metrics(logs)]
        assert lags and all(set(lag) == {"0", "1", "2"} for lag in lags if lag)

        events = events_table(chaos_topic.events)
        assert_online_rolling_equal(repo, latest_features_oracle(events))
        assert_sessions_equal(repo, events, watermark_ns=chaos_topic.final_watermark_ns)

    history = sorted_history(repo)
    assert history.num_rows == len(chaos_topic.events)  # every event once
    assert history.column_names == uninterrupted.column_names
    for name in history.column_names:
        got, want = history.column(name), uninterrupted.column(name)
        if pa.types.is_floating(got.type):
            np.testing.assert_allclose(got.to_numpy(zero_copy_only=False),
                                       want.to_numpy(zero_copy_only=False),
                                       rtol=1e-12, equal_nan=True, err_msg=name)  # fmt: skip
        else:
            assert got.equals(want), name

    oracle = _arrival_oracle(events, history)
    assert oracle.num_rows == history.num_rows
    for name in FEATURE_NAMES:
        got = np.array(history.column(name).to_pylist(), dtype=float)
        want = np.array(oracle.column(name).to_pylist(), dtype=float)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True,
                                   err_msg=name)  # fmt: skip
