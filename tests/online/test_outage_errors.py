"""Outages of the online store end in a bounded wait and ``OnlineStoreUnavailableError``.

Real services, no mocks: a redis-server of the test's own that is stopped
(connection refused) or SIGSTOPped (hung past ``socket_timeout``), and a SQLite
write lock held by another connection past the lock wait. After each outage
the same write succeeds (what the stream job's restart relies on).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from feast import FeatureStore
from feast.infra.online_stores.redis import RedisOnlineStoreConfig
from feast.types import Float64
from online_helpers import VIEW, amounts_table, make_store, read, sqlite_path, sqlite_store

from featureflow.errors import OnlineStoreError, OnlineStoreUnavailableError
from featureflow.infra.redis_server import RedisServer
from featureflow.online import write
from featureflow.online.sqlite import LOCK_TIMEOUT_ENV, lock_timeout_s

FEATURES = {"amount": Float64}


def _redis(root: Path, connection_string: str) -> FeatureStore:
    return make_store(root, RedisOnlineStoreConfig(connection_string=connection_string),
                      features=FEATURES)  # fmt: skip


def test_hung_redis_fails_within_two_timeouts_then_the_write_succeeds(tmp_path: Path) -> None:
    with RedisServer() as server:
        store = _redis(tmp_path, f"{server.connection_string},socket_timeout=1")
        write(store, VIEW, amounts_table(300, 1.0))
        os.kill(server.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(OnlineStoreUnavailableError, match=r"^Redis unavailable: ") as info:
                write(store, VIEW, amounts_table(300, 2.0))
            waited = time.monotonic() - started
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert 1.0 <= waited < 4.0, waited  # one timeout, plus one immediate retry at most
        assert info.value.service == "Redis"
        write(store, VIEW, amounts_table(300, 2.0))
        assert read(store, [0, 299], ["amount"])["amount"] == [2.0, 2.0]


def test_stopped_redis_is_unavailable_and_a_restart_keeps_the_data(tmp_path: Path) -> None:
    with RedisServer() as server:
        store = _redis(tmp_path, f"{server.connection_string},socket_connect_timeout=1")
        write(store, VIEW, amounts_table(10, 1.0))
        server.restart()  # the pooled connections now point at a closed server
        write(store, VIEW, amounts_table(10, 2.0))  # one immediate retry reconnects
        port = server.port
        server.stop()
        with pytest.raises(OnlineStoreUnavailableError, match=f"127.0.0.1:{port}"):
            write(store, VIEW, amounts_table(10, 3.0))
        server.start()  # a fresh directory: the data is gone, the writes work again
        write(store, VIEW, amounts_table(10, 3.0))
        assert read(store, [0, 9], ["amount"])["amount"] == [3.0, 3.0]


def test_locked_sqlite_waits_the_lock_timeout_then_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite_store(tmp_path, features=FEATURES)
    write(store, VIEW, amounts_table(10, 1.0))
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, "0.5")
    holder = sqlite3.connect(sqlite_path(store), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(OnlineStoreUnavailableError, match=r"^SQLite unavailable: .*locked"):
            write(store, VIEW, amounts_table(10, 2.0))
        waited = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert 0.5 <= waited < 3.0, waited
    write(store, VIEW, amounts_table(10, 2.0))
    assert read(store, [0, 9], ["amount"])["amount"] == [2.0, 2.0]


@pytest.mark.parametrize(("value", "seconds"), [(None, 10.0), ("", 10.0), ("2.5", 2.5), ("0", 0.0)])
def test_lock_timeout_setting(value: str | None, seconds: float,
                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    if value is None:
        monkeypatch.delenv(LOCK_TIMEOUT_ENV, raising=False)
    else:
        monkeypatch.setenv(LOCK_TIMEOUT_ENV, value)
    assert lock_timeout_s() == seconds


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_bad_lock_timeout_is_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, value)
    with pytest.raises(OnlineStoreError, match=LOCK_TIMEOUT_ENV):
        lock_timeout_s()
