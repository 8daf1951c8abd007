"""Kill test: SIGKILL the running job at random points, restart it on the same checkpoint.

Both views of the example repo run (rolling ``user_txn_stats`` and session
``user_sessions``). The final online and offline contents must equal one uninterrupted pass
(DuckDB over the same events): the versioned window state, the per-batch
offline files and the online writer's "older never wins" rule make a
replayed micro-batch change nothing, and Spark replays every batch whose
offsets it had not committed.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from duckdb_oracle import END_NS, events_table, latest_features, per_event_features
from job_harness import (
    apply,
    assert_online_rolling_equal,
    assert_sessions_equal,
    env,
    job_command,
    run_job,
)

from featureflow.events import sample
from featureflow.infra import kafka_broker, kafka_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLS = 5
TRIGGER = ("--trigger", "1 second")
BATCH = ("--max-offsets-per-trigger", "300")


def _batches_done(log: Path) -> int:
    return len(re.findall(r"featureflow\.metrics: ", log.read_text(errors="replace")))


def test_sigkill_at_random_points_then_restart_equals_one_pass(
    kafka_bootstrap: str, feature_repo_copy: Path, tmp_path: Path
) -> None:
    topic = f"test-kill-{uuid.uuid4().hex[:10]}"
    # One Kafka partition: micro-batches then follow event time exactly, so no
    # on-time event can fall behind the watermark however the batches are cut.
    kafka_broker.create_topic(kafka_bootstrap, topic, partitions=1)
    events = sample.generate(
        6000, users=60, seed=23, end_ns=END_NS, span_s=6 * 3600, out_of_order_share=0.0
    )
    kafka_client.produce(kafka_bootstrap, topic, sample.to_json(events))
    apply(feature_repo_copy, topic)
    checkpoint = tmp_path / "checkpoint"
    rng = random.Random(31)
    kills = 0
    for attempt in range(KILLS):
        log = tmp_path / f"run-{attempt}.log"
        with log.open("wb") as out:
            job = subprocess.Popen(
                job_command(feature_repo_copy, kafka_bootstrap, checkpoint, *BATCH, *TRIGGER),
                stdout=out, stderr=subprocess.STDOUT, env=env(), start_new_session=True,
            )  # fmt: skip
            # Kill at a random moment once this run has got going: before, during or
            # between micro-batches (a batch takes a few seconds here).
            deadline = time.monotonic() + 240
            while _batches_done(log) < 1 and time.monotonic() < deadline and job.poll() is None:
                time.sleep(0.5)
            time.sleep(rng.uniform(0.0, 6.0))
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                kills += 1
            job.wait(timeout=60)
    assert kills == KILLS

    # Drain what is left, then compare with one uninterrupted pass.
    run_job(feature_repo_copy, kafka_bootstrap, checkpoint, *BATCH)

    assert_online_rolling_equal(feature_repo_copy, latest_features(events_table(events)))

    from featureflow.spark.offline_sink import read_history

    history = read_history(str(feature_repo_copy / "data" / "offline"), "user_txn_stats")
    assert history.num_rows == len(events)  # every event once: no loss, no double count
    oracle = per_event_features(events_table(events))
    got_ns = history.column("event_timestamp").cast("int64").to_numpy() * 1000
    got_order = np.lexsort((got_ns, history.column("user_id").to_numpy()))
    want_order = np.lexsort((events.event_ns, events.user_id))
    np.testing.assert_array_equal(got_ns[got_order], events.event_ns[want_order])
    for name in ("count_amount_3600s", "sum_amount_86400s", "std_amount_600s"):
        got = np.array(history.column(name).to_pylist(), dtype=float)[got_order]
        want = np.array(oracle.column(name).to_pylist(), dtype=float)[want_order]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name)
    # Sessions too: every closed session once, each user's latest session online.
    assert_sessions_equal(feature_repo_copy, events_table(events))
