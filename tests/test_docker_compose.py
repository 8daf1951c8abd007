"""docker-compose.yml can't run here (no Docker engine): check it agrees with the local setup."""

from __future__ import annotations

from pathlib import Path

import pyspark
import yaml

from featureflow.infra import kafka_broker, maven

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def test_services_are_kafka_redis_spark_and_the_job() -> None:
    assert {"kafka", "redis", "spark-master", "spark-worker", "job"} <= set(SERVICES)


def test_kafka_is_kraft_on_the_local_port_and_version() -> None:
    kafka = SERVICES["kafka"]
    assert f"{kafka_broker.DEFAULT_PORT}:{kafka_broker.DEFAULT_PORT}" in kafka["ports"]
    assert kafka["image"].endswith(f":{maven.KAFKA_VERSION}")
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert (
        f"PLAINTEXT://{kafka_broker.DEFAULT_HOST}:{kafka_broker.DEFAULT_PORT}"
        in env["KAFKA_ADVERTISED_LISTENERS"]
    )


def test_spark_images_match_the_installed_pyspark() -> None:
    for name in ("spark-master", "spark-worker", "job"):
        assert SERVICES[name]["image"].split(":")[1].startswith(pyspark.__version__), name


def test_job_runs_the_repo_job_against_the_compose_broker() -> None:
    command = " ".join(SERVICES["job"]["command"].split())
    assert "jobs/realtime.py" in command
    assert "--repo feature_repo" in command
    assert "--master spark://spark-master:7077" in command
    internal = next(
        listener.split("//")[1]
        for listener in SERVICES["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"].split(",")
        if listener.startswith("INTERNAL")
    )
    assert f"--bootstrap {internal}" in command
    assert (ROOT / "jobs" / "realtime.py").is_file()


def test_topic_matches_the_feast_repo() -> None:
    assert 'topic="transactions"' in (ROOT / "feature_repo" / "features.py").read_text()
