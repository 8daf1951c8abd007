"""Jar bundles fetched from Maven Central (the real `mvn`, the real repository)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from featureflow.infra import maven


@pytest.mark.parametrize(
    ("jar", "artifact"),
    [
        ("kafka-clients-3.9.2.jar", "kafka-clients"),
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
        ("commons-pool2-2.13.1.jar", "commons-pool2"),
        ("scala-library-2.13.15.jar", "scala-library"),
        ("jsr305-3.0.0.jar", "jsr305"),
        ("log4j-slf4j-impl-2.24.3.jar", "log4j-slf4j-impl"),
    ],
)
def test_artifact_name_strips_the_version(jar: str, artifact: str) -> None:
    assert maven.artifact_name(jar) == artifact


@given(
    artifact=st.from_regex(r"[a-z][a-z0-9]*(-[a-z][a-z0-9_.]*)*(_2\.1[23])?", fullmatch=True),
    version=st.lists(st.integers(0, 99), min_size=2, max_size=4).map(
        lambda p: ".".join(map(str, p))
    ),
)
def test_artifact_name_round_trips(artifact: str, version: str) -> None:
    assert maven.artifact_name(f"{artifact}-{version}.jar") == artifact


def test_spark_connector_matches_installed_pyspark_and_skips_its_jars() -> None:
    import pyspark

    bundle = maven.spark_kafka_bundle()
    assert bundle.properties["spark.version"] == pyspark.__version__
    assert bundle.properties["scala.binary.version"] == "2.13"
    jars = maven.fetch(bundle)
    names = {maven.artifact_name(jar.name) for jar in jars}
    assert "spark-sql-kafka-0-10_2.13" in names
    assert "kafka-clients" in names
    # pyspark already ships Hadoop's client and Scala: two copies would clash.
    assert not names & {"hadoop-client-api", "hadoop-client-runtime", "scala-library"}


def test_fetch_is_a_no_op_when_present() -> None:
    bundle = maven.kafka_broker_bundle()
    first = maven.fetch(bundle)
    mtimes = {jar: jar.stat().st_mtime_ns for jar in first}
    second = maven.fetch(bundle)
    assert second == first
    assert {jar: jar.stat().st_mtime_ns for jar in second} == mtimes
    assert any(jar.name.startswith("kafka_2.13-") for jar in first)
