"""featureflow.secrets: which settings are secret, the connection-string parser, redaction."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from featureflow import secrets
from featureflow.secrets import REDACTED


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    secrets.forget_all()
    yield
    secrets.forget_all()


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("sasl.jaas.config", True),
        ("kafka.sasl.jaas.config", True),
        ("KAFKA.SSL.KEY.PASSWORD", True),
        ("ssl.keystore.password", True),
        ("ssl.truststore.password", True),
        ("ssl.keystore.key", True),
        ("sasl.oauthbearer.client.secret", True),
        ("my.api.token", True),
        ("password", True),
        ("security.protocol", False),
        ("sasl.mechanism", False),
        ("ssl.truststore.location", False),
        ("username", False),
        ("ssl", False),
    ],
)
def test_secret_keys(key: str, secret: bool) -> None:
    assert secrets.is_secret_key(key) is secret


def test_jaas_passwords_and_settings_secrets() -> None:
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="pa ss;word";'
    )
    assert secrets.jaas_passwords(jaas) == ["pa ss;word"]
    found = secrets.settings_secrets({"sasl.jaas.config": jaas, "security.protocol": "SASL_SSL"})
    assert found == [jaas, "pa ss;word"]
    assert secrets.redact_settings({"sasl.jaas.config": jaas, "a": "b"}) == {
        "sasl.jaas.config": REDACTED,
        "a": "b",
    }


# --- Feast's connection string: the parser against Feast's own ---------------------------

_host = st.from_regex(r"[a-z0-9][a-z0-9.\-]{0,20}", fullmatch=True)
_port = st.integers(1, 65535)
_param_key = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)
_param_value = st.text(
    st.characters(blacklist_characters=",", blacklist_categories=("Cs",)), min_size=0, max_size=20
)


@settings(deadline=None)  # the first example imports Feast
@given(
    nodes=st.lists(st.tuples(_host, _port), min_size=1, max_size=3),
    params=st.dictionaries(_param_key, _param_value, max_size=4),
    password=st.text(
        st.characters(blacklist_characters=",", blacklist_categories=("Cs",)), min_size=1,
        max_size=30,
    ),
)  # fmt: skip
def test_connection_string_parses_as_feast_does_and_redacts_the_password(
    nodes: list[tuple[str, int]], params: dict[str, str], password: str
) -> None:
    from feast.infra.online_stores.redis import RedisOnlineStore

    params = {k: v for k, v in params.items() if k != "password"}
    params["password"] = password
    text = ",".join([*(f"{h}:{p}" for h, p in nodes), *(f"{k}={v}" for k, v in params.items())])
    parsed = secrets.parse_connection_string(text)
    feast_nodes, feast_params = RedisOnlineStore._parse_connection_string(text)
    assert [f"{n['host']}:{n['port']}" for n in feast_nodes] == list(parsed.nodes)
    assert set(feast_params) == set(parsed.params)
    assert parsed.params == params
    assert parsed.address == ",".join(f"{h}:{p}" for h, p in nodes)
    assert parsed.authenticated
    again = secrets.parse_connection_string(parsed.redacted())
    assert again.nodes == parsed.nodes
    assert again.params["password"] == REDACTED
    assert {k: v for k, v in again.params.items() if k != "password"} == {
        k: v for k, v in params.items() if k != "password"
    }
    assert secrets.redis_address(text) == parsed.address
    assert password in parsed.secrets()


def test_connection_string_flags_and_urls() -> None:
    plain = secrets.parse_connection_string("127.0.0.1:6379")
    assert (plain.authenticated, plain.tls) == (False, False)
    secured = secrets.parse_connection_string("r:1,password=p=w,ssl=true,ssl_ca_certs=/ca.pem")
    assert (secured.authenticated, secured.tls, secured.params["password"]) == (True, True, "p=w")
    url = secrets.parse_connection_string("rediss://bob:hunter22@cache:6380/0")
    assert url.address == "cache:6380"
    assert url.params == {"username": "bob", "password": "hunter22", "ssl": "true"}


# --- Free text ------------------------------------------------------------------------------

_secret = st.text(
    st.characters(blacklist_characters="*", blacklist_categories=("Cs",)),
    min_size=secrets.MIN_REGISTERED_LENGTH,
    max_size=40,
)


@given(secret=_secret, before=st.text(max_size=40), after=st.text(max_size=40))
def test_a_registered_value_never_survives_redaction(secret: str, before: str, after: str) -> None:
    text = f"{before}{secret}{after}{secret}"
    assert secret not in secrets.redact_text(text, [secret])
    secrets.register([secret])
    assert secret not in secrets.redact_text(text)


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("Redis at 127.0.0.1:6379,password=hunter2,ssl=true failed", "hunter2"),
        ('sasl.jaas.config=x.PlainLogin required username="u" password="s3 cr;t";', "s3 cr;t"),
        ("redis://bob:s3cret@host:6379/0", "s3cret"),
        ('{"ssl.truststore.password": "tpw"}', "tpw"),
        ("ssl.keystore.password = ksp", "ksp"),
        ("token=abc&x=1", "abc"),
    ],
)
def test_secret_patterns_are_redacted_without_registration(text: str, hidden: str) -> None:
    out = secrets.redact_text(text)
    assert hidden not in out
    assert REDACTED in out


@pytest.mark.parametrize(
    "text",
    [
        "invalid username-password pair or user is disabled.",
        "http://127.0.0.1:8080/metrics",
        "sasl.jaas.config = [hidden]",
        "view user_txn_stats batch 3: 500 events",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert secrets.redact_text(text) == text


def test_short_registered_values_are_redacted_by_pattern_only() -> None:
    secrets.register(["abc"])
    assert secrets.redact_text("abc abc") == "abc abc"
    assert secrets.redact_text("password=abc") == f"password={REDACTED}"


def test_the_log_filter_redacts_messages_arguments_and_tracebacks() -> None:
    secret = "Zq7-very-secret"
    secrets.register([secret])
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("featureflow.test_secrets")
    logger.addHandler(handler)
    logger.propagate = False
    secrets.install_log_redaction(logger)
    try:
        logger.warning("connecting with %s", {"password": secret})
        logger.warning(f"inline {secret}")
        try:
            raise RuntimeError(f"failed with {secret}")
        except RuntimeError:
            logger.exception("it failed")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert secret not in out
    assert out.count(REDACTED) >= 3
    assert "RuntimeError: failed with ***" in out


def test_the_excepthook_redacts_uncaught_exceptions(capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    secret = "uncaught-secret-42"
    secrets.register([secret])
    secrets.install_log_redaction(logging.getLogger("featureflow.test_hook"))
    try:
        raise ValueError(json.dumps({"v": secret}))
    except ValueError as error:
        sys.excepthook(ValueError, error, error.__traceback__)
    err = capsys.readouterr().err
    assert "ValueError" in err and secret not in err
