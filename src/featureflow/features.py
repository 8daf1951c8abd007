"""Feature values of a stream view, computed from its events with :mod:`featureflow.ops`.

The one code path shared by the stream job, backfills and notebooks: the same
events give the same features wherever they are computed. Pure functions of
Arrow tables; no Spark, Kafka or Feast I/O here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from featureflow import ops
from featureflow.repo import SESSION_DURATION, SESSION_START, AggregationSpec, StreamViewSpec


def _window_label(window_ns: int) -> str:
    return f"{window_ns}ns"


def event_features(
    events: pa.Table, spec: StreamViewSpec, *, event_ns_column: str = "event_ns"
) -> pa.Table:
    """Every aggregation of ``spec`` (a rolling view) for every event, in input order.

    The value of an aggregation with window W at an event of time t covers
    the events of the same entity with time in ``[t - W, t]`` (ns, both ends
    included; equal times are in each other's frame). A tiled view
    (``spec.tile_hop_ns``) uses the sawtooth frame ``[floor((t - W) / hop) * hop, t]``.

    Args:
        events: one row per event: ``spec.join_key`` (int64), ``event_ns_column``
            (int64 epoch ns) and the value columns the aggregations read.
    Returns:
        Columns ``spec.join_key``, ``event_ns_column``, then one column per
        aggregation named by Feast (``sum_amount_3600s``), in ``spec`` order.
    """
    if spec.is_session_view:
        msg = f"{spec.name!r} is a session view: use session_features()"
        raise ValueError(msg)
    keys = events.column(spec.join_key)
    ts = events.column(event_ns_column)
    outputs: dict[str, pa.ChunkedArray | pa.Array] = {}
    for column, wanted in _aggregations_by_column(spec).items():
        windows = sorted({agg.window_ns for agg in wanted})
        functions = list(dict.fromkeys(agg.function for agg in wanted))
        computed = ops.rolling(
            ts,
            events.column(column),
            [_window_label(w) for w in windows],
            functions,
            keys=keys,
            hop=spec.tile_hop_ns,
        )
        for aggregation in wanted:
            outputs[aggregation.output_name] = computed.column(
                f"{aggregation.function}_{_window_label(aggregation.window_ns)}"
            )
    columns = {spec.join_key: keys, event_ns_column: ts}
    columns.update({agg.output_name: outputs[agg.output_name] for agg in spec.aggregations})
    return pa.table(columns)


def features_at(
    runs: Sequence[pa.Table],
    spec: StreamViewSpec,
    at_keys: np.ndarray,
    at_ts: np.ndarray,
    *,
    event_ns_column: str = "event_ns",
) -> pa.Table:
    """Every aggregation of ``spec`` (a rolling view) at query points, with the events
    as context: row j holds the features an event of entity ``at_keys[j]`` at time
    ``at_ts[j]`` (ns) has (:func:`event_features`' frames), computed with
    :func:`featureflow.ops.rolling_at` over only what those frames reach.

    Args:
        runs: the events in runs, each sorted by ``spec.join_key`` (integers) then
            ``event_ns_column`` (ties in arrival order), the runs in arrival order.
    Returns:
        Columns ``spec.join_key``, ``event_ns_column`` (the queries), then one column
        per aggregation (Feast's name), in ``spec`` order.
    """
    table, _ = features_at_resuming(runs, spec, at_keys, at_ts, event_ns_column=event_ns_column)
    return table


FrameStatesByColumn = Mapping[str, ops.FrameStates]
"""A rolling view's frame states (:func:`featureflow.ops.rolling_at_resuming`), per
event column the view aggregates."""


def features_at_resuming(
    runs: Sequence[pa.Table],
    spec: StreamViewSpec,
    at_keys: np.ndarray,
    at_ts: np.ndarray,
    *,
    frames: FrameStatesByColumn | None = None,
    clip_ns: int | None = None,
    added_run: int | None = None,
    event_ns_column: str = "event_ns",
    in_place: bool = False,
) -> tuple[pa.Table, dict[str, ops.FrameStates]]:
    """:func:`features_at`, resuming ``frames`` and keeping this call's frame states
    (clipped to ``clip_ns``; :func:`featureflow.ops.rolling_at_resuming`, whose
    contract ``frames`` must meet, as must ``in_place``'s). Returns the table and the
    states kept, per column (none for a column whose states the backend does not
    keep)."""
    if spec.is_session_view:
        msg = f"{spec.name!r} is a session view: use session_features()"
        raise ValueError(msg)
    outputs: dict[str, pa.ChunkedArray | pa.Array] = {}
    kept: dict[str, ops.FrameStates] = {}
    for column, wanted in _aggregations_by_column(spec).items():
        windows = sorted({agg.window_ns for agg in wanted})
        functions = list(dict.fromkeys(agg.function for agg in wanted))
        computed, states = ops.rolling_at_resuming(
            [
                (run.column(spec.join_key), run.column(event_ns_column), run.column(column))
                for run in runs
            ],
            [_window_label(w) for w in windows],
            functions,
            at_keys,
            at_ts,
            hop=spec.tile_hop_ns,
            frames=None if frames is None else frames.get(column),
            clip_ns=clip_ns,
            added_run=added_run,
            in_place=in_place,
        )
        if states is not None:
            kept[column] = states
        for aggregation in wanted:
            outputs[aggregation.output_name] = computed.column(
                f"{aggregation.function}_{_window_label(aggregation.window_ns)}"
            )
    key_type = runs[0].schema.field(spec.join_key).type if runs else pa.int64()
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        spec.join_key: pa.array(at_keys).cast(key_type),
        event_ns_column: pa.array(at_ts, pa.int64()),
    }
    columns.update({agg.output_name: outputs[agg.output_name] for agg in spec.aggregations})
    return pa.table(columns), kept


def aggregated_columns(spec: StreamViewSpec) -> list[str]:
    """The event columns the view's aggregations read, in first-use order."""
    return list(_aggregations_by_column(spec))


def _aggregations_by_column(spec: StreamViewSpec) -> dict[str, list[AggregationSpec]]:
    """The view's aggregations grouped by the event column they read (first-use order)."""
    by_column: dict[str, list[AggregationSpec]] = defaultdict(list)
    for aggregation in spec.aggregations:
        by_column[aggregation.column].append(aggregation)
    return by_column


def session_features(
    events: pa.Table, spec: StreamViewSpec, *, event_ns_column: str = "event_ns"
) -> pa.Table:
    """Every session of a session view's events, with its aggregations.

    Sessions follow :func:`featureflow.ops.sessions` (Spark's ``session_window``
    with a length cap): per entity in time order, an event joins the open session
    when its time is <= the session's last event time + ``spec.session_gap_ns``
    and at most ``spec.session_max_length_ns`` after the session's first event;
    otherwise it opens a new session. Input rows may come in any order.

    Returns:
        One row per session, sorted by entity then session start: the join key,
        ``event_ns_column`` (time of the session's last event, int64 ns: the time
        its features are as of), :data:`SESSION_START` (timestamp[us, UTC]),
        :data:`SESSION_DURATION` (last minus first event time, float seconds),
        then one column per aggregation (Feast's name), in ``spec`` order.
    """
    if spec.session_gap_ns is None:
        msg = f"{spec.name!r} is not a session view: use event_features()"
        raise ValueError(msg)
    keys = events.column(spec.join_key)
    ts = events.column(event_ns_column)
    leading: pa.Table | None = None
    outputs: dict[str, pa.ChunkedArray] = {}
    for column, wanted in _aggregations_by_column(spec).items():
        functions = list(dict.fromkeys(agg.function for agg in wanted))
        computed = ops.sessions(
            ts,
            events.column(column),
            spec.session_gap_ns,
            functions,
            keys,
            max_length=spec.session_max_length_ns,
        )
        # Session bounds depend on keys and times only, so every column's are the same.
        leading = leading or computed
        for aggregation in wanted:
            outputs[aggregation.output_name] = computed.column(aggregation.function)
    if leading is None:
        msg = f"session view {spec.name!r} declares no aggregations"
        raise ValueError(msg)
    start_ns = leading.column("session_start").cast(pa.int64()).to_numpy()
    last_ns = leading.column("session_end").cast(pa.int64()).to_numpy() - spec.session_gap_ns
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        spec.join_key: leading.column("key").cast(keys.type),
        event_ns_column: pa.array(last_ns, pa.int64()),
        SESSION_START: pa.array(start_ns // 1_000, pa.timestamp("us", tz="UTC")),
        SESSION_DURATION: pa.array((last_ns - start_ns) / 1e9, pa.float64()),
    }
    columns.update({agg.output_name: outputs[agg.output_name] for agg in spec.aggregations})
    return pa.table(columns)


def latest_rows(keys: Sequence[pa.Array | pa.ChunkedArray], ts: np.ndarray) -> np.ndarray:
    """Row numbers of each entity's row with the latest time, in ascending row order.

    An entity is a combination of ``keys`` (one array per key column); ``ts`` the
    rows' times (any integer unit). Ties go to the later row. A stable sort by
    time alone (linear on the time-ordered tables the stream job passes), then
    each entity's last row by hashing: no sort of every row by key.
    """
    order = np.argsort(ts, kind="stable")
    columns = [np.asarray(key.to_numpy(zero_copy_only=False))[order] for key in keys]
    if len(columns) == 1:
        repeated = pd.Series(columns[0]).duplicated(keep="last")
    else:
        repeated = pd.DataFrame(dict(enumerate(columns))).duplicated(keep="last")
    return np.sort(order[~repeated.to_numpy()])


def latest_per_entity(
    features: pa.Table, join_key: str, *, event_ns_column: str = "event_ns"
) -> pa.Table:
    """The row of each entity with the latest event time (ties: the later row wins).

    This is what the online store serves: the rolling aggregates as of the
    entity's latest event. Output is sorted by the join key.
    """
    if features.num_rows == 0:
        return features
    keys = features.column(join_key)
    latest = latest_rows([keys], features.column(event_ns_column).to_numpy())
    by_key = np.argsort(keys.to_numpy(zero_copy_only=False)[latest], kind="stable")
    return features.take(pa.array(latest[by_key]))
