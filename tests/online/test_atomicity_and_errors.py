"""Failures leave the store consistent; bad input gets a typed, actionable error;
unknown stores fall back to Feast's writer.

Fault injection uses the stores' own means (a SQLite trigger, a Redis key of the
wrong type), not mocks.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest
from feast.types import Float64, Int64
from online_helpers import (
    PROJECT,
    VIEW,
    make_store,
    read,
    redis_client,
    redis_hashes,
    redis_store,
    sqlite_path,
    sqlite_rows,
    sqlite_store,
)

from featureflow.errors import OnlineStoreError
from featureflow.online import write
from featureflow.online.redis import CHUNK

FEATURES = {"amount": Float64, "count": Int64}


def _table(ids: range, second: int, amount: float) -> pa.Table:
    n = len(ids)
    return pa.table({
        "uid": pa.array(list(ids), pa.int64()),
        "ts": pa.array([second * 1_000_000] * n, pa.timestamp("us", "UTC")),
        "amount": pa.array([amount] * n),
        "count": pa.array([second] * n, pa.int64()),
    })


def test_sqlite_failure_mid_batch_writes_nothing(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path, features=FEATURES)
    write(store, VIEW, _table(range(100), 1_000, 1.0))
    before = sqlite_rows(store)
    with sqlite3.connect(sqlite_path(store)) as conn:  # fails on entity 50's row only
        conn.execute(
            f"CREATE TRIGGER boom BEFORE INSERT ON {PROJECT}_{VIEW} "
            "WHEN NEW.value_text = '2.5' BEGIN SELECT RAISE(ABORT, 'injected'); END"
        )
    batch = _table(range(200), 2_000, 2.0)
    amounts = batch.column("amount").to_pylist()
    amounts[50] = 2.5
    batch = batch.set_column(2, "amount", pa.array(amounts))
    with pytest.raises(OnlineStoreError, match=r"nothing written.*injected"):
        write(store, VIEW, batch)
    assert sqlite_rows(store) == before


@pytest.mark.parametrize("images", [True, False])
@pytest.mark.parametrize("poisoned", [0, 37, 199])  # entities of different blocks
def test_sqlite_failure_in_any_pipelined_block_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, poisoned: int, images: bool
) -> None:
    """Blocks are built on this thread while the store's thread executes the ones before:
    a failure in whichever block rolls the one transaction back, and the write stops
    (blocks handed over as database images, or as blobs SQL cuts rows from)."""
    import featureflow.online.sqlite as sqlite_writer

    monkeypatch.setattr(sqlite_writer, "_IMAGES", images)
    monkeypatch.setattr(sqlite_writer, "_FIRST_STATEMENT", 3)
    monkeypatch.setattr(sqlite_writer, "_ENTITIES_PER_STATEMENT", 16)  # 14 blocks
    monkeypatch.setattr(sqlite_writer, "_IMAGE_ROWS", 16 * len(FEATURES))  # 14 images
    store = sqlite_store(tmp_path, features=FEATURES)
    write(store, VIEW, _table(range(200), 1_000, 1.0))
    before = sqlite_rows(store)
    with sqlite3.connect(sqlite_path(store)) as conn:
        conn.execute(
            f"CREATE TRIGGER boom BEFORE UPDATE ON {PROJECT}_{VIEW} "
            "WHEN NEW.value_text = '2.5' BEGIN SELECT RAISE(ABORT, 'injected'); END"
        )
    batch = _table(range(200), 2_000, 2.0)
    amounts = batch.column("amount").to_pylist()
    amounts[poisoned] = 2.5
    batch = batch.set_column(2, "amount", pa.array(amounts))
    with pytest.raises(OnlineStoreError, match=r"nothing written.*injected"):
        write(store, VIEW, batch)
    assert sqlite_rows(store) == before
    with sqlite3.connect(sqlite_path(store)) as conn:
        conn.execute("DROP TRIGGER boom")
    stats = write(store, VIEW, batch)  # the store is usable again: no lock left behind
    assert (stats.written, stats.skipped) == (200, 0)


@pytest.mark.parametrize("restore", [False, True])
def test_redis_failure_mid_batch_leaves_each_entity_old_or_new(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, restore: bool,
) -> None:
    """A key in the middle of the batch is not a hash. The checked HSET path (``RESTORE``
    off) fails at its chunk: chunks before it are written, it and those after are not.
    With ``RESTORE``, the replacing path's reads find the key unlike the write and leave
    it alone, every other entity is replaced, and the checked path then reports the key.
    Either way each entity is all old or all new."""
    import featureflow.online.redis as redis_writer

    monkeypatch.setattr(redis_writer, "RESTORE", restore)
    store = redis_store(tmp_path, redis_url, features=FEATURES)
    n = 3 * CHUNK
    write(store, VIEW, _table(range(n), 1_000, 1.0))
    old = redis_hashes(store)
    poisoned = sorted(old)[len(old) // 2]  # an entity in the middle of the batch
    client = redis_client(store)
    client.delete(poisoned)
    client.set(poisoned, b"not a hash")  # its reads and HMGET fail with WRONGTYPE
    with pytest.raises(OnlineStoreError, match="WRONGTYPE"):
        write(store, VIEW, _table(range(n), 2_000, 2.0))
    client.delete(poisoned)
    after = redis_hashes(store)
    old_fields = next(iter(old.values()))  # every entity had the same values
    new_fields = {f: v for f, v in after.items() if v != old_fields}
    assert new_fields, "nothing was written before the fault"
    new_hash = next(iter(new_fields.values()))
    n_new = 0
    for fields in after.values():
        assert fields in (old_fields, new_hash), "an entity mixes old and new features"
        n_new += fields == new_hash
    if restore:
        assert n_new == n - 1  # all but the key that is not a hash
    else:
        assert 0 < n_new < n - 1  # the fault really hit mid-batch: some written, some not


def test_unknown_store_falls_back_to_feast_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(tmp_path, {"type": "online_memory_store.MemoryOnlineStore"},
                       features=FEATURES)
    with caplog.at_level(logging.WARNING, logger="featureflow.online"):
        stats = write(store, VIEW, _table(range(3), 1_000, 4.0))
    assert stats.store == "feast"
    assert "write_to_online_store" in caplog.text
    assert read(store, [0, 2], ["amount"])["amount"] == [4.0, 4.0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.drop_columns(["count"]), "no feature column 'count'"),
        (lambda t: t.set_column(0, "uid", pa.array([1, None, 3], pa.int64())), "null"),
        (lambda t: t.set_column(3, "count", pa.array(["a", "b", "c"])), "cannot be stored as"),
        (lambda t: t.drop_columns(["ts"]), "event timestamp column 'ts'"),
    ],
)
def test_bad_tables_raise_actionable_errors(tmp_path: Path, change, message: str) -> None:  # type: ignore[no-untyped-def]
    store = sqlite_store(tmp_path, features=FEATURES)
    with pytest.raises(OnlineStoreError, match=message):
        write(store, VIEW, change(_table(range(3), 1_000, 1.0)))


def test_missing_view_and_missing_online_table(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path, features=FEATURES)
    with pytest.raises(OnlineStoreError, match="feast apply"):
        write(store, "no_such_view", _table(range(1), 1, 1.0))
    sqlite_path(store).unlink()
    with pytest.raises(OnlineStoreError, match="feast apply"):
        write(store, VIEW, _table(range(1), 1, 1.0))


def test_empty_table_writes_nothing(tmp_path: Path, redis_url: str) -> None:
    for store in (sqlite_store(tmp_path / "s", features=FEATURES),
                  redis_store(tmp_path / "r", redis_url, features=FEATURES)):
        stats = write(store, VIEW, _table(range(0), 1, 1.0))
        assert (stats.rows, stats.written, stats.skipped) == (0, 0, 0)


def test_redis_key_ttl_is_applied_like_feast(tmp_path: Path, redis_url: str) -> None:
    from feast.infra.online_stores.redis import RedisOnlineStoreConfig

    db_store = redis_store(tmp_path / "db", redis_url, features=FEATURES)
    url = db_store.config.online_store.connection_string
    store = make_store(tmp_path / "ttl", RedisOnlineStoreConfig(connection_string=url,
                                                                 key_ttl_seconds=600),
                       features=FEATURES)
    write(store, VIEW, _table(range(2), 1_000, 1.0))
    client = redis_client(store)
    assert all(0 < client.ttl(key) <= 600 for key in client.scan_iter())


def test_redis_concurrent_newer_write_is_not_overwritten(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: another writer stores a newer event for entity 1 between our
    read of the timestamps and our EXEC; WATCH makes us re-decide, so it survives."""
    import featureflow.online.redis as redis_writer

    store = redis_store(tmp_path, redis_url, features=FEATURES)
    real_newer = redis_writer._newer
    calls: list[int] = []

    def decide_then_race(decided, plan, chunk):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:  # the concurrent writer, on its own connection
            write(store, VIEW, _table(range(1, 2), 9_000, 9.0))
        return real_newer(decided, plan, chunk)

    monkeypatch.setattr(redis_writer, "_newer", decide_then_race)
    monkeypatch.setattr(redis_writer, "OPTIMISTIC", False)  # the per-chunk decisions
    monkeypatch.setattr(redis_writer, "RESTORE", False)  # HSET for every entity
    stats = write(store, VIEW, _table(range(3), 5_000, 5.0))
    assert len(calls) == 3  # our first decision, the racing write's, our retry
    assert (stats.written, stats.skipped) == (2, 1)
    assert read(store, [0, 1, 2], ["amount"])["amount"] == [5.0, 9.0, 5.0]


def test_redis_replacement_yields_to_a_writer_between_its_read_and_its_exec(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: another writer stores a newer event for entity 1 after the
    replacing path (RESTORE ... REPLACE) read and decided its chunk, before its EXEC.
    WATCH aborts that EXEC: the newer row survives, and the checked path writes the
    chunk's other entities."""
    import featureflow.online.redis as redis_writer

    store = redis_store(tmp_path, redis_url, features=FEATURES)
    write(store, VIEW, _table(range(3), 1_000, 1.0))  # every entity exists
    real_decide = redis_writer._LayoutCheck.decide
    calls: list[int] = []

    def decide_then_race(self, chunk, replies):  # type: ignore[no-untyped-def]
        keep = real_decide(self, chunk, replies)
        calls.append(1)
        if len(calls) == 1:  # the concurrent writer, on its own connection
            write(store, VIEW, _table(range(1, 2), 9_000, 9.0))
        return keep

    monkeypatch.setattr(redis_writer._LayoutCheck, "decide", decide_then_race)
    stats = write(store, VIEW, _table(range(3), 5_000, 5.0))
    assert len(calls) == 2  # our chunk's decision, the racing write's
    assert (stats.written, stats.skipped) == (2, 1)
    assert read(store, [0, 1, 2], ["amount"])["amount"] == [5.0, 9.0, 5.0]


def test_redis_race_in_a_chunk_with_the_next_chunk_already_watched(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The WATCH and read of the next chunk travel with the current chunk's EXEC; an
    aborted EXEC must drop that pipelined WATCH, re-decide the chunk, and go on."""
    import featureflow.online.redis as redis_writer

    store = redis_store(tmp_path, redis_url, features=FEATURES)
    n = 2 * CHUNK + 5
    real_newer = redis_writer._newer
    calls: list[int] = []

    def decide_then_race(decided, plan, chunk):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:  # first chunk decided: another writer stores entity 1
            write(store, VIEW, _table(range(1, 2), 9_000, 9.0))
        return real_newer(decided, plan, chunk)

    monkeypatch.setattr(redis_writer, "_newer", decide_then_race)
    monkeypatch.setattr(redis_writer, "OPTIMISTIC", False)  # the per-chunk decisions
    monkeypatch.setattr(redis_writer, "RESTORE", False)  # HSET for every entity
    stats = write(store, VIEW, _table(range(n), 5_000, 5.0))
    assert len(calls) == 5  # chunk 0, the racing write, chunk 0 again, chunks 1 and 2
    assert (stats.written, stats.skipped) == (n - 1, 1)
    got = read(store, [0, 1, 2, CHUNK, n - 1], ["amount"])["amount"]
    assert got == [5.0, 9.0, 5.0, 5.0, 5.0]


def test_redis_plans_built_block_by_block_keep_the_ordering_rule(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-view write builds its commands a block of entities at a time while the
    blocks before are on the wire; chunks (some ending inside a block, some at its end)
    with stale rows in several blocks still take the careful path, each with its block."""
    import featureflow.online.redis as redis_writer

    monkeypatch.setattr(redis_writer, "PLAN_BLOCK", 7)
    monkeypatch.setattr(redis_writer, "CHUNK", 3)
    store = redis_store(tmp_path, redis_url, features=FEATURES)
    write(store, VIEW, _table(range(50), 1_000, 1.0))
    ids = list(range(60))
    seconds = [2_000 if i % 2 == 0 else 500 for i in ids]  # odd ids < 50 are stale
    table = pa.table({
        "uid": pa.array(ids, pa.int64()),
        "ts": pa.array([s * 1_000_000 for s in seconds], pa.timestamp("us", "UTC")),
        "amount": pa.array([2.0] * len(ids)),
        "count": pa.array(seconds, pa.int64()),
    })
    stats = write(store, VIEW, table)
    assert (stats.written, stats.skipped) == (35, 25)
    expected = [1.0 if i % 2 and i < 50 else 2.0 for i in ids]
    assert read(store, ids, ["amount"])["amount"] == expected
    assert redis_client(store).keys("featureflow:guard:*") == []
