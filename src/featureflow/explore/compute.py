"""Features of loaded events, computed interactively with the stream job's kernels (the math side).

A view of the Feast repo goes through :func:`featureflow.features.event_features`,
the one code path the stream job and the backfill use; ad-hoc windows and
sessions go straight to :mod:`featureflow.ops`. Window frames are the job's:
rolling ``[t - W, t]`` (ns, both ends included); sessions as Spark's
``session_window`` (a row joins a session when its time is <= the session's
end, ``max ts + gap``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from featureflow import ops
from featureflow.columns import EVENT_NS
from featureflow.errors import EventError
from featureflow.explore.load import with_event_time
from featureflow.features import event_features, session_features
from featureflow.repo import StreamViewSpec

if TYPE_CHECKING:
    import pandas as pd


def _require(events: pa.Table, *columns: str) -> None:
    for column in columns:
        if column not in events.column_names:
            raise EventError(column, f"missing from the events; they have {events.column_names}")


def view_features(events: pa.Table, spec: StreamViewSpec) -> pa.Table:
    """The view's features as the job computes them.

    Returns:
        A rolling (or tiled) view: one row per event, in input order — the
        join key, ``event_ns`` and one column per feature (Feast's names, e.g.
        ``sum_amount_3600s``). A session view: one row per session
        (:func:`featureflow.features.session_features`).
    """
    _require(events, spec.join_key, EVENT_NS, *spec.value_columns)
    if spec.is_session_view:
        return session_features(events, spec, event_ns_column=EVENT_NS)
    return event_features(events, spec, event_ns_column=EVENT_NS)


def window_features(
    events: pa.Table,
    column: str,
    windows: Sequence[str | int],
    aggs: Sequence[str],
    *,
    key: str = "user_id",
    hop: str | int | None = None,
) -> pa.Table:
    """Ad-hoc rolling aggregates of ``column`` per ``key``: one row per event, in input order.

    Args:
        windows: durations (``"10m"``, ``"1h"``; int = ns); frame ``[t - W, t]``.
        aggs: names from :data:`featureflow.ops.AGGS` (count, sum, mean, std, ...).
        hop: optional tile size for the sawtooth frame of tiled feature stores.
    Returns:
        ``key``, ``event_ns``, then ``f"{agg}_{window}"`` per window and agg
        (window as written, e.g. ``sum_1h``).
    """
    _require(events, key, EVENT_NS, column)
    computed = ops.rolling(
        events.column(EVENT_NS), events.column(column), list(windows), list(aggs),
        keys=events.column(key), hop=hop,
    )  # fmt: skip
    leading = pa.table({key: events.column(key), EVENT_NS: events.column(EVENT_NS)})
    for name in computed.column_names:
        leading = leading.append_column(name, computed.column(name))
    return leading


def entity_events(events: pa.Table, entity: int, *, key: str = "user_id") -> pa.Table:
    """The events of one entity, sorted by event time."""
    _require(events, key, EVENT_NS)
    mine = events.filter(pc.equal(events.column(key), entity))
    if mine.num_rows == 0:
        raise EventError(key, f"no events of {key}={entity}; pick one of the loaded entities")
    return mine.sort_by(EVENT_NS)


def compare_windows(
    events: pa.Table,
    entity: int,
    column: str,
    agg: str,
    windows: Sequence[str | int],
    *,
    key: str = "user_id",
) -> pd.DataFrame:
    """The same aggregate over several windows for one entity, side by side.

    Returns:
        One row per event of the entity in event-time order: ``event_time``
        (UTC), ``column`` (the event's value) and one column per window, named
        as written (``"10m"``, ``"1h"``).
    """
    mine = entity_events(events, entity, key=key)
    computed = ops.rolling(mine.column(EVENT_NS), mine.column(column), list(windows), [agg])
    frame = with_event_time(mine.select([EVENT_NS, column]).to_pandas())
    for window in windows:
        frame[str(window)] = computed.column(f"{agg}_{window}").to_numpy(zero_copy_only=False)
    return frame.drop(columns=[EVENT_NS])


def entity_sessions(
    events: pa.Table,
    gap: str | int,
    column: str,
    aggs: Sequence[str] = ("count", "sum"),
    *,
    key: str = "user_id",
    max_length: str | int | None = None,
) -> pa.Table:
    """Session windows per entity (Spark's ``session_window(ts, gap)``), aggregates of ``column``.

    ``max_length`` (a duration; None: no cap) closes a session that would last longer:
    an event more than that after the session's first event opens the next one, as in
    a session view (:func:`featureflow.ops.sessions`). A view's own sessions, with its
    gap and max length: :func:`view_features`.

    Returns:
        ``key``, ``session_start`` (first event), ``session_end`` (last event
        + gap) as timestamp[ns, UTC], then one column per agg; sorted by key
        and start.
    """
    _require(events, key, EVENT_NS, column)
    sessions = ops.sessions(
        events.column(EVENT_NS),
        events.column(column),
        gap,
        list(aggs),
        keys=events.column(key),
        max_length=max_length,
    )
    return sessions.rename_columns([key, *sessions.column_names[1:]])


def most_active(events: pa.Table, n: int = 10, *, key: str = "user_id") -> list[int]:
    """The ``n`` entities with the most events, most active first (ties: smaller key first)."""
    _require(events, key)
    counts = events.group_by(key).aggregate([([], "count_all")])
    ordered = counts.sort_by([("count_all", "descending"), (key, "ascending")])
    return [int(k) for k in ordered.column(key).to_pylist()[:n]]
