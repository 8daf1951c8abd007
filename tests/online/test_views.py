"""``write_views``: several views of one entity key in one write (Redis: one HSET per entity).

The oracle is ``write`` itself, view after view: writing the views together must
leave exactly the hashes (bytes) and counts that writing them one by one leaves,
whatever is stored before (older, newer or equal event times per view), and read
back through Feast alike. Redis keeps all views of an entity in one hash, so a
view whose row is stale must keep its fields while a newer view's are replaced.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
import redis
from feast import Entity, FeatureStore, FeatureView, Field, FileSource, RepoConfig
from feast.infra.online_stores.redis import RedisOnlineStoreConfig
from feast.types import Float64, Int64
from feast.value_type import ValueType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from online_helpers import redis_client, redis_hashes

from featureflow.online import write, write_views

PROJECT = "ffviews"
VIEWS = {"rolling": ("amount", "count"), "sessions": ("duration", "events", "total")}
BASE_S = 1_700_000_000
_dbs = itertools.count(3)


def _store(root: Path, redis_url: str, ttl: int | None = None) -> FeatureStore:
    """A repo with the two views of ``VIEWS`` on entity ``uid``, on a flushed Redis db."""
    db = next(_dbs) % 16
    host, port = redis_url.split(":")
    redis.Redis(host=host, port=int(port), db=db).flushdb()
    root.mkdir(parents=True, exist_ok=True)
    config = RepoConfig(
        project=PROJECT, provider="local", registry=str(root / "registry.db"),
        online_store=RedisOnlineStoreConfig(
            connection_string=f"{redis_url},db={db}", key_ttl_seconds=ttl
        ),
        entity_key_serialization_version=3, repo_path=root,
    )  # fmt: skip
    store = FeatureStore(config=config)
    user = Entity(name="user", join_keys=["uid"], value_type=ValueType.INT64)
    views = [
        FeatureView(
            name=name, entities=[user], ttl=timedelta(days=36500), online=True,
            schema=[Field(name="uid", dtype=Int64)]
            + [Field(name=f, dtype=Float64 if i % 2 == 0 else Int64) for i, f in enumerate(fs)],
            source=FileSource(path=str(root / "unused.parquet"), timestamp_field="ts"),
        )
        for name, fs in VIEWS.items()
    ]
    store.apply([user, *views])
    return store


def _table(view: str, rows: list[tuple[int, int, int]]) -> pa.Table:
    """rows: (uid, event second offset, microseconds); features follow from them."""
    columns: dict[str, pa.Array] = {
        "uid": pa.array([r[0] for r in rows], pa.int64()),
        "ts": pa.array(
            [(BASE_S + r[1]) * 1_000_000 + r[2] for r in rows], pa.timestamp("us", "UTC")
        ),
    }
    for i, name in enumerate(VIEWS[view]):
        values = [r[0] * 7 + r[1] * 3 + r[2] + i for r in rows]
        columns[name] = pa.array(
            [float(v) for v in values] if i % 2 == 0 else values,
            pa.float64() if i % 2 == 0 else pa.int64(),
        )
    return pa.table(columns)


_rows = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 3), st.sampled_from([0, 500_000])),
    max_size=40, unique_by=lambda r: r[0],
)
_batches = st.fixed_dictionaries({view: _rows for view in VIEWS})


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=_batches, now=_batches)
def test_one_write_for_all_views_equals_writing_them_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str,
    before: dict[str, list[tuple[int, int, int]]], now: dict[str, list[tuple[int, int, int]]],
) -> None:  # fmt: skip
    together = _store(tmp_path_factory.mktemp("together"), redis_url)
    apart = _store(tmp_path_factory.mktemp("apart"), redis_url)
    for store in (together, apart):
        for view, rows in before.items():
            write(store, view, _table(view, rows))
    stats = write_views(together, {view: _table(view, rows) for view, rows in now.items()})
    for view, rows in now.items():
        alone = write(apart, view, _table(view, rows))
        assert (stats[view].written, stats[view].skipped) == (alone.written, alone.skipped)
    assert redis_hashes(together) == redis_hashes(apart)


def test_a_stale_view_keeps_its_fields_in_the_shared_hash(
    tmp_path: Path, redis_url: str
) -> None:
    store = _store(tmp_path, redis_url, ttl=3600)
    write_views(store, {"rolling": _table("rolling", [(1, 1, 0)]),
                        "sessions": _table("sessions", [(1, 3, 0)])})  # fmt: skip
    stats = write_views(store, {"rolling": _table("rolling", [(1, 2, 0)]),
                                "sessions": _table("sessions", [(1, 2, 0)])})  # fmt: skip
    assert (stats["rolling"].written, stats["sessions"].skipped) == (1, 1)
    online = store.get_online_features(
        features=["rolling:count", "sessions:events"], entity_rows=[{"uid": 1}]
    ).to_dict()
    assert online["count"] == [1 * 7 + 2 * 3 + 1]  # rolling: the newer row
    assert online["events"] == [1 * 7 + 3 * 3 + 1]  # sessions: still the stored one
    client = redis_client(store)
    assert all(0 < client.ttl(key) <= 3600 for key in client.scan_iter())  # EXPIRE too


def test_more_entities_than_one_block_of_commands(tmp_path: Path, redis_url: str) -> None:
    """Commands are built in blocks of ``_BLOCK`` entities: a write spanning several."""
    from featureflow.online.redis import _BLOCK

    many = [(uid, uid % 3, 0) for uid in range(2 * _BLOCK + 17)]
    together = _store(tmp_path / "together", redis_url)
    apart = _store(tmp_path / "apart", redis_url)
    tables = {"rolling": _table("rolling", many), "sessions": _table("sessions", many[::2])}
    stats = write_views(together, tables)
    for view, table in tables.items():
        assert stats[view].written == write(apart, view, table).written == table.num_rows
    assert redis_hashes(together) == redis_hashes(apart)


def test_a_stream_steady_state_replaces_each_hash_in_one_restore(
    tmp_path: Path, redis_url: str
) -> None:
    """Every entity with a newer row of every view (a stream's steady state) is replaced
    by one RESTORE ... REPLACE of the whole hash, no HSET; one whose hash misses a view
    of the write (entity 0: rolling only, before) or that the write brings only one view
    for (entity 1) goes by HSET and keeps the other view's fields."""
    store = _store(tmp_path, redis_url)
    client = redis_client(store)
    ids = list(range(300))
    write_views(store, {"rolling": _table("rolling", [(u, 1, 0) for u in ids]),
                        "sessions": _table("sessions", [(u, 1, 0) for u in ids[1:]])})
    before = {k: int(v["calls"]) for k, v in client.info("commandstats").items()}
    stats = write_views(store, {"rolling": _table("rolling", [(u, 2, 0) for u in ids]),
                                "sessions": _table("sessions", [(u, 2, 0) for u in ids
                                                                if u != 1])})
    calls = {k: int(v["calls"]) - before.get(k, 0) for k, v in client.info("commandstats").items()}
    assert (stats["rolling"].written, stats["sessions"].written) == (300, 299)
    assert calls.get("cmdstat_restore") == 298
    assert calls.get("cmdstat_hset") == 2
    online = store.get_online_features(features=["rolling:count", "sessions:events"],
                                       entity_rows=[{"uid": u} for u in (0, 1, 2)]).to_dict()
    assert online["count"] == [u * 7 + 2 * 3 + 1 for u in (0, 1, 2)]
    assert online["events"] == [0 * 7 + 2 * 3 + 1, 1 * 7 + 1 * 3 + 1, 2 * 7 + 2 * 3 + 1]
