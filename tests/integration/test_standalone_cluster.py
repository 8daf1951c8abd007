"""The same job, unchanged, on a Spark standalone cluster (``--master spark://…``).

A real standalone master and worker (Spark's own ``Master``/``Worker`` classes
from the installed pyspark) run on loopback; the executors are separate JVMs
with their own Python workers, so nothing the driver process set up (the
connector jars it loaded, the kernels it imported) reaches them for free.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from duckdb_oracle import END_NS, events_table, latest_features
from job_harness import BIN, apply, assert_online_rolling_equal, env, run_job, topic_with

from featureflow.events import sample

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _master_state(ui: str) -> dict[str, list[dict[str, str]]]:
    with urllib.request.urlopen(f"{ui}/json/", timeout=2) as response:
        state: dict[str, list[dict[str, str]]] = json.load(response)
    return state


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(master URL, master web UI URL) of a one-worker standalone cluster (2 cores)."""
    port, ui_port, worker_ui = _free_port(), _free_port(), _free_port()
    logs = tmp_path_factory.mktemp("standalone")
    spark_class = str(BIN / "spark-class")
    processes = []
    with (logs / "master.log").open("wb") as master_log, (logs / "worker.log").open("wb") as wlog:
        processes.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(ui_port)],
            stdout=master_log, stderr=subprocess.STDOUT, env=env(),
        ))  # fmt: skip
        url = f"spark://127.0.0.1:{port}"
        processes.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
             "--cores", "2", "--memory", "2g", "--webui-port", str(worker_ui),
             "--work-dir", str(logs / "work")],
            stdout=wlog, stderr=subprocess.STDOUT, env=env(),
        ))  # fmt: skip
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    state = _master_state(f"http://127.0.0.1:{ui_port}")
                    if any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, (logs / "worker.log").read_text()[-3000:]
                time.sleep(1)
            yield url, f"http://127.0.0.1:{ui_port}"
        finally:
            for process in reversed(processes):
                process.terminate()
                process.wait(timeout=60)


def test_job_runs_unchanged_on_a_standalone_cluster(
    standalone_master: tuple[str, str], kafka_bootstrap: str, feature_repo_copy: Path,
    tmp_path: Path,
) -> None:
    master, ui = standalone_master
    events = sample.generate(1500, users=30, seed=59, end_ns=END_NS, span_s=2 * 3600)
    topic = topic_with(kafka_bootstrap, "test-cluster", events)
    apply(feature_repo_copy, topic)
    log = run_job(feature_repo_copy, kafka_bootstrap, tmp_path / "checkpoint",
                  "--view", "user_txn_stats", master=master)  # fmt: skip
    assert "kernels: mojo" in log
    # The job ran as an application of the cluster, on its executors.
    apps = _master_state(ui).get("completedapps", []) + _master_state(ui).get("activeapps", [])
    assert any(app.get("name") == "featureflow-realtime" for app in apps), apps
    assert_online_rolling_equal(feature_repo_copy, latest_features(events_table(events)))
