"""One job per checkpoint, on the real job: a second is refused, a restart after SIGKILL is not.

Then what the job wrote (window state, Spark's checkpoint, offline Parquet,
the SQLite online store) is readable by its owner only.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from duckdb_oracle import END_NS, events_table, latest_features
from job_harness import apply, assert_online_rolling_equal, env, job_command, run, run_job

from featureflow.events import sample
from featureflow.infra import kafka_client
from featureflow.spark.checkpoint_lock import LOCK_NAME, LockHolder

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROLLING_ONLY = ("--view", "user_txn_stats")
SLOW_BATCHES = ("--max-offsets-per-trigger", "400", "--trigger", "1 second")


def _wait_for(predicate: Callable[[], bool], what: str, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    pytest.fail(f"{what} within {timeout_s} s; the job's log ends:\n{log.read_text()[-3000:]}")


def test_a_second_job_is_refused_and_a_restart_after_sigkill_is_not(
    kafka_bootstrap: str, topic: str, feature_repo_copy: Path, tmp_path: Path
) -> None:
    events = sample.generate(
        3000, users=60, seed=5, end_ns=END_NS, span_s=3 * 3600, out_of_order_share=0.0
    )  # none later than the watermark in any micro-batch
    kafka_client.produce(kafka_bootstrap, topic, sample.to_json(events))
    apply(feature_repo_copy, topic)
    checkpoint = tmp_path / "checkpoint"
    phases = {"start": time.monotonic()}

    first_log = tmp_path / "first.log"
    with first_log.open("w") as out:
        first = subprocess.Popen(
            job_command(feature_repo_copy, kafka_bootstrap, checkpoint, *ROLLING_ONLY,
                        *SLOW_BATCHES),
            stdout=out, stderr=subprocess.STDOUT, env=env(), start_new_session=True,
        )  # fmt: skip
    try:
        lock_file = checkpoint / LOCK_NAME
        _wait_for(lambda: "featureflow.metrics:" in first_log.read_text(),
                  "the first job ran no micro-batch", first_log)  # fmt: skip
        holder = LockHolder.from_bytes(lock_file.read_bytes())
        phases["first batch"] = time.monotonic()

        second = run(job_command(feature_repo_copy, kafka_bootstrap, checkpoint,
                                 "--available-now", *ROLLING_ONLY), timeout=300)  # fmt: skip
        refusal = second.stdout + second.stderr
        assert second.returncode == 75, refusal[-3000:]
        assert re.search(
            rf"the checkpoint {re.escape(str(checkpoint))} is in use by another job: "
            rf"pid {holder.pid} on host {re.escape(holder.host)}, "
            rf"started {re.escape(holder.started_at)} \(heartbeat \d+ s ago\), "
            rf"command: \S*realtime\.py --repo {re.escape(str(feature_repo_copy))}",
            refusal,
        ), refusal[-3000:]
        assert "SparkContext" not in refusal  # refused before Spark started
        phases["refused"] = time.monotonic()
        assert first.poll() is None, "the first job runs on"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert lock_file.exists(), "SIGKILL left the lock behind"

    phases["killed"] = time.monotonic()
    log = run_job(feature_repo_copy, kafka_bootstrap, checkpoint, *ROLLING_ONLY)
    assert re.search(rf"taking over the checkpoint .* \(its pid {holder.pid} is gone\)", log), (
        log[-3000:]
    )
    assert not lock_file.exists(), "a clean end releases the lock"
    assert_online_rolling_equal(feature_repo_copy, latest_features(events_table(events)))
    phases["restart drained"] = time.monotonic()
    names = list(phases)
    print({b: round(phases[b] - phases[a], 1) for a, b in itertools.pairwise(names)})

    # Owner-only: everything the job created, and the online store it wrote.
    written = [
        path for root in (checkpoint, feature_repo_copy / "data" / "offline")
        for path in (root, *root.rglob("*"))
    ]  # fmt: skip
    assert len(written) > 20
    loose = {
        str(path): oct(stat.S_IMODE(path.stat().st_mode))
        for path in written
        if stat.S_IMODE(path.stat().st_mode) & 0o077
    }
    assert not loose, loose
    online = feature_repo_copy / "data" / "online_store.db"
    assert stat.S_IMODE(online.stat().st_mode) == 0o600
