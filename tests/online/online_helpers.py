"""Small Feast repos in temporary directories, and random tables for them."""

from __future__ import annotations

import itertools
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import redis
from feast import Entity, FeatureStore, FeatureView, Field, FileSource, RepoConfig
from feast.infra.online_stores.redis import RedisOnlineStoreConfig
from feast.infra.online_stores.sqlite import SqliteOnlineStoreConfig
from feast.types import (
    Array,
    Bool,
    Bytes,
    Float32,
    Float64,
    Int32,
    Int64,
    String,
    UnixTimestamp,
)
from feast.value_type import ValueType
from hypothesis import strategies as st

PROJECT = "ffonline"
VIEW = "everything"

# Every feature type featureflow encodes, as (Feast dtype, Arrow type, element strategy).
_INT32 = st.integers(-(2**31), 2**31 - 1)
# Feast reads int64 columns with nulls through float64, so stay where that is exact.
_INT64 = st.integers(-(2**53), 2**53)
_FLOAT64 = st.floats(allow_nan=True, allow_infinity=True)
_FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=True)
_TIMES = st.datetimes(
    min_value=datetime(1950, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
_TEXT = st.text(max_size=6)
SCALARS: dict[str, tuple[Any, pa.DataType, st.SearchStrategy[Any]]] = {
    "i32": (Int32, pa.int32(), _INT32),
    "i64": (Int64, pa.int64(), _INT64),
    "f32": (Float32, pa.float32(), _FLOAT32),
    "f64": (Float64, pa.float64(), _FLOAT64),
    "flag": (Bool, pa.bool_(), st.booleans()),
    "text": (String, pa.string(), _TEXT),
    "blob": (Bytes, pa.binary(), st.binary(max_size=6)),
    "when": (UnixTimestamp, pa.timestamp("us", tz="UTC"), _TIMES),
}
LISTS: dict[str, tuple[Any, pa.DataType, st.SearchStrategy[Any]]] = {
    "l_i32": (Array(Int32), pa.list_(pa.int32()), _INT32),
    "l_i64": (Array(Int64), pa.list_(pa.int64()), st.integers(-(2**63), 2**63 - 1)),
    "l_f32": (Array(Float32), pa.list_(pa.float32()), _FLOAT32),
    "l_f64": (Array(Float64), pa.list_(pa.float64()), st.floats(allow_nan=False)),
    "l_flag": (Array(Bool), pa.list_(pa.bool_()), st.booleans()),
    "l_text": (Array(String), pa.list_(pa.string()), _TEXT),
    "l_when": (Array(UnixTimestamp), pa.list_(pa.timestamp("us", tz="UTC")), _TIMES),
}
FEATURES = SCALARS | LISTS


def make_store(root: Path, online_store: Any, *, key_version: int = 3,
               features: dict[str, Any] | None = None,
               join_keys: tuple[tuple[str, ValueType], ...] = (("uid", ValueType.INT64),),
               created_column: str = "") -> FeatureStore:
    """A Feast repo in ``root`` with one view ``VIEW`` of ``features`` (name -> dtype)."""
    root.mkdir(parents=True, exist_ok=True)
    config = RepoConfig(
        project=PROJECT, provider="local", registry=str(root / "registry.db"),
        online_store=online_store, entity_key_serialization_version=key_version,
        repo_path=root,
    )
    store = FeatureStore(config=config)
    entities = [Entity(name=f"e_{name}", join_keys=[name], value_type=vt)
                for name, vt in join_keys]
    key_dtypes = {ValueType.INT64: Int64, ValueType.INT32: Int32, ValueType.STRING: String,
                  ValueType.BYTES: Bytes}
    dtypes = features if features is not None else {n: t[0] for n, t in FEATURES.items()}
    view = FeatureView(
        name=VIEW, entities=entities, ttl=timedelta(days=36500), online=True,
        schema=[Field(name=name, dtype=key_dtypes[vt]) for name, vt in join_keys]
        + [Field(name=name, dtype=dtype) for name, dtype in dtypes.items()],
        source=FileSource(path=str(root / "unused.parquet"), timestamp_field="ts",
                          created_timestamp_column=created_column),
    )
    store.apply([*entities, view])
    return store


def sqlite_store(root: Path, **kwargs: Any) -> FeatureStore:
    """``make_store`` with a SQLite online store in ``root``."""
    return make_store(root, SqliteOnlineStoreConfig(path=str(root / "online.db")), **kwargs)


_redis_dbs = itertools.count(1)


def redis_store(root: Path, connection_string: str, **kwargs: Any) -> FeatureStore:
    """``make_store`` on its own (flushed) database of the test redis-server."""
    db = next(_redis_dbs) % 16
    host, port = connection_string.split(":")
    redis.Redis(host=host, port=int(port), db=db).flushdb()
    config = RedisOnlineStoreConfig(connection_string=f"{connection_string},db={db}")
    return make_store(root, config, **kwargs)


def sqlite_path(store: FeatureStore) -> Path:
    """The SQLite file of the store's online store."""
    return Path(store.config.repo_path) / store.config.online_store.path


def sqlite_rows(store: FeatureStore) -> list[tuple[Any, ...]]:
    """Every row of the view's SQLite table, sorted."""
    with sqlite3.connect(sqlite_path(store)) as conn:
        return sorted(conn.execute(
            "SELECT entity_key, feature_name, value, value_text, vector_value, event_ts, "
            f"created_ts FROM {PROJECT}_{VIEW}"
        ).fetchall())


def redis_client(store: FeatureStore) -> redis.Redis:
    """A client on the store's Redis database."""
    cs = store.config.online_store.connection_string
    address, db = cs.split(",db=")
    host, port = address.split(":")
    return redis.Redis(host=host, port=int(port), db=int(db))


def redis_hashes(store: FeatureStore) -> dict[bytes, dict[bytes, bytes]]:
    """Every hash of the store's Redis database."""
    client = redis_client(store)
    return {key: client.hgetall(key) for key in client.scan_iter()}


def read(store: FeatureStore, ids: list[int], features: list[str] | None = None,
         key: str = "uid") -> dict[str, list[Any]]:
    """Feast's own read of ``ids`` (``get_online_features(...).to_dict()``)."""
    names = features if features is not None else list(FEATURES)
    return store.get_online_features(
        features=[f"{VIEW}:{n}" for n in names], entity_rows=[{key: i} for i in ids]
    ).to_dict()


@st.composite
def tables(draw: st.DrawFn, ids: st.SearchStrategy[list[int]] | None = None,
           features: dict[str, tuple[Any, pa.DataType, st.SearchStrategy[Any]]] = FEATURES,
           null_rate: float = 0.2) -> pa.Table:
    """Random tables for ``VIEW``: distinct ``uid``s, a ``ts`` column, every feature."""
    uids = draw(ids if ids is not None else
                st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=12, unique=True))
    n = len(uids)
    columns: dict[str, pa.Array] = {
        "uid": pa.array(uids, pa.int64()),
        "ts": pa.array(draw(st.lists(_TIMES, min_size=n, max_size=n)), pa.timestamp("us", "UTC")),
    }
    maybe_null = st.floats(0, 1).map(lambda x: x < null_rate)
    for name, (_, arrow, element) in features.items():
        values: list[Any] = []
        for _ in range(n):
            if draw(maybe_null):
                values.append(None)
            elif name in LISTS:
                values.append(draw(st.lists(element, max_size=4)))
            else:
                values.append(draw(element))
        columns[name] = pa.array(values, arrow)
    return pa.table(columns)


def amounts_table(n: int, amount: float) -> pa.Table:
    """``n`` entities (``uid`` 0..n-1), one ``amount`` each, all at one event time."""
    return pa.table({
        "uid": pa.array(range(n), pa.int64()),
        "ts": pa.array([1_000_000_000] * n, pa.timestamp("us", "UTC")),
        "amount": pa.array([amount] * n),
    })  # fmt: skip
