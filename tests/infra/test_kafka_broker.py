"""The local Kafka broker: real JVM, real client round trips."""

from __future__ import annotations

from pathlib import Path

import pytest
from local_processes import free_port_pair

from featureflow.errors import KafkaBrokerError
from featureflow.infra import kafka_broker, kafka_client

pytestmark = pytest.mark.integration


def test_server_properties_describe_one_kraft_node_on_loopback() -> None:
    config = kafka_broker.BrokerConfig(port=19092)
    text = kafka_broker.server_properties(config)
    assert "process.roles=broker,controller" in text
    assert "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093" in text
    assert f"log.dirs={config.data_dir}" in text


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_secured_broker_listens_sasl_ssl_and_keeps_passwords_out_of_its_repr(
    mechanism: str,
) -> None:
    from featureflow.infra.tls import LocalCertificate

    cert = LocalCertificate(Path("/certs"), "store-pw")
    security = kafka_broker.BrokerSecurity(
        cert, (("alice", "alice-pw"),), broker_password="broker-pw", mechanism=mechanism
    )
    config = kafka_broker.BrokerConfig(port=19192, security=security)
    text = kafka_broker.server_properties(config)
    assert "listeners=SASL_SSL://127.0.0.1:19192,CONTROLLER://127.0.0.1:19193" in text
    assert "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL" in text
    assert f"sasl.enabled.mechanisms={mechanism}" in text
    assert "ssl.keystore.location=/certs/server.p12" in text
    assert ('user_alice="alice-pw"' in text) is (mechanism == "PLAIN")
    scram = security.scram_arguments()
    assert bool(scram) is mechanism.startswith("SCRAM")
    settings = security.client_settings()
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["sasl.mechanism"] == mechanism
    assert 'username="alice" password="alice-pw"' in settings["sasl.jaas.config"]
    for secret in ("alice-pw", "broker-pw", "store-pw"):
        assert secret not in repr(config)
    with pytest.raises(KafkaBrokerError, match="SASL mechanism"):
        kafka_broker.BrokerSecurity(cert, (), broker_password="x", mechanism="GSSAPI")


def test_start_is_idempotent(kafka_bootstrap: str) -> None:
    assert kafka_bootstrap == "127.0.0.1:9092"
    assert kafka_broker.start() == kafka_bootstrap
    assert kafka_broker.accepts_connections(kafka_broker.BrokerConfig())


def test_records_round_trip_through_the_broker(kafka_bootstrap: str, topic: str) -> None:
    from confluent_kafka import Consumer

    records = [(str(i).encode(), f'{{"n": {i}}}'.encode()) for i in range(50)]
    assert kafka_client.produce(kafka_bootstrap, topic, records) == 50
    assert sum(kafka_client.end_offsets(kafka_bootstrap, topic).values()) == 50

    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    received = []
    try:
        for _ in range(100):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                received.append((message.key(), message.value()))
            if len(received) == 50:
                break
    finally:
        consumer.close()
    assert sorted(received) == sorted(records)


def test_delete_then_create_topic_empties_it(kafka_bootstrap: str, topic: str) -> None:
    kafka_client.produce(kafka_bootstrap, topic, [(None, b"x")])
    kafka_broker.delete_topic(kafka_bootstrap, topic)
    kafka_broker.create_topic(kafka_bootstrap, topic)
    assert sum(kafka_client.end_offsets(kafka_bootstrap, topic).values()) == 0


def test_a_port_held_by_something_else_is_reported(tmp_path: Path) -> None:
    import socket

    from featureflow.errors import KafkaBrokerError

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = kafka_broker.BrokerConfig(port=port, directory=tmp_path)
        with pytest.raises(KafkaBrokerError, match="not a Kafka broker"):
            kafka_broker.start(config, timeout_s=5)


@pytest.mark.slow
def test_a_scram_broker_over_tls_serves_its_users_only(tmp_path: Path) -> None:
    """SCRAM-SHA-512 over TLS on a broker of its own (the PLAIN variant runs under the job in
    tests/integration/test_secured_services.py): its user round-trips records, a wrong
    password is refused, and the broker's log holds no password."""
    import secrets as random_secrets

    from featureflow.infra.tls import make_self_signed

    password = f"scram-{random_secrets.token_hex(8)}"
    cert = make_self_signed(tmp_path / "tls", with_key_pem=False)
    security = kafka_broker.BrokerSecurity(
        cert, (("app", password),), broker_password=random_secrets.token_hex(8),
        mechanism="SCRAM-SHA-512",
    )  # fmt: skip
    config = kafka_broker.BrokerConfig(
        port=free_port_pair(), directory=tmp_path / "kafka", security=security, heap="256m"
    )
    kafka_broker.start(config)
    try:
        settings = security.client_settings()
        kafka_broker.create_topic(config.bootstrap, "scram", settings=settings)
        records = [(b"k", b"v%d" % i) for i in range(20)]
        assert kafka_client.produce(config.bootstrap, "scram", records, settings=settings) == 20
        assert sum(kafka_client.end_offsets(config.bootstrap, "scram", settings=settings)
                   .values()) == 20  # fmt: skip
        wrong = dict(settings, **{"sasl.jaas.config": security.jaas("app", "not-" + password)})
        with pytest.raises(KafkaBrokerError, match="not acknowledged"):
            kafka_client.produce(config.bootstrap, "scram", records[:1], settings=wrong,
                                 timeout_s=5)  # fmt: skip
        with pytest.raises(KafkaBrokerError):  # plaintext clients are not served
            kafka_client.produce(config.bootstrap, "scram", records[:1], timeout_s=5)
    finally:
        kafka_broker.stop(config)
    broker_log = config.log_file.read_text(errors="replace")
    for secret in (password, security.broker_password, cert.password):
        assert secret not in broker_log
    assert (config.root / "server.properties").stat().st_mode & 0o077 == 0
