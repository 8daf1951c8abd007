"""No skew, end to end: events through Kafka and the real stream job equal the notebook's features.

One run of ``spark-submit jobs/realtime.py`` in several micro-batches (with
out-of-order events) on a private topic and repo; then the explore loaders
read the topic and the job's offline history, ``check_no_skew`` replays the
batches and must find every value equal, and the notebook itself runs
against the same topic and history.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from duckdb_oracle import END_NS
from notebook_runner import execute, register_kernel, text_of

from featureflow import explore as ex
from featureflow.events import sample
from featureflow.infra import kafka_broker, kafka_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(command: list[str]) -> str:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    return done.stdout + done.stderr


def test_notebook_features_equal_the_stream_jobs_history(
    kafka_bootstrap: str,
    feature_repo_copy: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = f"test-explore-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(kafka_bootstrap, topic, partitions=2)
    events = sample.generate(3000, users=60, seed=21, end_ns=END_NS, span_s=4 * 3600)
    kafka_client.produce(kafka_bootstrap, topic, sample.to_json(events))
    definitions = feature_repo_copy / "features.py"
    definitions.write_text(
        definitions.read_text().replace('topic="transactions"', f'topic="{topic}"')
    )
    _run([str(BIN / "featureflow"), "apply", "--repo", str(feature_repo_copy),
          "--schemas", str(REPO_ROOT / "schemas")])  # fmt: skip
    log = _run(
        [str(BIN / "spark-submit"), "--master", "local[2]", str(REPO_ROOT / "jobs" / "realtime.py"),
         "--repo", str(feature_repo_copy), "--schemas", str(REPO_ROOT / "schemas"),
         "--bootstrap", kafka_bootstrap, "--checkpoint", str(tmp_path / "checkpoint"),
         "--available-now", "--max-offsets-per-trigger", "700"]
    )  # fmt: skip
    assert "kernels: mojo" in log

    spec = ex.view_spec(feature_repo_copy, "user_txn_stats")
    loaded = ex.from_kafka(spec, bootstrap=kafka_bootstrap, topic=topic, max_events=None)
    assert loaded.num_events == len(events)
    history = ex.history(ex.history_root(feature_repo_copy), spec)
    report = ex.check_no_skew(loaded.table, history, spec)
    assert report.ok, str(report)
    assert report.batches >= 4
    assert report.compared + report.not_accepted == len(events)

    register_kernel(tmp_path / "jupyter", monkeypatch)
    monkeypatch.setenv("FEATUREFLOW_REPO", str(feature_repo_copy))
    monkeypatch.setenv("FEATUREFLOW_EXPLORE_SOURCE", "kafka")
    monkeypatch.setenv("FEATUREFLOW_TOPIC", topic)
    monkeypatch.setenv("FEATUREFLOW_BOOTSTRAP", kafka_bootstrap)
    text = text_of(execute())
    assert f"Events from **Kafka topic '{topic}'" in text
    assert f"no skew: view 'user_txn_stats', {report.compared:,} events" in text
