"""A Redis with ``requirepass`` and TLS: writes work, and no error names the password.

Real ``redis-server`` (the packaged 7.0 serves TLS), certificate made by keytool.
"""

from __future__ import annotations

import secrets as random_secrets
from pathlib import Path

import pytest
import redis
from feast.infra.online_stores.redis import RedisOnlineStoreConfig
from feast.types import Float64
from online_helpers import VIEW, amounts_table, make_store, read

from featureflow.errors import OnlineStoreError, OnlineStoreUnavailableError
from featureflow.infra.redis_server import RedisServer
from featureflow.infra.tls import make_self_signed
from featureflow.online import write

pytestmark = pytest.mark.integration


def test_secured_redis_writes_and_its_errors_show_the_address_only(tmp_path: Path) -> None:
    password = "rp-" + random_secrets.token_hex(12)
    cert = make_self_signed(tmp_path / "tls")
    with RedisServer(password=password, tls=cert) as server:
        assert password in server.connection_string and "ssl=true" in server.connection_string
        with pytest.raises(redis.AuthenticationError):  # requirepass is on
            redis.Redis(port=server.port, ssl=True, ssl_ca_certs=str(cert.certificate_pem)).ping()
        with pytest.raises(redis.ConnectionError):  # TLS only
            redis.Redis(port=server.port, password=password, socket_timeout=2).ping()

        store = make_store(
            tmp_path / "repo", RedisOnlineStoreConfig(connection_string=server.connection_string),
            features={"amount": Float64},
        )  # fmt: skip
        write(store, VIEW, amounts_table(10, 1.5))
        assert read(store, list(range(10)), ["amount"])["amount"] == [1.5] * 10

        # Redis rejects part of a write: a key of the wrong type.
        client = redis.Redis(
            port=server.port, password=password, ssl=True, ssl_ca_certs=str(cert.certificate_pem)
        )
        poisoned = next(iter(client.scan_iter()))
        client.delete(poisoned)
        client.set(poisoned, b"not a hash")
        with pytest.raises(OnlineStoreError, match="WRONGTYPE") as rejected:
            write(store, VIEW, amounts_table(10, 2.5))

        wrong = server.connection_string.replace(password, "wrong-" + password[::-1])
        bad_store = make_store(
            tmp_path / "bad", RedisOnlineStoreConfig(connection_string=wrong),
            features={"amount": Float64},
        )  # fmt: skip
        with pytest.raises(OnlineStoreError) as refused:
            write(bad_store, VIEW, amounts_table(3, 1.0))
        # A wrong password is a setting to fix, not an outage the job would retry.
        assert not isinstance(refused.value, OnlineStoreUnavailableError), refused.value
        assert "connection_string" in str(refused.value), refused.value
        port = server.port
    down = make_store(
        tmp_path / "down", RedisOnlineStoreConfig(connection_string=server.connection_string),
        features={"amount": Float64},
    )  # fmt: skip
    with pytest.raises(OnlineStoreError) as unreachable:
        write(down, VIEW, amounts_table(3, 1.0))

    for error in (rejected.value, refused.value, unreachable.value):
        text = str(error)
        assert f"127.0.0.1:{port}" in text, text
        assert password not in text and password[::-1] not in text, text
        assert "password=" not in text, text
