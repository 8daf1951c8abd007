"""A tiny in-memory Feast online store plug-in: a store type featureflow does not know.

Used to check that ``featureflow.online.write`` falls back to Feast's own writer.
It is a real ``OnlineStore`` loaded by Feast (``type: online_memory_store.MemoryOnlineStore``),
not a mock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from feast import Entity, FeatureView, RepoConfig
from feast.infra.online_stores.online_store import OnlineStore
from feast.protos.feast.types.EntityKey_pb2 import EntityKey as EntityKeyProto
from feast.protos.feast.types.Value_pb2 import Value as ValueProto
from feast.repo_config import FeastConfigBaseModel

DATA: dict[tuple[str, bytes], tuple[datetime, dict[str, ValueProto]]] = {}


class MemoryOnlineStoreConfig(FeastConfigBaseModel):
    type: Literal["online_memory_store.MemoryOnlineStore"] = (
        "online_memory_store.MemoryOnlineStore"
    )


class MemoryOnlineStore(OnlineStore):
    def online_write_batch(
        self, config: RepoConfig, table: FeatureView,
        data: list[tuple[EntityKeyProto, dict[str, ValueProto], datetime, datetime | None]],
        progress: Callable[[int], Any] | None,
    ) -> None:
        for key, values, ts, _ in data:
            DATA[(table.name, key.SerializeToString(deterministic=True))] = (ts, values)

    def online_read(
        self, config: RepoConfig, table: FeatureView, entity_keys: list[EntityKeyProto],
        requested_features: list[str] | None = None,
    ) -> list[tuple[datetime | None, dict[str, ValueProto] | None]]:
        out: list[tuple[datetime | None, dict[str, ValueProto] | None]] = []
        for key in entity_keys:
            hit = DATA.get((table.name, key.SerializeToString(deterministic=True)))
            out.append(hit if hit is not None else (None, None))
        return out

    def update(self, config: RepoConfig, tables_to_delete: Sequence[FeatureView],
               tables_to_keep: Sequence[FeatureView], entities_to_delete: Sequence[Entity],
               entities_to_keep: Sequence[Entity], partial: bool) -> None:
        return None

    def teardown(self, config: RepoConfig, tables: Sequence[FeatureView],
                 entities: Sequence[Entity]) -> None:
        DATA.clear()
