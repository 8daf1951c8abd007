"""A SparkSession that can read Kafka, however the job was launched.

- ``python jobs/realtime.py`` (no JVM yet): the Kafka connector jars go in
  ``spark.jars`` before the JVM starts, and Python workers use this interpreter.
- ``spark-submit jobs/realtime.py`` (the JVM already runs): when the connector
  is not on the classpath (no ``--jars``/``--packages``), the jars are added to
  the running session with ``ADD JAR``, which loads them in the driver and
  ships them to executors, also on a cluster (``--master spark://...``).

The Spark UI (no authentication) listens on loopback only, unless asked
otherwise (``ui_host``, ``$FEATUREFLOW_UI_HOST``). Spark 4 has no setting for
the UI's address: ``WebUI`` binds to ``$SPARK_LOCAL_IP`` of the driver's JVM,
else to every interface (``0.0.0.0``). So when this process starts the JVM
(local master) it sets ``SPARK_LOCAL_IP``; under ``spark-submit`` (the JVM
already runs, with spark-submit's environment) or for a cluster master (where
``SPARK_LOCAL_IP`` would also be the address executors call the driver at),
the UI is turned off (``spark.ui.enabled=false``) unless ``SPARK_LOCAL_IP``
is already a loopback address, and the log says how to get it back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from featureflow.infra import maven
from featureflow.spark import allocators, file_modes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

KAFKA_SOURCE_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
RENAMING_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
ARROW_MAX_BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch"
NO_BYTE_LIMIT = str(2**31 - 1)
"""``Int.MaxValue``: the one value for which Spark skips measuring the Arrow batch it fills
for a Python worker after every row (:func:`default_arrow_batch_limit`)."""
UI_HOST_ENV = "FEATUREFLOW_UI_HOST"
DEFAULT_UI_HOST = "127.0.0.1"
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _jvm_already_running() -> bool:
    # spark-submit (and pyspark shells) start the JVM first and tell Python its gateway port.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    app_name: str,
    *,
    master: str | None = None,
    shuffle_partitions: int | None = None,
    extra_conf: dict[str, str] | None = None,
    ui_host: str | None = None,
) -> SparkSession:
    """Create (or join) the SparkSession and make sure it can read and write Kafka.

    Args:
        app_name: the Spark application name.
        master: Spark master URL; default ``local[*]`` unless spark-submit set one.
        shuffle_partitions: ``spark.sql.shuffle.partitions`` (default: 2 x local cores).
        extra_conf: further Spark settings, applied last.
        ui_host: the Spark UI's address (default ``$FEATUREFLOW_UI_HOST``, else
            127.0.0.1; ``none`` turns the UI off); see the module's docstring.
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
    ui_conf, local_ip = ui_settings(
        ui_host or os.environ.get(UI_HOST_ENV) or DEFAULT_UI_HOST, master
    )
    conf.update(ui_conf)
    conf.update(file_modes.spark_conf())
    conf.update(allocators.spark_conf())
    conf.update(extra_conf or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    with _environment("SPARK_LOCAL_IP", local_ip):  # read as the JVM starts
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    default_arrow_batch_limit(spark)
    if not _kafka_source_loadable(spark):
        for jar in connector_jars:
            spark.sql(f"ADD JAR '{jar}'")
        log.info("added the Kafka connector to the running session: %s", connector_jars)
    return spark


def ui_settings(host: str, master: str | None) -> tuple[dict[str, str], str | None]:
    """The Spark settings, and the ``SPARK_LOCAL_IP`` for a JVM this process starts (None:
    leave it), that put the UI on ``host`` or turn it off; see the module's docstring."""
    bound = os.environ.get("SPARK_LOCAL_IP")
    if host.lower() == "none":
        return {"spark.ui.enabled": "false"}, None
    local_master = master is None or master.startswith("local")
    can_set = not _jvm_already_running() and local_master
    if host in _LOOPBACK:
        if bound is None and can_set:
            return {}, "127.0.0.1"
        if bound in _LOOPBACK:
            return {}, None
        log.info(
            "Spark UI off: Spark binds it to $SPARK_LOCAL_IP of the driver's JVM (%s here); "
            "run spark-submit with SPARK_LOCAL_IP=127.0.0.1 for a loopback UI, or pass "
            "--ui-host 0.0.0.0 to open it", bound or "unset, i.e. every interface",
        )  # fmt: skip
        return {"spark.ui.enabled": "false"}, None
    if bound is None and can_set and host != "0.0.0.0":
        return {}, host
    if host not in {"0.0.0.0", bound}:
        log.warning(
            "the Spark UI listens on %s, not %s: Spark binds it to $SPARK_LOCAL_IP of the "
            "driver's JVM; set SPARK_LOCAL_IP=%s in spark-submit's environment",
            bound or "every interface", host, host,
        )  # fmt: skip
    return {}, None


@contextlib.contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """``name=value`` in this process's environment for the block (nothing when None)."""
    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def default_arrow_batch_limit(spark: SparkSession) -> bool:
    """Let Arrow batches to Python workers be cut by rows only, unless the deployment set a
    byte limit; returns whether this set it.

    Spark fills each Arrow batch it sends a Python worker (``mapInArrow``, Arrow UDFs)
    up to ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (10,000 by default) or
    ``maxBytesPerBatch`` bytes, and for the byte limit it asks the writer for its size
    after every row, which walks every vector of the batch: 12 % of the JVM's CPU in a
    recording of the job at 1 M records a micro-batch (``ArrowWriter.sizeInBytes``).
    With ``Int.MaxValue`` it skips that check (``BatchedPythonArrowInput``); the row limit
    still bounds a batch's memory. A limit set in the Spark configuration
    (``--conf spark.sql.execution.arrow.maxBytesPerBatch=...``) is kept.
    """
    if spark.sparkContext.getConf().contains(ARROW_MAX_BYTES_PER_BATCH):
        return False
    spark.conf.set(ARROW_MAX_BYTES_PER_BATCH, NO_BYTE_LIMIT)
    return True


def use_renaming_checkpoint_files(spark: SparkSession, checkpoint: str) -> bool:
    """Have Spark write a checkpoint on the local filesystem with ``FileSystem.rename``;
    returns whether it does (False: elsewhere, or a manager already set).

    Spark's default manager for local paths (``FileContext``-based) checks every
    rename's source and target for symbolic links, and without Hadoop's native
    library each check starts a ``readlink`` process (and each new file a ``chmod``,
    which stays): about sixteen processes per micro-batch for the offsets and
    commits logs and their ``.crc`` files, measured at 50-60 ms
    for each log's write on an idle 2-core machine (12 ms with this manager), on the
    critical path of every micro-batch. The renaming manager is safe where a rename
    is atomic and one query writes the checkpoint (the job's checkpoint lock); it
    still creates files through Hadoop, so their modes (``file_modes``) are the same.
    A checkpoint on HDFS or an object store, or a path without a scheme whose default
    filesystem is not local, keeps Spark's default; so does a manager set explicitly
    (``--conf spark.sql.streaming.checkpointFileManagerClass=...``).
    """
    if spark.conf.get(CHECKPOINT_FILE_MANAGER, None):
        return False
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop_fs = jvm.org.apache.hadoop.fs
    uri = hadoop_fs.Path(checkpoint).toUri()
    scheme = uri.getScheme() or hadoop_fs.FileSystem.getDefaultUri(hadoop_conf).getScheme()
    if scheme != "file":
        return False
    spark.conf.set(CHECKPOINT_FILE_MANAGER, RENAMING_FILE_MANAGER)
    return True


def _kafka_source_loadable(spark: SparkSession) -> bool:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    loader = jvm.Thread.currentThread().getContextClassLoader()
    try:
        jvm.java.lang.Class.forName(KAFKA_SOURCE_CLASS, False, loader)
    except Exception:
        return False
    return True
