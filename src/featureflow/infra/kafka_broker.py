"""A single-node Apache Kafka broker (KRaft: broker and controller in one JVM) on loopback.

Run from the official jars (see :mod:`featureflow.infra.maven`), exactly as
Kafka's own scripts do: ``kafka.tools.StorageTool format`` once, then
``kafka.Kafka server.properties``. Config, data and log live in
``<cache>/kafka/``; the process is detached (its own session) and recorded in
``broker.pid`` so ``stop`` finds it from any later command.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from featureflow import paths
from featureflow.errors import KafkaBrokerError
from featureflow.infra import maven

DEFAULT_PORT = 9092
DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class BrokerConfig:
    """Where the broker listens and keeps its files. The controller uses ``port + 1``."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    directory: Path | None = None
    partitions: int = 2
    heap: str = "512m"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def root(self) -> Path:
        return self.directory or paths.kafka_dir()

    @property
    def pid_file(self) -> Path:
        return self.root / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.root / "broker.log"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"


def server_properties(config: BrokerConfig) -> str:
    """The broker's ``server.properties``: one KRaft node, replication factor 1."""
    controller = config.port + 1
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{config.host}:{controller}",
            f"listeners=PLAINTEXT://{config.host}:{config.port},"
            f"CONTROLLER://{config.host}:{controller}",
            f"advertised.listeners=PLAINTEXT://{config.host}:{config.port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={config.data_dir}",
            f"num.partitions={config.partitions}",
            "auto.create.topics.enable=true",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "group.initial.rebalance.delay.ms=0",
            # A development broker: keep a week of data, at most 1 GiB per partition.
            "log.retention.hours=168",
            "log.retention.bytes=1073741824",
            "",
        ]
    )


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    if candidate and candidate.is_file():
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        msg = (
            "Java is not installed; Kafka needs Java 17+ "
            "(e.g. 'apt-get install openjdk-17-jre-headless')"
        )
        raise KafkaBrokerError(msg)
    return found


def _java_command(config: BrokerConfig, main_class: str, *args: str) -> list[str]:
    classpath = ":".join(str(jar) for jar in maven.fetch(maven.kafka_broker_bundle()))
    log_config = resources.files("featureflow.infra") / "conf" / "log4j2.properties"
    return [
        _java(), f"-Xmx{config.heap}", f"-Xms{config.heap}",
        f"-Dlog4j2.configurationFile={log_config}",
        "-cp", classpath, main_class, *args,
    ]  # fmt: skip


def accepts_connections(config: BrokerConfig, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections on the broker's address."""
    try:
        with socket.create_connection((config.host, config.port), timeout=timeout_s):
            return True
    except OSError:
        return False


def running_pid(config: BrokerConfig) -> int | None:
    """The pid of the broker this cache started, if that process is alive."""
    try:
        pid = int(config.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def _format_storage(config: BrokerConfig, properties: Path) -> None:
    if (config.data_dir / "meta.properties").is_file():
        return
    cluster_id = _cluster_id()
    command = _java_command(
        # "--cluster-id=<id>" as one argument: 1 in 64 random ids start with "-", which
        # the tool's parser otherwise reads as an option ("expected one argument").
        config, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
        "-c", str(properties),
    )
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        msg = f"formatting the broker's storage failed:\n{result.stdout}{result.stderr}"
        raise KafkaBrokerError(msg)


def _cluster_id() -> str:
    # Kafka's cluster ids are 16 random bytes, URL-safe base64 without padding.
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def start(config: BrokerConfig | None = None, *, timeout_s: float = 90.0) -> str:
    """Start the broker unless it already runs; wait until it serves metadata.

    Idempotent: a broker already listening on the address is reused.

    Returns:
        The bootstrap address, ``host:port``.

    Raises:
        KafkaBrokerError: the port is taken by something else, or the broker did
            not come up within ``timeout_s`` seconds (the log's tail is included).
    """
    config = config or BrokerConfig()
    if running_pid(config) is not None and accepts_connections(config):
        wait_until_ready(config, timeout_s)
        return config.bootstrap
    if accepts_connections(config):
        if _serves_kafka(config):
            return config.bootstrap
        msg = (
            f"port {config.port} on {config.host} is taken by a process that is not a Kafka broker"
        )
        raise KafkaBrokerError(msg)
    config.root.mkdir(parents=True, exist_ok=True)
    properties = config.root / "server.properties"
    properties.write_text(server_properties(config))
    _format_storage(config, properties)
    command = _java_command(config, "kafka.Kafka", str(properties))
    with open(config.log_file, "ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=config.root,
        )  # fmt: skip
    config.pid_file.write_text(str(process.pid))
    try:
        wait_until_ready(config, timeout_s, process=process)
    except KafkaBrokerError:
        stop(config)
        raise
    return config.bootstrap


def _serves_kafka(config: BrokerConfig, timeout_s: float = 5.0) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": config.bootstrap})
    try:
        admin.list_topics(timeout=timeout_s)
    except Exception:
        return False
    return True


def wait_until_ready(
    config: BrokerConfig, timeout_s: float, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until the broker answers a metadata request, or raise after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            msg = f"the Kafka broker exited with status {process.returncode}:\n{_log_tail(config)}"
            raise KafkaBrokerError(msg)
        if accepts_connections(config) and _serves_kafka(config):
            return
        time.sleep(0.5)
    msg = (
        f"the Kafka broker did not answer on {config.bootstrap} within {timeout_s:.0f} s:\n"
        f"{_log_tail(config)}"
    )
    raise KafkaBrokerError(msg)


def _log_tail(config: BrokerConfig, lines: int = 30) -> str:
    try:
        return "\n".join(config.log_file.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no broker log)"


def stop(config: BrokerConfig | None = None, *, timeout_s: float = 30.0) -> bool:
    """Stop the broker this cache started (SIGTERM, then SIGKILL after ``timeout_s`` seconds).

    Returns:
        True when a broker was running and is now stopped, False when none ran.
    """
    config = config or BrokerConfig()
    pid = running_pid(config)
    if pid is None:
        config.pid_file.unlink(missing_ok=True)
        return False
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and running_pid(config) is not None:
        _reap(pid)
        time.sleep(0.2)
    if running_pid(config) is not None:
        os.killpg(pid, signal.SIGKILL)
        time.sleep(0.5)
        _reap(pid)
    config.pid_file.unlink(missing_ok=True)
    return True


def _reap(pid: int) -> None:
    # When this process started the broker, collect its exit status so it does
    # not linger as a zombie (which os.kill(pid, 0) would still see).
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def create_topic(bootstrap: str, topic: str, partitions: int = 2, timeout_s: float = 30.0) -> None:
    """Create ``topic`` unless it exists (replication factor 1)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=timeout_s).topics:
        return
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    )
    try:
        futures[topic].result(timeout=timeout_s)
    except KafkaException as error:
        if "TOPIC_ALREADY_EXISTS" not in str(error):
            msg = f"could not create topic {topic!r} on {bootstrap}: {error}"
            raise KafkaBrokerError(msg) from error


def delete_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> None:
    """Delete ``topic`` if it exists and wait until the broker no longer lists it."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=timeout_s).topics:
        return
    admin.delete_topics([topic])[topic].result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while topic in admin.list_topics(timeout=timeout_s).topics:
        if time.monotonic() > deadline:
            msg = f"topic {topic!r} still exists {timeout_s:.0f} s after its deletion"
            raise KafkaBrokerError(msg)
        time.sleep(0.2)
