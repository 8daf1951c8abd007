"""The throwaway redis-server: starts on a free loopback port, stops cleanly, fails clearly."""

from __future__ import annotations

import socket

import pytest
import redis

from featureflow.errors import RedisServerError
from featureflow.infra.redis_server import RedisServer


def _answers(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=1).ping())
    except redis.ConnectionError:
        return False


def test_start_serve_and_stop() -> None:
    with RedisServer() as server:
        host, port = server.connection_string.split(":")
        assert host == "127.0.0.1"
        assert _answers(int(port))
        redis.Redis(port=int(port)).set("k", "v")
    assert not _answers(int(port))


def test_missing_binary_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_SERVER", "/nonexistent/redis-server")
    with pytest.raises(RedisServerError, match="REDIS_SERVER"):
        RedisServer()
    monkeypatch.delenv("REDIS_SERVER")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RedisServerError, match="apt-get install -y redis-server"):
        RedisServer()


def test_port_in_use_is_reported() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(RedisServerError, match="exited at start"):
            RedisServer(port=port).start()
