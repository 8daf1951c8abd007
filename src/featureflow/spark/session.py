"""A SparkSession that can read Kafka, however the job was launched.

- ``python jobs/realtime.py`` (no JVM yet): the Kafka connector jars go in
  ``spark.jars`` before the JVM starts, and Python workers use this interpreter.
- ``spark-submit jobs/realtime.py`` (the JVM already runs): when the connector
  is not on the classpath (no ``--jars``/``--packages``), the jars are added to
  the running session with ``ADD JAR``, which loads them in the driver and
  ships them to executors, also on a cluster (``--master spark://...``).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from featureflow.infra import maven

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

KAFKA_SOURCE_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def _jvm_already_running() -> bool:
    # spark-submit (and pyspark shells) start the JVM first and tell Python its gateway port.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    app_name: str,
    *,
    master: str | None = None,
    shuffle_partitions: int | None = None,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Create (or join) the SparkSession and make sure it can read and write Kafka.

    Args:
        app_name: the Spark application name.
        master: Spark master URL; default ``local[*]`` unless spark-submit set one.
        shuffle_partitions: ``spark.sql.shuffle.partitions`` (default: 2 x local cores).
        extra_conf: further Spark settings, applied last.
    """
    from pyspark.sql import SparkSession

    connector_jars = [str(jar) for jar in maven.fetch(maven.spark_kafka_bundle())]
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not _jvm_already_running():
        builder = builder.master("local[*]")
    # PySpark takes the workers' interpreter from this variable when it creates
    # the context (the spark.pyspark.python setting only reaches spark-submit).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions or 2 * (os.cpu_count() or 1)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        # Python workers must import featureflow and its native kernels: use
        # this interpreter unless the deployment says otherwise.
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
    }
    if not _jvm_already_running():
        conf["spark.jars"] = ",".join(connector_jars)
    conf.update(extra_conf or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if not _kafka_source_loadable(spark):
        for jar in connector_jars:
            spark.sql(f"ADD JAR '{jar}'")
        log.info("added the Kafka connector to the running session: %s", connector_jars)
    return spark


def _kafka_source_loadable(spark: SparkSession) -> bool:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    loader = jvm.Thread.currentThread().getContextClassLoader()
    try:
        jvm.java.lang.Class.forName(KAFKA_SOURCE_CLASS, False, loader)
    except Exception:
        return False
    return True
