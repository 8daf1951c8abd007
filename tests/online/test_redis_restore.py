"""New entities' hashes created whole by RESTORE, against a real redis-server.

The payloads are checked byte for byte against the server's own: a hash made by
``HSET`` and the same hash restored from featureflow's payload must ``DUMP`` alike.
The writer's choices are checked through the server's command statistics.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import redis
from feast import FeatureStore
from feast.infra.online_stores.redis import RedisOnlineStoreConfig
from feast.types import Float32, Float64, Int64, String
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from online_helpers import VIEW, make_store, read, redis_client, redis_hashes, redis_store

import featureflow.online.redis as redis_writer
from featureflow.online import _bytes as B
from featureflow.online import redis_dump as D
from featureflow.online import write

FEATURES = {"amount": Float64, "count": Int64}


def _table(ids: list[int], second: int, amount: float) -> pa.Table:
    n = len(ids)
    return pa.table({
        "uid": pa.array(ids, pa.int64()),
        "ts": pa.array([second * 1_000_000] * n, pa.timestamp("us", "UTC")),
        "amount": pa.array([amount + i for i in ids]),
        "count": pa.array([second] * n, pa.int64()),
    })


def _calls(store: FeatureStore) -> Callable[[str], int]:
    """Calls of each command since now (the server's INFO commandstats), after the
    writer's one-time probe of the store's server."""
    client = redis_client(store)
    redis_writer.restore_version(client, store.config.online_store.connection_string)
    def stats() -> dict[str, int]:
        return {name.removeprefix("cmdstat_"): int(value["calls"])
                for name, value in client.info("commandstats").items()}
    before = stats()

    def since(command: str) -> int:
        return stats().get(command, 0) - before.get(command, 0)
    return since


def _packed(cells: list[bytes]) -> list[B.Packed]:
    return [B.Packed(np.frombuffer(cell, dtype=np.uint8), np.array([0, len(cell)], np.int64))
            for cell in cells]


def test_crc64_is_redis_check_value() -> None:
    assert int(D.crc64(_packed([b"123456789"])[0])[0]) == 0xE9C6D914C4B8D9CA


_CELL = st.one_of(st.binary(max_size=12), st.binary(max_size=70),
                  st.from_regex(rb"\A-?[0-9]{1,22}\Z"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_CELL, _CELL, min_size=1, max_size=40))
def test_payloads_restore_exactly_as_hset_makes_them(redis_url: str,
                                                     fields: dict[bytes, bytes]) -> None:
    """Every hash the payloads hold (eligible) RESTOREs to what HSET makes, byte for byte;
    a hash of short strings that are not integers is always eligible."""
    host, port = redis_url.split(":")
    client = redis.Redis(host=host, port=int(port), db=15)
    client.delete("made", "restored")
    client.hset("made", mapping=fields)  # type: ignore[arg-type]
    dump = client.dump("made")
    assert isinstance(dump, bytes)
    cells = _packed([cell for pair in fields.items() for cell in pair])
    ok = bool(D.eligible(cells)[0])
    plain = all(len(c) <= D.MAX_STRING and not re.fullmatch(rb"-?[0-9]+", c)
                for pair in fields.items() for c in pair)
    assert ok or not plain
    if ok:
        payload = D.payloads(D.entry_parts(cells), np.array([len(cells)]), dump[-10:-8])
        client.restore("restored", 0, payload.to_pylist()[0])
        assert client.dump("restored") == dump


def _rows(values: list[bytes]) -> B.Packed:
    return B.Packed(np.frombuffer(b"".join(values), dtype=np.uint8),
                    np.cumsum([0, *map(len, values)], dtype=np.int64))


_NAME = st.one_of(st.binary(max_size=6), st.from_regex(rb"\A-?[0-9]{1,3}\Z"),
                  st.binary(min_size=64, max_size=66))
_BYTE = st.sampled_from(b"0123456789-x\x00\xff")
"""Mostly digits: values that read as integers are common."""


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_fixed_width_entries_are_what_the_cell_by_cell_path_builds(data: st.DataObject) -> None:
    """``fixed_entries`` (a view's values of one length each, one block) gives the bytes
    ``entry_parts`` joins to and the rows ``eligible`` accepts, or hands the view back
    (None) exactly when it has no values, a name or value is too long or a name reads
    as an integer."""
    n = data.draw(st.integers(1, 12))
    pairs = data.draw(st.lists(st.tuples(_NAME, st.integers(0, 66)), max_size=6))
    names = [name for name, _ in pairs]
    values = [
        _rows(data.draw(st.lists(st.lists(_BYTE, min_size=width, max_size=width).map(bytes),
                                 min_size=n, max_size=n)))
        for _, width in pairs
    ]  # fmt: skip
    cells: list[B.Cells | B.Packed] = [
        cell for name, value in zip(names, values, strict=True)
        for cell in (B.const(name, n), value)]
    block = D.fixed_entries(names, values)
    handed_back = (not pairs or any(width > D.MAX_STRING for _, width in pairs)
                   or not D.eligible([B.const(name, 1) for name in names]).all())
    assert (block is None) == handed_back
    if block is not None:
        entries, ok = block
        assert B.concat([entries]).to_pylist() == B.concat(D.entry_parts(cells)).to_pylist()
        assert ok.tolist() == D.eligible(cells).tolist()


def test_new_entities_are_restored_and_read_by_feast(tmp_path: Path, redis_url: str) -> None:
    """A first write creates every hash by RESTORE (no HSET), with the view's TTL; Feast
    reads them; the next write (all exist) asks EXISTS once, of a sample, and replaces
    every hash by RESTORE ... REPLACE (its layout is exactly the write's), TTL renewed."""
    db = 14
    host, port = redis_url.split(":")
    redis.Redis(host=host, port=int(port), db=db).flushdb()
    config = RedisOnlineStoreConfig(connection_string=f"{redis_url},db={db}",
                                    key_ttl_seconds=3600)
    store = make_store(tmp_path, config, features=FEATURES)
    client = redis_client(store)
    ids = list(range(0, 3 * redis_writer.PLAN_BLOCK // 2, 3))
    calls = _calls(store)
    stats = write(store, VIEW, _table(ids, 1_000, 0.5))
    assert (stats.written, stats.skipped) == (len(ids), 0)
    assert calls("restore") == len(ids)
    assert calls("hset") == 0
    assert read(store, ids[:50], ["amount", "count"]) == {
        "uid": ids[:50], "amount": [0.5 + i for i in ids[:50]], "count": [1_000] * 50}
    ttls = [client.ttl(key) for key in list(client.scan_iter(count=1_000))[:20]]
    assert all(3_500 < ttl <= 3_600 for ttl in ttls)

    calls = _calls(store)
    stats = write(store, VIEW, _table(ids, 2_000, 7.0))
    assert (stats.written, stats.skipped) == (len(ids), 0)
    assert calls("exists") == 1  # the sample; no key-by-key search
    assert calls("restore") == len(ids)
    assert calls("hset") == 0
    assert read(store, ids[-3:], ["amount"])["amount"] == [7.0 + i for i in ids[-3:]]
    client.expire(next(iter(client.scan_iter(count=1_000))), 10)
    write(store, VIEW, _table(ids, 3_000, 9.0))
    ttls = [client.ttl(key) for key in list(client.scan_iter(count=1_000))[:20]]
    assert all(3_500 < ttl <= 3_600 for ttl in ttls)


def test_mixed_batch_restores_only_absent_entities(tmp_path: Path, redis_url: str) -> None:
    """Existing entities keep the newer-or-equal rule: absent ones are restored, older
    ones replaced by RESTORE ... REPLACE, the newer one left alone."""
    store = redis_store(tmp_path, redis_url, features=FEATURES)
    write(store, VIEW, _table(list(range(0, 200, 2)), 5_000, 1.0))  # even ids exist
    write(store, VIEW, _table([1], 9_000, 1.0))  # id 1 exists, newer than what follows
    calls = _calls(store)
    stats = write(store, VIEW, _table(list(range(200)), 6_000, 2.0))
    assert (stats.written, stats.skipped) == (199, 1)
    assert calls("restore") == 199  # 99 absent (the odd ids but 1), 100 older (the even)
    assert calls("hset") == 0  # id 1: left by the replacing check, then decided stale
    got = read(store, list(range(200)), ["amount", "count"])
    assert got["amount"] == [1.0 + 1 if i == 1 else 2.0 + i for i in range(200)]
    assert got["count"] == [9_000 if i == 1 else 6_000 for i in range(200)]


@pytest.mark.parametrize(("racing_second", "kept"), [(9_000, 9.0), (1_000, 5.0)])
def test_entity_created_between_exists_and_restore(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, racing_second: int,
    kept: float,
) -> None:
    """Another writer creates entity 1 after our EXISTS: RESTORE refuses it (BUSYKEY)
    and the checked path decides: a newer racing row survives, an older one is replaced."""
    store = redis_store(tmp_path, redis_url, features=FEATURES)
    real = D.hash_payloads

    def race_then_build(*args: Any) -> Any:
        monkeypatch.setattr(D, "hash_payloads", real)  # the racing write: no race
        write(store, VIEW, pa.table({
            "uid": pa.array([1], pa.int64()),
            "ts": pa.array([racing_second * 1_000_000], pa.timestamp("us", "UTC")),
            "amount": pa.array([9.0]), "count": pa.array([racing_second], pa.int64())}))
        return real(*args)

    monkeypatch.setattr(D, "hash_payloads", race_then_build)
    stats = write(store, VIEW, pa.table({
        "uid": pa.array([0, 1, 2], pa.int64()),
        "ts": pa.array([5_000_000_000] * 3, pa.timestamp("us", "UTC")),
        "amount": pa.array([5.0] * 3), "count": pa.array([5_000] * 3, pa.int64())}))
    assert read(store, [0, 1, 2], ["amount"])["amount"] == [5.0, kept, 5.0]
    assert (stats.written, stats.skipped) == ((2, 1) if kept == 9.0 else (3, 0))


def test_values_the_payload_cannot_hold_go_by_hset(tmp_path: Path, redis_url: str) -> None:
    """A value past 63 bytes, or one that reads as a decimal integer, sends its entity
    the HSET way (the server would encode that hash differently); the others are
    restored. ``ValueProto(float_val=x)`` is ``b"5"`` and x's 4 bytes: all digits for
    the float whose bytes are ``b"1234"``."""
    digits = float(np.frombuffer(b"1234", dtype="<f4")[0])
    store = redis_store(tmp_path, redis_url, features={"name": String, "ratio": Float32})
    names, ratios = ["plain", "x" * 100, "12345", ""], [0.5, 0.5, digits, 0.25]
    calls = _calls(store)
    table = pa.table({"uid": pa.array(range(4), pa.int64()),
                      "ts": pa.array([10**12] * 4, pa.timestamp("us", "UTC")),
                      "name": pa.array(names), "ratio": pa.array(ratios, pa.float32())})
    assert [bool(D.integer_like(cell)[0]) for cell in _packed(
        [b"5" + b"1234", b"\x12\x0512345", b"-0", b"0", b"5-1"])] == [True, False, True, True,
                                                                      False]
    assert write(store, VIEW, table).written == 4
    assert calls("hset") == 2  # the long name, the digits
    assert calls("restore") == 2
    got = read(store, list(range(4)), ["name", "ratio"])
    assert got["name"] == names
    assert got["ratio"] == pytest.approx(ratios)


def test_a_fixed_width_value_that_reads_as_an_integer_goes_by_hset(
        tmp_path: Path, redis_url: str) -> None:
    """A view whose values all have one width takes the one-block path; its entity whose
    ``ValueProto`` bytes are all digits (``b"5"`` and the float of ``b"1234"``) still goes
    the HSET way, the others by RESTORE, on creation and on replacement alike."""
    digits = float(np.frombuffer(b"1234", dtype="<f4")[0])
    store = redis_store(tmp_path, redis_url, features={"ratio": Float32})
    ratios = [0.5, digits, 0.25]
    for second in (10**6, 2 * 10**6):
        calls = _calls(store)
        table = pa.table({"uid": pa.array(range(3), pa.int64()),
                          "ts": pa.array([second * 10**6] * 3, pa.timestamp("us", "UTC")),
                          "ratio": pa.array(ratios, pa.float32())})
        assert write(store, VIEW, table).written == 3
        assert (calls("hset"), calls("restore")) == (1, 2)
        assert read(store, [0, 1, 2], ["ratio"])["ratio"] == pytest.approx(ratios)


@pytest.fixture
def acl_store(tmp_path: Path, redis_url: str) -> Iterator[Callable[[str], _AclStore]]:
    """Stores whose connection string logs in as a Redis ACL user of its own, with the
    given rules on top of every command, key and channel (``-restore``: no RESTORE). The
    user's name is unique, so is the connection string: the writer's answers per
    connection string (:func:`redis_writer.restore_version`) start fresh. Each store's
    database is flushed first; the users are deleted afterwards."""
    host, port = redis_url.split(":")
    admin = redis.Redis(host=host, port=int(port))
    users: list[str] = []

    def make(rules: str) -> _AclStore:
        user, password = f"ff-restore-{uuid.uuid4().hex}", f"pw-{uuid.uuid4().hex}"
        admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "&*",
                              "+@all", *rules.split())
        users.append(user)
        db = 13
        redis.Redis(host=host, port=int(port), db=db).flushdb()
        config = RedisOnlineStoreConfig(
            connection_string=f"{redis_url},db={db},username={user},password={password}")
        store = make_store(tmp_path / user, config, features=FEATURES)
        return _AclStore(store, user, admin)

    yield make
    if users:
        admin.execute_command("ACL", "DELUSER", *users)


class _AclStore:
    """A store, its ACL user, and the server's counters as seen by the default user."""

    def __init__(self, store: FeatureStore, user: str, admin: redis.Redis) -> None:
        self.store, self.user, self.admin = store, user, admin

    def counts(self) -> dict[str, int]:
        """Per command ``<name>`` (calls run) and ``<name>:rejected`` (refused before
        running, e.g. by ACLs); per error kind ``error:<KIND>`` (replies of that error)."""
        out: dict[str, int] = {}
        for name, value in self.admin.info("commandstats").items():
            command = name.removeprefix("cmdstat_")
            out[command] = int(value["calls"])
            out[f"{command}:rejected"] = int(value.get("rejected_calls", 0))
        for name, value in self.admin.info("errorstats").items():
            out[f"error:{name.removeprefix('errorstat_')}"] = int(value["count"])
        return out

    def since(self) -> Callable[[str], int]:
        """The change of each of :meth:`counts` from now."""
        before = self.counts()
        return lambda key: self.counts().get(key, 0) - before.get(key, 0)


@pytest.mark.parametrize("denied", ["-restore", "-dump", "-restore -dump"])
def test_user_without_restore_or_dump_is_never_sent_payloads(
    acl_store: Callable[[str], _AclStore], denied: str,
) -> None:
    """A Redis user that may not run RESTORE or DUMP (docs/production.md: both optional)
    fails the writer's probe, so every entity goes by HSET, nothing is lost, and no
    payload is ever sent: the server refuses exactly one command (the probe's), and the
    next write does not probe again."""
    acl = acl_store(denied)
    store = acl.store
    probe_restores = 0 if "-dump" in denied else 1  # the probe DUMPs before it RESTOREs
    since = acl.since()
    assert write(store, VIEW, _table(list(range(10)), 1_000, 0.5)).written == 10
    assert since("restore") == 0
    assert since("restore:rejected") == probe_restores
    assert since("dump") == (1 if probe_restores else 0)
    assert since("dump:rejected") == 1 - probe_restores
    assert since("error:NOPERM") == 1  # the probe's refusal, nothing else
    assert since("hset") == 11  # the probe's and the entities'
    assert read(store, list(range(10)), ["amount", "count"]) == {
        "uid": list(range(10)), "amount": [0.5 + i for i in range(10)], "count": [1_000] * 10}

    since = acl.since()  # the server's answer is kept: no probe, no RESTORE
    assert write(store, VIEW, _table(list(range(10, 20)), 2_000, 3.0)).written == 10
    assert since("restore") == since("restore:rejected") == since("dump:rejected") == 0
    assert since("error:NOPERM") == 0
    assert since("hset") == 10
    assert read(store, list(range(10, 20)), ["amount"])["amount"] == [
        3.0 + i for i in range(10, 20)]


def test_refused_payloads_fall_back_to_hset_and_the_server_is_probed_again(
    acl_store: Callable[[str], _AclStore], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A user whose RESTORE right is revoked after the probe passed (as a server replaced
    by an older Redis would refuse the payloads): every entity still lands, by HSET, with
    one warning, and the next write probes the server again instead of trusting the old
    answer."""
    # warned once per server address, for the whole process: start this test with none
    monkeypatch.setattr(redis_writer, "_refusals", set())
    acl = acl_store("")
    store = acl.store
    since = acl.since()  # the probe passes: new entities are restored
    assert write(store, VIEW, _table(list(range(100, 110)), 1_000, 0.5)).written == 10
    assert since("restore") == 2 + 10  # the probe's RESTORE and REPLACE; the entities'
    assert since("hset") == 1  # the probe's

    acl.admin.execute_command("ACL", "SETUSER", acl.user, "-restore")
    since = acl.since()
    with caplog.at_level("WARNING", logger="featureflow.online.redis"):
        stats = write(store, VIEW, _table(list(range(20)), 1_000, 0.5))
    assert (stats.written, stats.skipped) == (20, 0)
    assert since("restore:rejected") == 20  # every payload was sent, and refused
    assert since("restore") == 0
    assert since("error:NOPERM") == 20
    assert since("hset") == 20
    assert caplog.text.count("refused a RESTORE") == 1
    assert "NOPERM" in caplog.text
    assert read(store, list(range(20)), ["amount"])["amount"] == [0.5 + i for i in range(20)]

    since = acl.since()
    caplog.clear()
    with caplog.at_level("WARNING", logger="featureflow.online.redis"):
        stats = write(store, VIEW, _table(list(range(20, 30)), 2_000, 4.0))
    assert (stats.written, stats.skipped) == (10, 0)
    assert since("dump") == 1  # probed again (HSET, DUMP, then the refused RESTORE)
    assert since("restore:rejected") == 1  # the probe's: no payload sent
    assert since("restore") == 0
    assert since("hset") == 1 + 10
    assert "refused a RESTORE" not in caplog.text
    assert read(store, list(range(20, 30)), ["amount"])["amount"] == [
        4.0 + i for i in range(20, 30)]


def _key(store: FeatureStore, uid: int) -> bytes:
    """Feast's Redis key of entity ``uid``."""
    from feast.infra.online_stores.helpers import _redis_key
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey
    from feast.protos.feast.types.Value_pb2 import Value
    entity = EntityKey(join_keys=["uid"], entity_values=[Value(int64_val=uid)])
    return _redis_key(store.config.project, entity,
                      entity_key_serialization_version=store.config.entity_key_serialization_version)


_TWISTS = ("none", "foreign field", "ttl", "missing feature", "orphan field")


def _twist(client: redis.Redis, key: bytes, twist: str) -> None:
    """What other writers may have left in an entity's hash, or on its key."""
    if twist == "foreign field":  # a field of a view not in the write
        client.hset(key, mapping={b"_ts:other_view": b"\x08\x01", b"\x01\x02\x03\x04": b"5"})
    elif twist == "ttl":
        client.expire(key, 5_000)
    elif twist == "missing feature":  # e.g. a feature added to the view since
        client.hdel(key, _mmh3_field("amount"))
    elif twist == "orphan field":  # e.g. a feature removed from the view since
        client.hset(key, _mmh3_field("removed"), b"5")


def _mmh3_field(feature: str) -> bytes:
    from feast.infra.online_stores.helpers import _mmh3
    return _mmh3(f"{VIEW}:{feature}")


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from([None, 1_000, 2_000, 3_000]), st.sampled_from(_TWISTS)),
                min_size=1, max_size=12))
def test_replaced_hashes_equal_what_hset_leaves(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, monkeypatch: pytest.MonkeyPatch,
    entities: list[tuple[int | None, str]],
) -> None:
    """The oracle is the checked HSET path (``RESTORE`` off): whatever each entity's hash
    held before (nothing; an older, equal or newer row; other views' fields, a TTL, a
    feature field missing or one more), the write with payloads leaves every hash, every
    key's TTL (set or not) and the counts exactly as HSET does."""
    ids = list(range(len(entities)))
    results = []
    for restore in (True, False):
        store = redis_store(tmp_path_factory.mktemp("replace"), redis_url, features=FEATURES)
        client = redis_client(store)
        for uid, (second, twist) in enumerate(entities):
            if second is not None:
                write(store, VIEW, _table([uid], second, -1.0))
                _twist(client, _key(store, uid), twist)
        with monkeypatch.context() as patch:
            patch.setattr(redis_writer, "RESTORE", restore)
            stats = write(store, VIEW, _table(ids, 2_000, 0.5))
        results.append(({key: (fields, client.ttl(key) > 0)
                          for key, fields in redis_hashes(store).items()},
                         (stats.written, stats.skipped)))
    assert results[0] == results[1]


def test_refused_replacements_fall_back_to_hset_and_the_server_is_probed_again(
    acl_store: Callable[[str], _AclStore], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Existing hashes whose RESTORE ... REPLACE the server refuses in the transaction (the
    RESTORE right revoked after the probe passed): every entity still lands, by HSET,
    with one warning naming the refusal, and the next write probes the server again."""
    monkeypatch.setattr(redis_writer, "_refusals", set())
    acl = acl_store("")
    store = acl.store
    ids = list(range(10))
    assert write(store, VIEW, _table(ids, 1_000, 0.5)).written == 10
    since = acl.since()
    assert write(store, VIEW, _table(ids, 2_000, 1.5)).written == 10
    assert since("restore") == 10  # replaced
    assert since("hset") == 0

    acl.admin.execute_command("ACL", "SETUSER", acl.user, "-restore")
    since = acl.since()
    with caplog.at_level("WARNING", logger="featureflow.online.redis"):
        stats = write(store, VIEW, _table(ids, 3_000, 2.5))
    assert (stats.written, stats.skipped) == (10, 0)
    assert since("restore:rejected") == 10
    assert since("hset") == 10
    assert caplog.text.count("refused a RESTORE ... REPLACE") == 1
    assert "no permissions to run the 'restore' command" in caplog.text  # the server's reason
    assert read(store, ids, ["amount"])["amount"] == [2.5 + i for i in ids]

    since = acl.since()
    assert write(store, VIEW, _table(ids, 4_000, 3.5)).written == 10
    assert since("dump") == 1  # probed again: refused, so no payload is sent
    assert since("restore:rejected") == 1
    assert since("hset") == 1 + 10
    assert read(store, ids, ["amount"])["amount"] == [3.5 + i for i in ids]


@pytest.mark.parametrize("denied", ["-hlen", "-pttl"])
def test_user_who_may_not_run_the_layout_checks_gets_hset(
    acl_store: Callable[[str], _AclStore], denied: str,
) -> None:
    """A user who may RESTORE but not run the replacing path's checks (``HLEN``, ``PTTL``)
    fails the probe's run of them: every entity, new or existing, goes by HSET, and the
    writer does not probe again."""
    acl = acl_store(denied)
    store = acl.store
    since = acl.since()
    assert write(store, VIEW, _table(list(range(10)), 1_000, 0.5)).written == 10
    assert since("restore") == 1  # the probe's own; its checks were refused
    assert since("hset") == 1 + 10
    since = acl.since()
    assert write(store, VIEW, _table(list(range(10)), 2_000, 1.5)).written == 10
    assert since("restore") == since("dump") == 0
    assert since("hset") == 10
    assert read(store, list(range(10)), ["amount"])["amount"] == [1.5 + i for i in range(10)]
