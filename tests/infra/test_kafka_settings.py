"""Kafka client settings: the .properties parser (against java.util.Properties), the
environment mapping, the merge order and the translation for librdkafka."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from featureflow import secrets
from featureflow.errors import KafkaSettingsError
from featureflow.infra import kafka_settings as K

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="alice" password="alice-secret";'
)


def test_a_kafka_client_file_with_continuations_comments_and_escapes() -> None:
    text = (
        "# client.properties\n"
        "! another comment\n"
        "   \n"
        "kafka.security.protocol = SASL_SSL\n"
        "sasl.mechanism:PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="alice" \\\n'
        '    password="alice-secret";\n'
        "ssl.truststore.location /etc/kafka/trust\\ store.p12\n"
        "ssl.endpoint.identification.algorithm=\n"
        "unicode=caf\\u00e9\\tend\r\n"
        "key\\=with\\:seps=v\n"
    )
    settings = K.parse_properties(text)
    assert settings == {
        "kafka.security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": JAAS,
        "ssl.truststore.location": "/etc/kafka/trust store.p12",
        "ssl.endpoint.identification.algorithm": "",
        "unicode": "café\tend",
        "key=with:seps": "v",
    }


def test_a_malformed_unicode_escape_names_the_file_and_line() -> None:
    with pytest.raises(KafkaSettingsError, match=r"client.properties:2: malformed"):
        K.parse_properties("a=b\nc=\\u12x4\n", source="client.properties")


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(st.dictionaries(_text, _text, max_size=6))
def test_format_then_parse_is_the_identity(settings: dict[str, str]) -> None:
    assert K.parse_properties(K.format_properties(settings)) == settings


# --- Differential: java.util.Properties is the oracle ----------------------------------------

_PIECES = [
    "a", "key", "k.x", "v", "value", " ", "  ", "\t", "\f", "=", ":", " = ", "#", "!", "\\",
    "\\\\", "\\ ", "\\=", "\\:", "\\n", "\\t", "\\u0041", "\\u00e9", "é", "\n", "\r\n", "\r",
    "\\\n", "\\\r\n", "\\\\\n", "x\\\n  y", "# c\n", "! c\n", '"', "ü",
]  # fmt: skip

_JAVA_ORACLE = """
import java.io.*;
import java.nio.file.*;
import java.util.*;

public class PropertiesOracle {
    static String hex(String s) {
        StringBuilder out = new StringBuilder();
        for (char c : s.toCharArray()) out.append(String.format("%04x", (int) c));
        return out.toString();
    }
    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[1]);
        for (int i = 0; i < n; i++) {
            Properties p = new Properties();
            try (Reader r = Files.newBufferedReader(Paths.get(args[0], i + ".properties"))) {
                p.load(r);
            } catch (IllegalArgumentException e) {
                System.out.println(i + " ERROR");
                continue;
            }
            List<String> keys = new ArrayList<>(p.stringPropertyNames());
            Collections.sort(keys);
            StringBuilder line = new StringBuilder(i + " OK");
            for (String k : keys)
                line.append(" ").append(hex(k)).append(",").append(hex(p.getProperty(k)));
            System.out.println(line);
        }
    }
}
"""


def _unhex(text: str) -> str:
    return bytes.fromhex(text).decode("utf-16-be") if text else ""


def test_the_parser_reads_generated_files_as_java_util_properties_does(tmp_path: Path) -> None:
    rng = random.Random(20261201)
    texts = ["".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 25))) for _ in range(400)]
    # Not a lone backslash as the last line: Java's quirk there (parse_properties's docstring).
    texts = [t + "end=1\n" if re.search(r"(^|[\r\n])[ \t\f]*\\\n?$", t) else t for t in texts]
    texts += ["a=b\\", "k\\\n", "\\u00", "  \\\n  x=1", "#x\\\ny=2", "a b c", "a\\\n\\\nb=c"]
    for index, text in enumerate(texts):
        (tmp_path / f"{index}.properties").write_text(text, encoding="utf-8", newline="")
    (tmp_path / "PropertiesOracle.java").write_text(_JAVA_ORACLE)
    java = subprocess.run(
        ["java", str(tmp_path / "PropertiesOracle.java"), str(tmp_path), str(len(texts))],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    lines = java.stdout.splitlines()
    assert len(lines) == len(texts)
    for line, text in zip(lines, texts, strict=True):
        _, status, *pairs = line.split(" ")
        if status == "ERROR":
            with pytest.raises(KafkaSettingsError):
                K.parse_properties(text)
            continue
        want = {}
        for pair in pairs:
            key, value = pair.split(",")
            want[_unhex(key)] = _unhex(value)
        assert K.parse_properties(text) == want, repr(text)


# --- Sources and merge -------------------------------------------------------------------------


def test_environment_variables_map_to_dotted_keys() -> None:
    environ = {
        "FEATUREFLOW_KAFKA_SASL_JAAS_CONFIG": JAAS,
        "FEATUREFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "FEATUREFLOW_KAFKA_": "ignored",
        "FEATUREFLOW_HOME": "/x",
        "KAFKA_SASL_MECHANISM": "ignored",
    }
    assert K.from_environment(environ) == {
        "sasl.jaas.config": JAAS,
        "security.protocol": "SASL_SSL",
    }
    assert K.env_variable("kafka.ssl.truststore.password") == (
        "FEATUREFLOW_KAFKA_SSL_TRUSTSTORE_PASSWORD"
    )
    assert K.env_key(K.env_variable("sasl.mechanism")) == "sasl.mechanism"


def test_argv_wins_over_the_environment_which_wins_over_the_file(tmp_path: Path) -> None:
    secrets.forget_all()
    path = tmp_path / "client.properties"
    path.write_text("kafka.a=file\nb=file\nc=file\nsasl.jaas.config=" + JAAS + "\n")
    environ = {"FEATUREFLOW_KAFKA_B": "env", "FEATUREFLOW_KAFKA_C": "env"}
    merged = K.load(file=path, environ=environ, pairs=["kafka.c=argv"])
    assert merged == {"a": "file", "b": "env", "c": "argv", "sasl.jaas.config": JAAS}
    assert JAAS in secrets.registered() and "alice-secret" in secrets.registered()
    assert K.spark_options({**merged, "librdkafka.ssl.ca.location": "/ca.pem"}) == {
        "kafka.a": "file", "kafka.b": "env", "kafka.c": "argv", "kafka.sasl.jaas.config": JAAS,
    }  # fmt: skip
    secrets.forget_all()


def test_a_secret_file_others_may_read_gets_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "client.properties"
    path.write_text("sasl.jaas.config=" + JAAS + "\n")
    path.chmod(0o644)
    with caplog.at_level("WARNING", logger="featureflow.infra.kafka_settings"):
        K.from_file(path)
    assert "chmod 600" in caplog.text and "alice-secret" not in caplog.text
    caplog.clear()
    path.chmod(0o600)
    with caplog.at_level("WARNING", logger="featureflow.infra.kafka_settings"):
        K.from_file(path)
    assert caplog.text == ""


def test_bad_pairs_and_missing_files_are_typed_errors_without_values(tmp_path: Path) -> None:
    with pytest.raises(KafkaSettingsError, match="expects KEY=VALUE") as error:
        K.from_pairs(["password-without-equals-sign"])
    assert "password-without-equals-sign" not in str(error.value)
    with pytest.raises(KafkaSettingsError, match="cannot read it"):
        K.from_file(tmp_path / "missing.properties")


def test_librdkafka_gets_the_same_security_under_its_own_names() -> None:
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": JAAS,
        "ssl.truststore.location": "/etc/kafka/ca.pem",
        "ssl.truststore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "",
        "max.poll.records": "10",  # a Java-only setting: not passed
    }
    assert K.librdkafka_config(settings) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
    }
    pkcs12 = {**settings, "ssl.truststore.type": "PKCS12", "ssl.truststore.location": "/t.p12"}
    with pytest.raises(KafkaSettingsError, match=r"librdkafka\.ssl\.ca\.location"):
        K.librdkafka_config(pkcs12)
    pkcs12["librdkafka.ssl.ca.location"] = "/ca.pem"
    assert K.librdkafka_config(pkcs12)["ssl.ca.location"] == "/ca.pem"


def test_describe_reports_the_setup_without_secrets() -> None:
    facts = K.describe(
        {"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN", "sasl.jaas.config": JAAS}
    )
    assert facts["protocol"] == "SASL_SSL" and facts["tls"] == "on" and facts["sasl"] == "PLAIN"
    assert facts["sasl user"] == "alice"
    assert "alice-secret" not in repr(facts)
    assert K.describe({})["tls"] == "off"
