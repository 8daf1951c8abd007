"""The newest event wins under any interleaving, decided inside the store.

Redis decides "not older" in a Lua script reading the stored
``google.protobuf.Timestamp`` (varints, negative seconds as 10-byte two's
complement): random microsecond times over 0001-9999 check that decision against
plain integer order, and so does the script's comparison alone, called directly on
stored bytes of every form it reads (the canonical bytes of this era, whose seconds
it reads without a decode loop, and the rest). Concurrent writers of the same
entities (two threads, each with its own store client, older and newer batches
interleaved at random) must end in the newest row per entity on both stores.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pyarrow as pa
import pytest
import redis
from feast import FeatureStore
from feast.types import Float64, Int64
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from online_helpers import VIEW, read, redis_client, redis_store, sqlite_store

from featureflow.online import write
from featureflow.online.redis import _LUA_NEWER

FEATURES = {"amount": Float64, "count": Int64}
_MICROS = st.integers(-62_135_596_800 * 10**6, 253_402_300_799 * 10**6)
_SECONDS = st.one_of(
    st.integers(-62_135_596_800, 253_402_300_799),  # 0001 .. 9999
    st.integers(2**28 - 2, 2**35 + 1),  # the era read without a decode loop, and its edges
    st.sampled_from([0, 1, 127, 128, 2**28, 1_796_000_000, 2**35 - 1, -1]),
)
_NANOS = st.one_of(st.just(0), st.integers(0, 999_999_999),
                   st.sampled_from([1, 127, 128, 2**14, 2**21 - 1, 2**21, 2**28, 999_999_999]))
_NOT_OLDER = _LUA_NEWER + "return newer(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])) and 1 or 0"


def _table(rows: list[tuple[int, int]]) -> pa.Table:
    """rows: (uid, event time in microseconds); amount and count record the time."""
    return pa.table({
        "uid": pa.array([r[0] for r in rows], pa.int64()),
        "ts": pa.array([r[1] for r in rows], pa.timestamp("us", "UTC")),
        "amount": pa.array([float(r[1]) for r in rows], pa.float64()),
        "count": pa.array([r[1] for r in rows], pa.int64()),
    })


def _stored_micros(store: FeatureStore) -> dict[int, int]:
    """uid -> the event time (µs) in the entity's ``_ts`` field."""
    out = {}
    client = redis_client(store)
    for key in client.scan_iter():
        ts = Timestamp()
        ts.ParseFromString(client.hget(key, f"_ts:{VIEW}".encode()))
        uid = int.from_bytes(key[-8 - len(store.project):-len(store.project)], "little",
                             signed=True)
        out[uid] = ts.ToMicroseconds()
    return out


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(st.lists(st.tuples(st.integers(0, 3), _MICROS), min_size=1,
                                max_size=4, unique_by=lambda r: r[0]),
                       min_size=1, max_size=5))
def test_redis_keeps_the_newest_time_over_the_whole_range(tmp_path_factory, redis_url,  # type: ignore[no-untyped-def]
                                                          writes) -> None:
    store = redis_store(tmp_path_factory.mktemp("lua"), redis_url, features=FEATURES)
    newest: dict[int, int] = {}
    for rows in writes:
        stats = write(store, VIEW, _table(rows))
        assert stats.written == sum(uid not in newest or us >= newest[uid] for uid, us in rows)
        for uid, us in rows:
            newest[uid] = max(us, newest.get(uid, us))
    assert _stored_micros(store) == newest


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(st.tuples(_SECONDS, _NANOS), min_size=1, max_size=2),
       new=st.tuples(_SECONDS, _NANOS),
       relation=st.sampled_from(["any", "same second", "equal", "1 ns before", "1 ns after"]))
def test_the_scripts_comparison_is_integer_order_on_every_stored_form(  # type: ignore[no-untyped-def]
        redis_url, parts, new, relation) -> None:
    # two serialisations back to back are one valid message, merged (last value wins):
    # stored bytes of another form than the canonical one
    old = b"".join(Timestamp(seconds=s, nanos=n).SerializeToString() for s, n in parts)
    parsed = Timestamp()
    parsed.ParseFromString(old)
    stored = (parsed.seconds, parsed.nanos)

    def shifted(nanos: int) -> tuple[int, int]:  # (seconds, nanos) of stored + nanos
        return divmod(stored[0] * 10**9 + stored[1] + nanos, 10**9)

    new = {"any": new, "same second": (stored[0], new[1]), "equal": stored,
           "1 ns before": shifted(-1), "1 ns after": shifted(1)}[relation]
    host, port = redis_url.split(":")
    client = redis.Redis(host=host, port=int(port))
    decided = client.eval(_NOT_OLDER, 0, old, str(new[0]), str(new[1]))
    assert decided == int(new >= stored), (old.hex(), new)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
@pytest.mark.parametrize("seed", [1, 2])
def test_concurrent_writers_end_in_the_newest_row(tmp_path: Path, redis_url: str, kind: str,
                                                  seed: int) -> None:
    rng = random.Random(seed)
    store = (sqlite_store(tmp_path, features=FEATURES) if kind == "sqlite"
             else redis_store(tmp_path, redis_url, features=FEATURES))
    ids = list(range(300))  # a few Redis chunks, so WATCH aborts and retries happen
    base = 1_700_000_000
    # each writer gets shuffled batches of distinct whole seconds per entity
    seconds = {uid: rng.sample(range(1, 1_000), 8) for uid in ids}
    plans: list[list[list[tuple[int, int]]]] = [[], []]
    for k in range(8):
        batch = [(uid, (base + seconds[uid][k]) * 1_000_000) for uid in ids]
        plans[k % 2].append(rng.sample(batch, len(batch)))
    errors: list[BaseException] = []

    def run(batches: list[list[tuple[int, int]]]) -> None:
        own = FeatureStore(config=store.config)
        try:
            for rows in batches:
                write(own, VIEW, _table(rows))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(p,)) for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = read(store, ids, ["count"])["count"]
    assert got == [(base + max(seconds[uid])) * 1_000_000 for uid in ids]
