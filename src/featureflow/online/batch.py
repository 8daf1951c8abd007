"""One write call's input, checked against the view and reduced to the latest row per entity.

A ``Batch`` holds, per distinct entity of the table: its serialised entity key
(Feast's layout), its event timestamp (microseconds since the epoch, UTC), the
optional created timestamp, and the feature columns cast to the view's
schema. Everything store-specific (SQLite rows, Redis commands) is built from
it by the store modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from feast import FeatureStore, FeatureView
from feast.errors import FeatureViewNotFoundException
from feast.value_type import ValueType

from featureflow.errors import OnlineStoreError
from featureflow.features import latest_rows
from featureflow.online import _bytes as B
from featureflow.online import encoding as E

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ViewLayout:
    """What featureflow needs to know of a Feast feature view to write it."""

    name: str
    """The view's name (Feast's table/hash-field names add versions and project)."""
    join_keys: tuple[tuple[str, ValueType], ...]
    """Join key columns and their Feast types, in the view's order."""
    features: tuple[tuple[str, ValueType], ...]
    """Feature columns and their Feast types, in the view's order."""
    timestamp_field: str
    """Column holding the event timestamp (the view's batch source ``timestamp_field``)."""
    created_timestamp_column: str | None
    """Column holding the created timestamp, when the batch source declares one."""

    def unsupported(self, key_version: int) -> str | None:
        """Why featureflow cannot write this view itself, or None when it can."""
        if key_version not in (2, 3):
            return f"entity_key_serialization_version {key_version}"
        for name, value_type in self.join_keys:
            if value_type not in E.SUPPORTED_KEY_TYPES:
                return f"join key {name!r} of type {value_type.name}"
        for name, value_type in self.features:
            if value_type not in E.SUPPORTED_VALUE_TYPES:
                return f"feature {name!r} of type {value_type.name}"
        if not self.join_keys:
            return "a view without entities"
        return None


@dataclass(frozen=True)
class _CachedLayout:
    registry_proto: object
    """The registry proto the view was read from (Feast's own cached copy)."""
    last_updated: bytes
    """That proto's ``last_updated`` (an in-process ``apply`` changes it in place)."""
    view: FeatureView
    layout: ViewLayout


_layouts: dict[tuple[int, str], _CachedLayout] = {}
_MAX_CACHED_LAYOUTS = 256


def view_layout(store: FeatureStore, view: str) -> tuple[FeatureView, ViewLayout]:
    """The Feast feature view (or stream feature view) named ``view`` and its layout.

    Read through Feast's registry cache, as Feast's own online reads do: Feast keeps
    the registry proto for ``cache_ttl_seconds`` (and, for a file registry in its
    default ``sync`` mode, reads it again as soon as the file changes). The layout is
    built once per such proto: Feast's lookups turn the view's proto into objects
    every time (~12 ms for the example's stream view), more than a small
    micro-batch's whole write, and ``FeatureStore.get_*_view`` reread the registry
    file on every call besides. A registry without that cache is read every time.
    """
    cached_proto = getattr(store.registry, "_get_registry_proto", None)
    if cached_proto is None:
        return _read_view_layout(store, view)
    proto = cached_proto(project=store.project, allow_cache=True)
    version = proto.last_updated.SerializeToString()
    key = (id(store), view)
    cached = _layouts.get(key)
    if cached is None or cached.registry_proto is not proto or cached.last_updated != version:
        fv, layout = _read_view_layout(store, view, allow_registry_cache=True)
        cached = _CachedLayout(proto, version, fv, layout)
        if len(_layouts) >= _MAX_CACHED_LAYOUTS:
            _layouts.clear()  # many short-lived stores (tests): keep none alive for long
        _layouts[key] = cached
    return cached.view, cached.layout


def _read_view_layout(
    store: FeatureStore, view: str, *, allow_registry_cache: bool = False
) -> tuple[FeatureView, ViewLayout]:
    fv: FeatureView | None = None
    getters: tuple[Callable[..., FeatureView], ...] = (
        store.get_stream_feature_view, store.get_feature_view)
    for getter in getters:
        try:
            fv = getter(view, allow_registry_cache=allow_registry_cache)
            break
        except FeatureViewNotFoundException:
            continue
    if fv is None:
        msg = (f"feature view {view!r} is not in the registry of project "
               f"{store.project!r}: run `feast apply` in the repo, or check the name")
        raise OnlineStoreError(msg)
    source = getattr(fv, "batch_source", None) or getattr(fv, "stream_source", None)
    timestamp_field = getattr(source, "timestamp_field", "") or getattr(
        fv, "timestamp_field", ""
    )
    if not timestamp_field:
        msg = f"feature view {view!r} has no timestamp_field on its source"
        raise OnlineStoreError(msg)
    created = getattr(source, "created_timestamp_column", "") or None
    layout = ViewLayout(
        name=view,
        join_keys=tuple(
            (f.name, f.dtype.to_value_type()) for f in getattr(fv, "entity_columns", [])
        ),
        features=tuple((f.name, f.dtype.to_value_type()) for f in fv.features),
        timestamp_field=timestamp_field,
        created_timestamp_column=created,
    )
    return fv, layout


@dataclass(frozen=True)
class Batch:
    """The rows to write: one per distinct entity, the latest of the table."""

    keys: B.Packed
    """Feast-serialised entity key per entity (without the Redis project suffix)."""
    event_micros: I64
    """Event timestamp per entity: microseconds since the epoch, UTC."""
    created_micros: I64 | None
    """Created timestamp per entity (microseconds, UTC), when the view declares one."""
    features: dict[str, tuple[pa.Array, ValueType]]
    """Feature columns cast to the view's schema, rows aligned with ``keys``."""
    rows_in: int
    """Rows of the table given to ``write`` (before keeping the latest per entity)."""

    @property
    def n(self) -> int:
        """Distinct entities."""
        return self.keys.n

    def encoded(self, name: str) -> B.Packed:
        """The serialised ``ValueProto`` of feature ``name`` per entity."""
        arr, value_type = self.features[name]
        return E.encode_values(arr, value_type)

    def encoded_parts(self, name: str) -> list[B.Cells | B.Packed]:
        """``encoded(name)`` as parts still to be concatenated (see ``_bytes.concat``)."""
        arr, value_type = self.features[name]
        return E.value_parts(arr, value_type)

    def rows(self, start: int, stop: int) -> Batch:
        """Entities ``start:stop`` (views, no copies)."""
        return Batch(
            keys=self.keys.rows(start, stop),
            event_micros=self.event_micros[start:stop],
            created_micros=None if self.created_micros is None
            else self.created_micros[start:stop],
            features={n: (a.slice(start, stop - start), vt)
                      for n, (a, vt) in self.features.items()},
            rows_in=self.rows_in,
        )


def _column(table: pa.Table, name: str, role: str) -> pa.Array:
    if name not in table.column_names:
        msg = (f"the table has no {role} column {name!r}; it has {table.column_names}. "
               "Pass the view's join keys, event timestamp and every feature column")
        raise OnlineStoreError(msg)
    return E.as_arrow(table.column(name))


def prepare(table: pa.Table, layout: ViewLayout, key_version: int) -> Batch:
    """Check ``table`` against ``layout``, keep the latest row per entity, encode the keys."""
    keys = []
    for name, value_type in layout.join_keys:
        arr = E.cast(_column(table, name, "join key"), E.arrow_type(value_type), name)
        if arr.null_count:
            msg = f"join key {name!r} has {arr.null_count} null(s); every row needs an entity"
            raise OnlineStoreError(msg)
        keys.append(arr)
    ts = _column(table, layout.timestamp_field, "event timestamp")
    if ts.null_count:
        msg = f"event timestamp {layout.timestamp_field!r} has nulls; every row needs one"
        raise OnlineStoreError(msg)
    micros = E.epoch_micros(ts)
    features = {
        name: (E.cast(_column(table, name, "feature"), E.arrow_type(vt), name), vt)
        for name, vt in layout.features
    }
    created = None
    if layout.created_timestamp_column:
        created_arr = _column(table, layout.created_timestamp_column, "created timestamp")
        created = E.epoch_micros(created_arr)

    rows = latest_rows(keys, micros)
    if len(rows) < table.num_rows:
        index = pa.array(rows)
        keys = [k.take(index) for k in keys]
        micros = micros[rows]
        created = None if created is None else created[rows]
        features = {n: (a.take(index), vt) for n, (a, vt) in features.items()}
    key_bytes = E.entity_keys(
        [(name, arr, vt) for (name, vt), arr in zip(layout.join_keys, keys, strict=True)],
        key_version,
    )
    return Batch(key_bytes, micros, created, features, table.num_rows)


def reorder(batch: Batch, order: I64) -> Batch:
    """The same batch with its entities in ``order``."""
    index = pa.array(order)
    keys = B.take(batch.keys, order)
    return Batch(
        keys=keys,
        event_micros=batch.event_micros[order],
        created_micros=None if batch.created_micros is None else batch.created_micros[order],
        features={n: (a.take(index), vt) for n, (a, vt) in batch.features.items()},
        rows_in=batch.rows_in,
    )
