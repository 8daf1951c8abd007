"""The `featureflow` command as a user runs it (a real subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from featureflow.infra import kafka_client

FEATUREFLOW = str(Path(sys.executable).parent / "featureflow")


def _featureflow(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FEATUREFLOW, *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env},
        check=False,
    )


def test_help_lists_every_command() -> None:
    result = _featureflow("--help")
    assert result.returncode == 0
    for command in ("doctor", "kafka", "jars", "produce", "online", "validate", "apply", "schema"):
        assert command in result.stdout


def test_doctor_says_mojo_after_setup() -> None:
    result = _featureflow("doctor")
    assert result.returncode == 0, result.stderr
    assert "kernel backend : mojo" in result.stdout
    assert "kernels.so" in result.stdout
    assert "pyspark" in result.stdout


def test_doctor_says_why_the_numpy_fallback_runs() -> None:
    result = _featureflow("doctor", FEATUREFLOW_BACKEND="numpy")
    assert result.returncode == 0, result.stderr
    assert "kernel backend : numpy" in result.stdout
    assert "FEATUREFLOW_BACKEND" in result.stdout


def test_backend_one_liner_from_the_issue() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import featureflow.ops as o; print(o.backend())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "mojo"


@pytest.mark.integration
def test_produce_writes_the_requested_events(kafka_bootstrap: str, topic: str) -> None:
    result = _featureflow(
        "produce",
        "--topic",
        topic,
        "--events",
        "500",
        "--users",
        "20",
        "--bootstrap",
        kafka_bootstrap,
    )
    assert result.returncode == 0, result.stderr
    assert "produced 500 json events" in result.stdout
    assert sum(kafka_client.end_offsets(kafka_bootstrap, topic).values()) == 500
    again = _featureflow(
        "produce", "--topic", topic, "--events", "7", "--fresh", "--bootstrap", kafka_bootstrap
    )
    assert again.returncode == 0, again.stderr
    assert sum(kafka_client.end_offsets(kafka_bootstrap, topic).values()) == 7


@pytest.mark.integration
def test_kafka_status_reports_the_running_broker(kafka_bootstrap: str) -> None:
    result = _featureflow("kafka", "status")
    assert result.returncode == 0
    assert f"running on {kafka_bootstrap}" in result.stdout


def test_errors_are_one_line_and_exit_non_zero(tmp_path: Path) -> None:
    result = _featureflow("online", "show", "--repo", str(tmp_path), "--view", "v", "--keys", "1")
    assert result.returncode == 1
    assert "is not a Feast repo" in result.stderr
    assert "Traceback" not in result.stderr
