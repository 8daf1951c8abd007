"""The job against secured services: a SASL_SSL Kafka broker and a Redis with a password
over TLS; then every text the run produced is searched for each secret.

Real services, each of its own (the shared broker on 127.0.0.1:9092 is never
touched): a broker on a free port pair with its own data directory, SASL/PLAIN
over TLS with a certificate the test makes with keytool; a redis-server with
``requirepass`` serving TLS only. The job gets its Kafka credentials from
``--kafka-options-file`` (the JAAS config on continued lines, ``kafka.``
prefixes mixed) and the trust-store password from ``FEATUREFLOW_KAFKA_*``; the
Redis password sits in ``feature_store.yaml``. Features equal DuckDB's.
"""

from __future__ import annotations

import json
import re
import secrets as random_secrets
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from duckdb_oracle import END_NS, events_table, latest_features
from job_harness import apply, assert_online_rolling_equal, consume, env, job_command, run
from local_processes import free_port, free_port_pair, stop_group

from featureflow.events import sample
from featureflow.infra import kafka_broker, kafka_client
from featureflow.infra.kafka_settings import env_variable
from featureflow.infra.redis_server import RedisServer
from featureflow.infra.tls import make_self_signed

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BAD_VALUE = b'{"user_id": "not a number", "amount": 1.0, "event_timestamp": 1795990000000}'


def leaks(texts: dict[str, str], secret_values: dict[str, str]) -> list[str]:
    """``"<secret> in <text>"`` for every secret value found in any text."""
    return [
        f"{name} in {where}"
        for where, text in texts.items()
        for name, value in secret_values.items()
        if value in text
    ]


def _metrics(log: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in re.findall(r"featureflow\.metrics: (\{.*\})", log)]


def test_the_job_reads_writes_and_dead_letters_through_secured_services(
    feature_repo_copy: Path, tmp_path: Path
) -> None:
    token = random_secrets.token_hex
    kafka_password, broker_password, redis_password = (
        f"kafka-{token(10)}", f"broker-{token(10)}", f"redis-{token(10)}"
    )  # fmt: skip
    cert = make_self_signed(tmp_path / "tls", password=f"store-{token(10)}")
    security = kafka_broker.BrokerSecurity(
        cert, (("featureflow", kafka_password),), broker_password=broker_password
    )
    broker = kafka_broker.BrokerConfig(
        port=free_port_pair(), directory=tmp_path / "kafka", security=security, heap="384m"
    )
    settings = security.client_settings()
    jaas = settings["sasl.jaas.config"]
    secret_values = {
        "kafka password": kafka_password, "broker password": broker_password,
        "redis password": redis_password, "store password": cert.password, "jaas config": jaas,
    }  # fmt: skip

    # The planted secret: the search finds what it looks for.
    assert leaks({"planted": f"log line {kafka_password}."}, secret_values) == [
        "kafka password in planted"
    ]

    kafka_broker.start(broker)
    try:
        with RedisServer(password=redis_password, tls=cert) as redis:
            events = sample.generate(1200, users=30, seed=61, end_ns=END_NS, span_s=2 * 3600)
            topic = f"test-secured-{uuid.uuid4().hex[:10]}"
            kafka_broker.create_topic(broker.bootstrap, topic, partitions=2, settings=settings)
            kafka_client.produce(broker.bootstrap, topic, sample.to_json(events), settings=settings)
            kafka_client.produce(broker.bootstrap, topic, [(b"bad", BAD_VALUE)], settings=settings)

            config = feature_repo_copy / "feature_store.yaml"
            sqlite = "  type: sqlite\n  path: data/online_store.db\n"
            assert sqlite in config.read_text()
            config.write_text(
                config.read_text().replace(
                    sqlite, f"  type: redis\n  connection_string: {redis.connection_string}\n"
                )
            )
            apply(feature_repo_copy, topic)

            # Credentials in the file (the JAAS config continued over lines, as people write
            # it); the trust-store password in the environment.
            options_file = tmp_path / "client.properties"
            options_file.write_text(
                "# the job's Kafka client\n"
                "kafka.security.protocol=SASL_SSL\n"
                "sasl.mechanism = PLAIN\n"
                "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \\\n"
                '    required username="featureflow" \\\n'
                f'    password="{kafka_password}";\n'
                f"kafka.ssl.truststore.location={cert.truststore}\n"
                "ssl.truststore.type=PKCS12\n"
                "# the dead-letter producer (librdkafka) reads the CA as PEM\n"
                f"librdkafka.ssl.ca.location={cert.certificate_pem}\n"
            )
            options_file.chmod(0o600)
            job_env = env()
            job_env[env_variable("ssl.truststore.password")] = cert.password

            metrics_port = free_port()
            log_path = tmp_path / "job.log"
            command = job_command(
                feature_repo_copy, broker.bootstrap, tmp_path / "checkpoint",
                "--kafka-options-file", str(options_file), "--view", "user_txn_stats",
                "--trigger", "1 second", "--metrics-port", str(metrics_port),
            )  # fmt: skip
            with log_path.open("wb") as out:
                job = subprocess.Popen(
                    command, stdout=out, stderr=subprocess.STDOUT, env=job_env,
                    start_new_session=True,
                )  # fmt: skip
                scrape = ""
                try:
                    deadline = time.monotonic() + 300
                    while True:
                        log = log_path.read_text(errors="replace")
                        done = _metrics(log)
                        records = sum(int(m["records"]) for m in done)  # type: ignore[call-overload]
                        if records >= len(events) + 1:
                            break
                        assert job.poll() is None, log[-5000:]
                        assert time.monotonic() < deadline, log[-5000:]
                        time.sleep(0.5)
                    from featureflow.monitoring.scrape import fetch

                    scrape = fetch(f"http://127.0.0.1:{metrics_port}/metrics")
                finally:
                    stop_group(job)
            log = log_path.read_text(errors="replace")
            assert "featureflow_" in scrape, scrape[:2000]
            assert sum(int(m["events"]) for m in _metrics(log)) == len(events)  # type: ignore[call-overload]

            assert "dead letters go through Spark's Kafka sink" not in log  # the driver's
            letters = consume(broker.bootstrap, f"{topic}.dlq", settings=settings)
            assert [value for value, _ in letters] == [BAD_VALUE]
            headers = letters[0][1]
            assert headers["featureflow.field"] == "user_id"
            assert_online_rolling_equal(feature_repo_copy, latest_features(events_table(events)))

            doctor = run([
                str(Path(command[0]).parent / "featureflow"), "doctor",
                "--repo", str(feature_repo_copy), "--kafka-options-file", str(options_file),
            ])  # fmt: skip
            doctor_out = doctor.stdout + doctor.stderr
            assert doctor.returncode == 0, doctor_out
            assert "SASL_SSL (SASL PLAIN, TLS on)" in doctor_out, doctor_out
            assert "sasl user    : featureflow" in doctor_out, doctor_out
            assert re.search(r"online store\s+: redis 127\.0\.0\.1:\d+ \(auth yes, TLS yes\)",
                             doctor_out), doctor_out  # fmt: skip

            texts = {
                "job log": log,
                "scrape": scrape,
                "dead-letter headers": json.dumps(headers),
                "doctor": doctor_out,
                "redis log": redis.log_file.read_text(errors="replace") if redis.log_file else "",
                "broker log": broker.log_file.read_text(errors="replace"),
            }
            for path in (tmp_path / "checkpoint").rglob("*"):
                if path.is_file() and path.suffix in ("", ".json", ".log", ".txt"):
                    texts[f"checkpoint {path.name}"] = path.read_text(errors="replace")
    finally:
        kafka_broker.stop(broker)
    assert len(log) > 1000 and "kernels: mojo" in log
    assert "kafka client: SASL_SSL (SASL PLAIN, TLS on)" in log, log[-5000:]
    assert leaks(texts, secret_values) == []
