"""DuckDB as the independent oracle of the example view's features.

SQL's ``RANGE BETWEEN W PRECEDING AND CURRENT ROW`` is exactly featureflow's
frame ``[t - W, t]``; these queries compute the 18 features of
``user_txn_stats`` from raw events, per event or as of each user's latest event.
"""

from __future__ import annotations

import dataclasses

import duckdb
import numpy as np
import pyarrow as pa

from featureflow.events import sample
from featureflow.repo import AggregationSpec, StreamViewSpec

END_NS = 1_795_996_800_000_000_000  # 2026-11-30T00:00:00Z
WINDOWS_S = (600, 3600, 86_400)
SQL_AGGREGATES = {
    "count": "count",
    "sum": "sum",
    "mean": "avg",
    "min": "min",
    "max": "max",
    "std": "stddev_samp",
}
FEATURE_NAMES = tuple(f"{fn}_amount_{w}s" for w in WINDOWS_S for fn in SQL_AGGREGATES)


EXAMPLE_SPEC = StreamViewSpec(
    name="user_txn_stats",
    join_key="user_id",
    timestamp_field="event_timestamp",
    topic="transactions",
    bootstrap_servers="127.0.0.1:9092",
    json_schema="user_id long, amount double, merchant string, event_timestamp string",
    watermark_ns=0,
    aggregations=tuple(
        AggregationSpec("amount", fn, w * 10**9, f"{fn}_amount_{w}s")
        for w in WINDOWS_S
        for fn in SQL_AGGREGATES
    ),
)
"""The example repo's ``user_txn_stats`` as the job sees it (without a watermark)."""


def events_table(events: sample.SampleEvents) -> pa.Table:
    """user_id, event_ns, amount (null where the event's amount is null)."""
    amount = pa.array(events.amount, mask=np.isnan(events.amount))
    return pa.table({"user_id": events.user_id, "event_ns": events.event_ns, "amount": amount})


def _frame_start(t: str, window_s: int, hop_s: int | None) -> str:
    """SQL of the frame start of an event at ``t`` (ns): ``t - W``, or the sawtooth
    ``floor((t - W) / hop) * hop`` of a tiled view."""
    start = f"({t} - {window_s * 10**9})"
    # Event times are positive, so integer division (truncating) is the floor.
    return start if hop_s is None else f"(({start} // {hop_s * 10**9}) * {hop_s * 10**9})"


def aggregates_since_frame_start(t: str, hop_s: int | None) -> str:
    """SQL select list: every feature over the joined events ``e`` in the frame of ``t``."""
    return ", ".join(
        f"{sql}(e.amount) FILTER (WHERE e.event_ns >= {_frame_start(t, w, hop_s)}) "
        f"AS {fn}_amount_{w}s"
        for w in WINDOWS_S
        for fn, sql in SQL_AGGREGATES.items()
    )


def per_event_features(events: pa.Table, hop_s: int | None = None) -> pa.Table:
    """Every feature for every event, in input order (``hop_s``: tiled frames)."""
    con = duckdb.connect()
    con.register("events", events)
    numbered = "(SELECT *, row_number() OVER () AS row_number FROM events)"
    if hop_s is None:
        selects = ", ".join(
            f"{sql}(amount) OVER (PARTITION BY user_id ORDER BY event_ns "
            f"RANGE BETWEEN {w * 10**9} PRECEDING AND CURRENT ROW) AS {fn}_amount_{w}s"
            for w in WINDOWS_S
            for fn, sql in SQL_AGGREGATES.items()
        )
        return con.sql(
            f"SELECT row_number, {selects} FROM {numbered} ORDER BY row_number"
        ).to_arrow_table()
    # A sawtooth frame is no SQL window frame: join each event to its entity's events.
    return con.sql(
        f"""
        SELECT i.row_number, {aggregates_since_frame_start("i.event_ns", hop_s)}
        FROM {numbered} i JOIN events e ON e.user_id = i.user_id AND e.event_ns <= i.event_ns
        GROUP BY i.row_number ORDER BY i.row_number
        """
    ).to_arrow_table()


def latest_features(
    events: pa.Table, hop_s: int | None = None
) -> dict[int, dict[str, float | None]]:
    """Per user: every feature as of the user's latest event (``hop_s``: tiled frames)."""
    aggregates = aggregates_since_frame_start("l.t", hop_s)
    con = duckdb.connect()
    con.register("events", events)
    rows = con.sql(
        f"""
        WITH latest AS (SELECT user_id, max(event_ns) AS t FROM events GROUP BY user_id)
        SELECT l.user_id, {aggregates}
        FROM events e JOIN latest l ON e.user_id = l.user_id AND e.event_ns <= l.t
        GROUP BY l.user_id ORDER BY l.user_id
        """
    ).fetchall()
    return {row[0]: dict(zip(FEATURE_NAMES, row[1:], strict=True)) for row in rows}


SESSION_GAP_S = 1_800
SESSION_AGGREGATES = {  # feature: (featureflow function, DuckDB expression)
    "session_events": ("count", "count(amount)"),
    "session_amount_sum": ("sum", "sum(amount)"),
    "session_amount_mean": ("mean", "avg(amount)"),
    "session_amount_max": ("max", "max(amount)"),
}
SESSION_MAX_LENGTH_S = 86_400  # featureflow.repo.DEFAULT_SESSION_MAX_LENGTH_NS, written again
SESSIONS_SPEC = dataclasses.replace(
    EXAMPLE_SPEC,
    name="user_sessions",
    aggregations=tuple(
        AggregationSpec("amount", function, SESSION_GAP_S * 10**9, name)
        for name, (function, _) in SESSION_AGGREGATES.items()
    ),
    session_gap_ns=SESSION_GAP_S * 10**9,
    session_max_length_ns=SESSION_MAX_LENGTH_S * 10**9,
)
"""The example repo's ``user_sessions`` as the job sees it (without a watermark)."""


def sessions(
    events: pa.Table, gap_s: int = SESSION_GAP_S, max_length_s: int = SESSION_MAX_LENGTH_S
) -> pa.Table:
    """Gaps and islands, then each island cut to at most ``max_length_s``.

    An event more than ``gap`` after its predecessor starts an island (with a
    constant gap, Spark's ``session_window``: an event at exactly the previous
    event + gap joins). An island no longer than the max length is one session;
    a longer one is walked event by event (a recursive CTE): an event more than
    the max length after its session's first event (strictly) starts the next
    session. Columns: user_id, start_ns, last_ns, the session features; sorted by
    user_id, start_ns.
    """
    aggregates = ", ".join(f"{sql} AS {name}" for name, (_, sql) in SESSION_AGGREGATES.items())
    max_ns = max_length_s * 10**9
    con = duckdb.connect()
    # every window orders equal times by input row (rid): one order for all of them, so
    # an island's opener and the events tied with it land in the same island
    con.register("events", events.append_column("rid", pa.array(range(events.num_rows))))
    return con.sql(
        f"""
        WITH RECURSIVE marked AS (
          SELECT *, CASE WHEN event_ns - lag(event_ns) OVER w > {gap_s * 10**9}
                         OR lag(event_ns) OVER w IS NULL THEN 1 ELSE 0 END AS opens
          FROM events WINDOW w AS (PARTITION BY user_id ORDER BY event_ns, rid)
        ), islands AS (
          SELECT *, sum(opens) OVER (PARTITION BY user_id ORDER BY event_ns, rid
                                     ROWS UNBOUNDED PRECEDING) AS island
          FROM marked
        ), long_islands AS (
          SELECT user_id, island FROM islands GROUP BY user_id, island
          HAVING max(event_ns) - min(event_ns) > {max_ns}
        ), long_rows AS (
          SELECT i.user_id, i.island, i.event_ns,
                 row_number() OVER (PARTITION BY i.user_id, i.island ORDER BY i.event_ns, i.rid)
                   AS rn
          FROM islands i JOIN long_islands l ON i.user_id = l.user_id AND i.island = l.island
        ), walk(user_id, island, rn, piece, start_ns) AS (
          SELECT user_id, island, rn, 1, event_ns FROM long_rows WHERE rn = 1
          UNION ALL
          SELECT r.user_id, r.island, r.rn,
                 w.piece + CASE WHEN r.event_ns - w.start_ns > {max_ns} THEN 1 ELSE 0 END,
                 CASE WHEN r.event_ns - w.start_ns > {max_ns} THEN r.event_ns ELSE w.start_ns END
          FROM walk w JOIN long_rows r
            ON r.user_id = w.user_id AND r.island = w.island AND r.rn = w.rn + 1
        ), pieces AS (
          SELECT DISTINCT user_id, island, piece, start_ns FROM walk
        ), numbered AS (
          SELECT i.*, coalesce((SELECT max(p.piece) FROM pieces p
                                WHERE p.user_id = i.user_id AND p.island = i.island
                                  AND p.start_ns <= i.event_ns), 1) AS piece
          FROM islands i
        )
        SELECT user_id, min(event_ns) AS start_ns, max(event_ns) AS last_ns, {aggregates}
        FROM numbered GROUP BY user_id, island, piece ORDER BY user_id, start_ns
        """
    ).to_arrow_table()
