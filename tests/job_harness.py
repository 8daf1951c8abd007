"""Running ``spark-submit jobs/realtime.py`` in tests, and checking what it wrote.

Shared by the integration suites (single batch, multi-batch, kill, sessions).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from duckdb_oracle import (
    FEATURE_NAMES,
    SESSION_AGGREGATES,
    SESSION_GAP_S,
    SESSION_MAX_LENGTH_S,
    sessions,
)

from featureflow.events import sample

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GAP_NS = SESSION_GAP_S * 10**9
MAX_LENGTH_NS = SESSION_MAX_LENGTH_S * 10**9  # the example repo's: the default
WATERMARK_DELAY_NS = 5 * 60 * 10**9  # the example repo's watermark_delay_threshold


def topic_with(
    bootstrap: str,
    prefix: str,
    events: sample.SampleEvents,
    *,
    partitions: int = 2,
    encode: Callable[[sample.SampleEvents], Iterable[tuple[bytes, bytes]]] = sample.to_json,
) -> str:
    """A fresh topic named ``<prefix>-<uuid>`` holding ``events`` (JSON by default)."""
    from featureflow.infra import kafka_broker, kafka_client

    topic = f"{prefix}-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(bootstrap, topic, partitions=partitions)
    kafka_client.produce(bootstrap, topic, encode(events))
    return topic


def copy_repo(tmp: Path, online_store: str | None = None) -> Path:
    """A copy of the example repo under ``tmp``; ``online_store``: the YAML body of another
    ``online_store:`` section (e.g. ``"  type: redis\n  connection_string: ...\n"``)."""
    import shutil

    repo = tmp / "feature_repo"
    shutil.copytree(REPO_ROOT / "feature_repo", repo,
                    ignore=shutil.ignore_patterns("data", "__pycache__"))  # fmt: skip
    (repo / "data").mkdir()
    if online_store is not None:
        config = repo / "feature_store.yaml"
        text = config.read_text()
        sqlite = "  type: sqlite\n  path: data/online_store.db\n"
        assert sqlite in text
        config.write_text(text.replace(sqlite, online_store))
    return repo


def sorted_history(repo: Path, view: str = "user_txn_stats") -> pa.Table:
    """The view's offline history, sorted by user, event time and micro-batch."""
    from featureflow.spark.offline_sink import read_history

    history = read_history(str(repo / "data" / "offline"), view)
    return history.sort_by([("user_id", "ascending"), ("event_timestamp", "ascending"),
                            ("batch", "ascending")])  # fmt: skip


def env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")


def run(command: list[str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=env(), check=False
    )


def consume(
    bootstrap: str, topic: str, settings: dict[str, str] | None = None
) -> list[tuple[bytes, dict[str, str]]]:
    """Every record of ``topic`` (value, headers): see :func:`consume_records`."""
    return [(value, headers) for _, value, headers in consume_records(bootstrap, topic, settings)]


def consume_records(
    bootstrap: str, topic: str, settings: dict[str, str] | None = None
) -> list[tuple[bytes | None, bytes, dict[str, str]]]:
    """Every record of ``topic`` (key, value, headers): each partition read from its start
    to the end it has now, so a test sees extra records as well as missing ones without
    waiting for them (~60 s at most); ``settings``: Kafka client settings of a secured
    broker."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    from featureflow.infra.kafka_settings import librdkafka_config

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "enable.partition.eof": True,
         "enable.auto.commit": False, **librdkafka_config(settings or {})}
    )  # fmt: skip
    received: list[tuple[bytes | None, bytes, dict[str, str]]] = []
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        assert metadata.error is None, f"topic {topic}: {metadata.error}"
        partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in metadata.partitions]
        consumer.assign(partitions)
        # an end-of-partition event per partition, also for one that is empty
        unfinished = {tp.partition for tp in partitions}
        deadline = time.monotonic() + 60
        while unfinished and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                unfinished.discard(message.partition())
            elif error is None:
                headers = {k: v if v is None else v.decode() for k, v in message.headers() or []}
                received.append((message.key(), message.value(), headers))
        assert not unfinished, f"partitions {sorted(unfinished)} of {topic} not read to the end"
    finally:
        consumer.close()
    return received


def apply(repo: Path, topic: str) -> None:
    """Point the repo copy's Kafka source at ``topic`` and apply it through the schema gate."""
    definitions = repo / "features.py"
    text = definitions.read_text()
    assert 'topic="transactions"' in text
    definitions.write_text(text.replace('topic="transactions"', f'topic="{topic}"'))
    applied = run([str(BIN / "featureflow"), "apply", "--repo", str(repo),
                   "--schemas", str(REPO_ROOT / "schemas")])  # fmt: skip
    assert applied.returncode == 0, applied.stdout + applied.stderr


def job_command(
    repo: Path, bootstrap: str, checkpoint: Path, *extra: str, master: str = "local[2]"
) -> list[str]:
    return [
        str(BIN / "spark-submit"), "--master", master, str(REPO_ROOT / "jobs" / "realtime.py"),
        "--repo", str(repo), "--schemas", str(REPO_ROOT / "schemas"), "--bootstrap", bootstrap,
        "--checkpoint", str(checkpoint), *extra,
    ]  # fmt: skip


def run_job(
    repo: Path, bootstrap: str, checkpoint: Path, *extra: str, master: str = "local[2]"
) -> str:
    """Run the job with ``--available-now`` to the end of the topic; returns its log."""
    job = run(job_command(repo, bootstrap, checkpoint, "--available-now", *extra, master=master))
    log = job.stdout + job.stderr
    assert job.returncode == 0, log[-5000:]
    assert "kernels: mojo" in log
    return log


def assert_sessions_equal(repo: Path, events: pa.Table, watermark_ns: int | None = None) -> None:
    """``user_sessions`` online and offline equal DuckDB's sessions of ``events``.

    Online: each user's latest session. Offline: every session the final
    watermark has closed (past its last event + gap, or past its first event + the
    max session length), each exactly once; ``watermark_ns`` defaults to the
    latest event time minus the delay (one Kafka partition, or partitions that
    end together).
    """
    from feast import FeatureStore

    from featureflow.spark.offline_sink import read_history

    oracle = sessions(events)
    users = oracle.column("user_id").to_numpy()
    last_ns = oracle.column("last_ns").to_numpy()
    latest = np.append(users[1:] != users[:-1], True)
    names = ["session_duration_s", *SESSION_AGGREGATES]
    online = FeatureStore(repo_path=str(repo)).get_online_features(
        features=[f"user_sessions:{name}" for name in ["session_start", *names]],
        entity_rows=[{"user_id": int(user)} for user in users[latest]],
    ).to_dict()
    want = oracle.filter(pa.array(latest))
    for name in SESSION_AGGREGATES:
        np.testing.assert_allclose(
            np.array(online[name], dtype=float), np.array(want.column(name).to_pylist(), float),
            rtol=1e-9, err_msg=name,
        )  # fmt: skip
    np.testing.assert_allclose(
        online["session_duration_s"],
        (want.column("last_ns").to_numpy() - want.column("start_ns").to_numpy()) / 1e9,
    )

    watermark = (
        int(events.column("event_ns").to_numpy().max()) - WATERMARK_DELAY_NS
        if watermark_ns is None
        else watermark_ns
    )
    start_ns = oracle.column("start_ns").to_numpy()
    closed = oracle.filter(
        pa.array((last_ns + GAP_NS < watermark) | (start_ns + MAX_LENGTH_NS < watermark))
    )
    history = read_history(str(repo / "data" / "offline"), "user_sessions")
    assert history.num_rows == closed.num_rows, "every closed session exactly once"
    got_ns = history.column("event_timestamp").cast("int64").to_numpy() * 1000
    order = np.lexsort((got_ns, history.column("user_id").to_numpy()))
    np.testing.assert_array_equal(got_ns[order], closed.column("last_ns").to_numpy())
    for name in SESSION_AGGREGATES:
        got = np.array(history.column(name).to_pylist(), dtype=float)[order]
        expected = np.array(closed.column(name).to_pylist(), dtype=float)
        assert got == pytest.approx(expected, rel=1e-9, nan_ok=True), name


def assert_online_rolling_equal(repo: Path, expected: dict[int, dict[str, float | None]]) -> None:
    """Feast's ``get_online_features`` of ``user_txn_stats`` equal ``expected`` (per user)."""
    from feast import FeatureStore

    online = FeatureStore(repo_path=str(repo)).get_online_features(
        features=[f"user_txn_stats:{name}" for name in FEATURE_NAMES],
        entity_rows=[{"user_id": int(user)} for user in expected],
    ).to_dict()
    assert online["user_id"] == list(expected)
    for row, user in enumerate(online["user_id"]):
        for name in FEATURE_NAMES:
            want, got = expected[user][name], online[name][row]
            assert (got is None) == (want is None), (user, name)
            if want is not None:
                assert got == pytest.approx(want, rel=1e-9, abs=1e-9), (user, name, got, want)
