"""The writers read a view's layout once per registry version, and a changed view at once.

Feast turns a view's proto into objects on every registry lookup, which costs more
than a small micro-batch's write, so ``view_layout`` keeps the layout while Feast's
own cached registry proto stays the same. A view applied anew (a feature added) must
be written with its new layout by the next write: through the same store object
(``apply`` updates the proto in place) and through another process's store (a new
registry proto once the store reads the registry again).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from feast import Entity, FeatureStore, FeatureView, Field, FileSource, RepoConfig
from feast.infra.online_stores.sqlite import SqliteOnlineStoreConfig
from feast.types import Float64, Int64
from feast.value_type import ValueType
from online_helpers import sqlite_rows

from featureflow.online import batch, write

PROJECT = "ffonline"  # what sqlite_rows reads
VIEW = "everything"


def _config(root: Path) -> RepoConfig:
    return RepoConfig(
        project=PROJECT, provider="local", registry=str(root / "registry.db"),
        online_store=SqliteOnlineStoreConfig(path=str(root / "online.db")),
        entity_key_serialization_version=3, repo_path=root,
    )  # fmt: skip


def _apply(store: FeatureStore, features: list[str]) -> None:
    entity = Entity(name="e_uid", join_keys=["uid"], value_type=ValueType.INT64)
    store.apply([
        entity,
        FeatureView(
            name=VIEW, entities=[entity], online=True,
            schema=[Field(name="uid", dtype=Int64)]
            + [Field(name=name, dtype=Float64) for name in features],
            source=FileSource(path="unused.parquet", timestamp_field="ts"),
        ),
    ])  # fmt: skip


def _table(uid: int, second: int, **values: float) -> pa.Table:
    return pa.table({
        "uid": pa.array([uid], pa.int64()),
        "ts": pa.array([second * 1_000_000], pa.timestamp("us", "UTC")),
        **{name: pa.array([value]) for name, value in values.items()},
    })  # fmt: skip


def _features_written(store: FeatureStore) -> set[str]:
    return {row[1] for row in sqlite_rows(store)}


def test_the_layout_is_read_once_per_registry_version(tmp_path: Path) -> None:
    store = FeatureStore(config=_config(tmp_path))
    _apply(store, ["a"])
    write(store, VIEW, _table(1, 10, a=1.0))
    cached = batch.view_layout(store, VIEW)
    write(store, VIEW, _table(2, 11, a=2.0))
    assert batch.view_layout(store, VIEW)[1] is cached[1]  # no new lookup


def test_a_view_applied_anew_is_written_with_its_new_features(tmp_path: Path) -> None:
    store = FeatureStore(config=_config(tmp_path))
    _apply(store, ["a"])
    write(store, VIEW, _table(1, 10, a=1.0))
    assert _features_written(store) == {"a"}

    _apply(store, ["a", "b"])  # the same store object: its registry proto changes in place
    write(store, VIEW, _table(1, 11, a=1.0, b=2.0))
    assert _features_written(store) == {"a", "b"}

    elsewhere = FeatureStore(config=_config(tmp_path))  # another process's apply
    _apply(elsewhere, ["a", "b", "c"])  # Feast rereads a changed registry file
    write(store, VIEW, _table(1, 12, a=1.0, b=2.0, c=3.0))
    assert _features_written(store) == {"a", "b", "c"}
