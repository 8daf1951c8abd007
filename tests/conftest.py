"""Fixtures shared by the whole suite: the real Kafka broker and a local Spark session.

Both are started once per test session and only when a test asks for them.
The broker is reused if one already serves on 127.0.0.1:9092 (e.g. after
``featureflow kafka up``) and stopped at the end only if the suite started it.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Spark's Python workers must be this interpreter (the one with featureflow installed).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# The suite's Spark JVMs (spark-submit jobs, the in-process session) live for seconds to a few
# minutes over small topics: HotSpot's C2 compiler costs them more CPU than its code gives
# back. With C1 alone a job over 2,000 events took 20 CPU-s instead of 30, and four
# integration tests 184 s instead of 224 s on 2 cores (README, *Development*). Only the JIT tier
# changes, not what Spark computes; a deployment keeps the JVM's default.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address of a real single-node Kafka broker (KRaft) on loopback."""
    from featureflow.infra import kafka_broker

    already_running = kafka_broker.running_pid(kafka_broker.BrokerConfig()) is not None
    bootstrap = kafka_broker.start()
    yield bootstrap
    if not already_running:
        kafka_broker.stop()


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    """A fresh, empty topic (2 partitions) of a unique name."""
    from featureflow.infra import kafka_broker

    name = f"test-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(kafka_bootstrap, name, partitions=2)
    return name


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """A local[2] SparkSession that can read Kafka (shared by the session's tests)."""
    from featureflow.spark.session import build_session

    session = build_session("featureflow-tests", master="local[2]", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def feature_repo_copy(tmp_path: Path) -> Path:
    """A private copy of the example Feast repo (its own registry and online store)."""
    target = tmp_path / "feature_repo"
    shutil.copytree(
        REPO_ROOT / "feature_repo", target, ignore=shutil.ignore_patterns("data", "__pycache__")
    )
    (target / "data").mkdir()
    return target
