"""Point-in-time training sets: feature values as of any timestamp, computed from raw events.

For each row of an entity dataframe (join key + timestamp ``t``) every
requested feature is the value the stream job would have served right after
processing the events up to ``t``: an aggregation with window W covers the
entity's events with time in ``[t - W, t]`` (ns, both ends included). An event
at exactly ``t`` IS included (as in the stream job, where an event's own
features include it and every event at the same time); an event 1 ns after
``t`` never is, so nothing leaks from the future. Tiled views use the
sawtooth frame ``[floor((t - W) / hop) * hop, t]``.

How: each entity row becomes a "probe" event at ``t`` with null values,
appended to the raw events of its entity, and the view's features are
computed for every row by :func:`featureflow.features.event_features` — the
stream job's code path and kernels. Every aggregation skips nulls, so probes
change no value; the probe rows are the answer. Any timestamp works, not only
the times of materialised rows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow import features as feature_math
from featureflow.columns import EVENT_NS
from featureflow.errors import EventError, RepoError
from featureflow.repo import StreamViewSpec, load_store, stream_view_specs

if TYPE_CHECKING:
    import pandas as pd
    from feast import FeatureStore

log = logging.getLogger(__name__)

DEFAULT_TIMESTAMP = "event_timestamp"
"""The entity dataframe's timestamp column, as in Feast's ``get_historical_features``."""


def _to_ns(column: pa.ChunkedArray | pa.Array, name: str) -> pa.Array:
    """Epoch ns (int64) of a timestamp column (any unit; naive means UTC)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not pa.types.is_timestamp(column.type):
        raise EventError(name, f"expected a timestamp column, got {column.type}")
    return column.cast(pa.timestamp("ns", tz=column.type.tz)).cast(pa.int64())


def _as_table(frame: pd.DataFrame | pa.Table) -> pa.Table:
    return (
        frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame, preserve_index=False)
    )


def _refs_by_view(refs: Sequence[str], specs: dict[str, StreamViewSpec]) -> dict[str, list[str]]:
    """``["view:feature", ...]`` grouped by view, checked against the repo."""
    wanted: dict[str, list[str]] = {}
    for ref in refs:
        view, sep, feature = ref.partition(":")
        spec = specs.get(view)
        if not sep or spec is None:
            msg = f"feature {ref!r}: expected 'view:feature' with a view of {sorted(specs)}"
            raise RepoError(msg)
        if spec.is_session_view:
            msg = (
                f"feature {ref!r}: {view!r} is a session view; point-in-time training sets "
                "cover rolling and tiled views"
            )
            raise RepoError(msg)
        if feature not in spec.feature_names:
            msg = f"feature {ref!r}: view {view!r} has {list(spec.feature_names)}"
            raise RepoError(msg)
        wanted.setdefault(view, []).append(feature)
    return wanted


def features_as_of(
    events: pa.Table, keys: pa.Array, times_ns: pa.Array, spec: StreamViewSpec
) -> pa.Table:
    """The view's features for each (key, time) probe, from ``events``.

    Args:
        events: ``spec.join_key`` (int64), ``event_ns`` (int64 epoch ns) and the
            value columns; any order, any times (later events are ignored).
        keys, times_ns: the probes (int64 keys, int64 epoch ns).
    Returns:
        One row per probe, in probe order: the join key, ``event_ns`` and the
        view's features, as of exactly that time (frame ``[t - W, t]``).
    """
    events = events.select([spec.join_key, EVENT_NS, *spec.value_columns])
    probes = pa.table(
        {
            spec.join_key: keys.cast(events.schema.field(spec.join_key).type),
            EVENT_NS: times_ns,
            **{
                name: pa.nulls(len(keys), events.schema.field(name).type)
                for name in spec.value_columns
            },
        }
    )
    combined = pa.concat_tables([events, probes.cast(events.schema)])
    return feature_math.event_features(combined, spec).slice(events.num_rows)


def read_events(
    store: FeatureStore, spec: StreamViewSpec, keys: pa.Array, first_ns: int, last_ns: int
) -> pa.Table:
    """Events of ``keys`` with time in ``[first_ns, last_ns]`` from the view's batch source.

    Rows without a key or a time can't be placed and are left out (logged with a count).
    """
    import pyarrow.dataset as ds

    from featureflow.backfill.source import batch_source_path

    path = batch_source_path(store, spec)
    columns = [spec.join_key, spec.timestamp_field, *spec.value_columns]
    try:
        table = ds.dataset(path, format="parquet").to_table(
            columns=columns, filter=pc.is_in(pc.field(spec.join_key), keys.unique())
        )
    except (OSError, pa.ArrowInvalid) as error:
        msg = f"view {spec.name!r}: cannot read its events at {path!r}: {error}"
        raise RepoError(msg) from None
    ns = _to_ns(table.column(spec.timestamp_field), spec.timestamp_field)
    table = table.drop_columns([spec.timestamp_field]).append_column(EVENT_NS, ns)
    unusable = pc.or_kleene(pc.is_null(table.column(spec.join_key)), pc.is_null(ns))
    dropped = pc.sum(unusable.cast(pa.int64())).as_py() or 0
    if dropped:
        log.warning("view %s: %d events without key or time left out", spec.name, dropped)
    inside = pc.and_(pc.greater_equal(ns, first_ns), pc.less_equal(ns, last_ns))
    table = table.filter(pc.and_(inside, pc.invert(unusable)))
    return _standard(table, spec)


def _standard(table: pa.Table, spec: StreamViewSpec) -> pa.Table:
    return pa.table(
        {
            spec.join_key: table.column(spec.join_key).cast(pa.int64()),
            EVENT_NS: table.column(EVENT_NS),
            **{name: table.column(name).cast(pa.float64()) for name in spec.value_columns},
        }
    )


def training_set(
    entity_df: pd.DataFrame | pa.Table,
    features: Sequence[str],
    *,
    repo: str | Path | FeatureStore,
    events: pa.Table | pd.DataFrame | None = None,
    timestamp_column: str = DEFAULT_TIMESTAMP,
) -> pd.DataFrame:
    """Point-in-time feature values for each row of ``entity_df``; see the module docstring.

    Args:
        entity_df: the join key of each view and ``timestamp_column`` (a
            timestamp; naive means UTC), plus any other columns (labels), kept.
        features: ``"view:feature"`` references (``"user_txn_stats:sum_amount_3600s"``).
        repo: the Feast repo (path or ``FeatureStore``) that declares the views.
        events: raw events (the view's join key, its timestamp field and value
            columns); default: the view's batch source (``FileSource``), read for
            the entities and times of ``entity_df`` only.
        timestamp_column: the entity dataframe's timestamp column.
    Returns:
        ``entity_df``'s rows in their order, its columns, then the features
        (named as in ``features``, without the view).

    Raises:
        EventError: a column of ``entity_df`` or ``events`` is missing, null or mistyped.
        RepoError: a feature reference names no rolling view or feature of the repo.
    """
    store = load_store(repo) if isinstance(repo, (str, Path)) else repo
    specs = {spec.name: spec for spec in stream_view_specs(store)}
    wanted = _refs_by_view(features, specs)
    entities = _as_table(entity_df)
    if timestamp_column not in entities.column_names:
        raise EventError(timestamp_column, f"missing from entity_df ({entities.column_names})")
    times_ns = _to_ns(entities.column(timestamp_column), timestamp_column)
    if times_ns.null_count:
        raise EventError(timestamp_column, "null timestamps in entity_df")
    result = entities
    for view, names in wanted.items():
        spec = specs[view]
        if spec.join_key not in entities.column_names:
            raise EventError(spec.join_key, f"missing from entity_df (view {view!r} needs it)")
        keys = entities.column(spec.join_key).combine_chunks().cast(pa.int64())
        if keys.null_count:
            raise EventError(spec.join_key, "null join keys in entity_df")
        times = np.asarray(times_ns)
        first_ns = int(times.min()) - spec.state_horizon_ns if len(times) else 0
        last_ns = int(times.max()) if len(times) else 0
        if events is None:
            raw = read_events(store, spec, keys, first_ns, last_ns)
        else:
            given = _as_table(events)
            missing = [c for c in (spec.join_key, spec.timestamp_field, *spec.value_columns)
                       if c not in given.column_names]  # fmt: skip
            if missing:
                raise EventError(missing[0], f"missing from events ({given.column_names})")
            ns = _to_ns(given.column(spec.timestamp_field), spec.timestamp_field)
            raw = _standard(given.append_column(EVENT_NS, ns), spec)
        computed = features_as_of(raw, keys, times_ns, spec)
        for name in names:
            result = result.append_column(name, computed.column(name))
    return result.to_pandas()
