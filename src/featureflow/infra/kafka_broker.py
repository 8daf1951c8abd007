"""A single-node Apache Kafka broker (KRaft: broker and controller in one JVM) on loopback.

Run from the official jars (see :mod:`featureflow.infra.maven`), exactly as
Kafka's own scripts do: ``kafka.tools.StorageTool format`` once, then
``kafka.Kafka server.properties``. Config, data and log live in
``<cache>/kafka/``; the process is detached (its own session) and recorded in
``broker.pid`` so ``stop`` finds it from any later command.

A :class:`BrokerSecurity` makes the client listener ``SASL_SSL`` (SASL/PLAIN or
SCRAM over TLS, e.g. with a :func:`featureflow.infra.tls.make_self_signed`
certificate); the controller listener (``port + 1``, loopback) stays plaintext.
Give such a broker its own port and directory.
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from featureflow import paths
from featureflow.errors import KafkaBrokerError
from featureflow.infra import kafka_settings, maven

if TYPE_CHECKING:
    from featureflow.infra.tls import LocalCertificate

DEFAULT_PORT = 9092
DEFAULT_HOST = "127.0.0.1"

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@dataclass(frozen=True)
class BrokerSecurity:
    """A ``SASL_SSL`` client listener: SASL ``mechanism`` over TLS with ``certificate``.

    ``users`` are (name, password) pairs clients may log in as; the broker logs in
    to itself as ``broker``/``broker_password``. SCRAM users are stored when the
    storage is formatted (``--add-scram``), so they are fixed for a data directory.
    """

    certificate: LocalCertificate
    users: tuple[tuple[str, str], ...]
    broker_password: str = field(repr=False)
    mechanism: str = "PLAIN"

    def __post_init__(self) -> None:
        if self.mechanism not in SASL_MECHANISMS:
            msg = f"SASL mechanism {self.mechanism!r}: use one of {', '.join(SASL_MECHANISMS)}"
            raise KafkaBrokerError(msg)

    def __repr__(self) -> str:  # no passwords in a repr
        names = ", ".join(name for name, _ in self.users)
        return f"BrokerSecurity(mechanism={self.mechanism!r}, users=[{names}])"

    def jaas(self, user: str, password: str) -> str:
        """A client's ``sasl.jaas.config`` for ``user``."""
        module = _LOGIN_MODULES[self.mechanism]
        return f'{module} required username="{user}" password="{password}";'

    def client_settings(self, user: str | None = None) -> dict[str, str]:
        """Kafka client settings (Java names, see :mod:`featureflow.infra.kafka_settings`) to
        reach the listener as ``user`` (default: the first of ``users``), trusting the
        certificate; ``librdkafka.ssl.ca.location`` serves confluent-kafka clients."""
        name, password = next(
            (pair for pair in self.users if user is None or pair[0] == user), (None, None)
        )
        if name is None or password is None:
            msg = f"the broker has no user {user!r}"
            raise KafkaBrokerError(msg)
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": self.mechanism,
            "sasl.jaas.config": self.jaas(name, password),
            "ssl.truststore.location": str(self.certificate.truststore),
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.password": self.certificate.password,
            "librdkafka.ssl.ca.location": str(self.certificate.certificate_pem),
        }

    def server_lines(self) -> list[str]:
        """The broker's SASL and TLS settings for the ``SASL_SSL`` listener."""
        module = _LOGIN_MODULES[self.mechanism]
        listener = f"listener.name.sasl_ssl.{self.mechanism.lower()}.sasl.jaas.config"
        if self.mechanism == "PLAIN":
            accounts = "".join(
                f' user_{name}="{password}"'
                for name, password in (("broker", self.broker_password), *self.users)
            )
        else:
            accounts = ""
        cert = self.certificate
        return [
            f"sasl.enabled.mechanisms={self.mechanism}",
            f"sasl.mechanism.inter.broker.protocol={self.mechanism}",
            f'{listener}={module} required username="broker" '
            f'password="{self.broker_password}"{accounts};',
            f"ssl.keystore.location={cert.keystore}",
            "ssl.keystore.type=PKCS12",
            f"ssl.keystore.password={cert.password}",
            f"ssl.key.password={cert.password}",
            # The broker's own (inter-broker) client checks the certificate too.
            f"ssl.truststore.location={cert.truststore}",
            "ssl.truststore.type=PKCS12",
            f"ssl.truststore.password={cert.password}",
        ]

    def scram_arguments(self) -> list[str]:
        """``StorageTool format`` arguments that store the SCRAM credentials."""
        if not self.mechanism.startswith("SCRAM"):
            return []
        return [
            f"--add-scram={self.mechanism}=[name={name},password={password}]"
            for name, password in (("broker", self.broker_password), *self.users)
        ]


@dataclass(frozen=True)
class BrokerConfig:
    """Where the broker listens and keeps its files. The controller uses ``port + 1``."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    directory: Path | None = None
    partitions: int = 2
    heap: str = "512m"
    security: BrokerSecurity | None = None
    """None: a plaintext listener; else ``SASL_SSL`` (:class:`BrokerSecurity`)."""

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def client_settings(self) -> dict[str, str]:
        """Kafka client settings that reach this broker (empty for a plaintext one)."""
        return self.security.client_settings() if self.security else {}

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
    listener = "SASL_SSL" if config.security else "PLAINTEXT"
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{config.host}:{controller}",
            f"listeners={listener}://{config.host}:{config.port},"
            f"CONTROLLER://{config.host}:{controller}",
            f"advertised.listeners={listener}://{config.host}:{config.port}",
            "controller.listener.names=CONTROLLER",
            f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,{listener}:{listener}",
            f"inter.broker.listener.name={listener}",
            *(config.security.server_lines() if config.security else []),
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
        "-c", str(properties), *(config.security.scram_arguments() if config.security else []),
    )  # fmt: skip
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
    properties.touch(mode=0o600)
    properties.chmod(0o600)  # a secured broker's file holds passwords
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
    admin = _admin(config.bootstrap, config.client_settings())
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


def _admin(bootstrap: str, settings: Mapping[str, str] | None):  # type: ignore[no-untyped-def]
    """A confluent-kafka admin client; ``settings``: Kafka client settings (SASL, TLS)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {"bootstrap.servers": bootstrap, **kafka_settings.librdkafka_config(settings or {})}
    )


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 2,
    timeout_s: float = 30.0,
    *,
    settings: Mapping[str, str] | None = None,
) -> None:
    """Create ``topic`` unless it exists (replication factor 1).

    ``settings``: Kafka client settings to reach a secured broker
    (:mod:`featureflow.infra.kafka_settings`)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap, settings)
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


def delete_topic(
    bootstrap: str,
    topic: str,
    timeout_s: float = 30.0,
    *,
    settings: Mapping[str, str] | None = None,
) -> None:
    """Delete ``topic`` if it exists and wait until the broker no longer lists it."""
    admin = _admin(bootstrap, settings)
    if topic not in admin.list_topics(timeout=timeout_s).topics:
        return
    admin.delete_topics([topic])[topic].result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while topic in admin.list_topics(timeout=timeout_s).topics:
        if time.monotonic() > deadline:
            msg = f"topic {topic!r} still exists {timeout_s:.0f} s after its deletion"
            raise KafkaBrokerError(msg)
        time.sleep(0.2)
