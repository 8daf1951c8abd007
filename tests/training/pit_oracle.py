"""DuckDB as the independent oracle of point-in-time features: aggregates as of probe times.

For each probe (user, t): every feature of the example view over the user's
events with ``t - W <= event_ns <= t`` — SQL ``FILTER`` clauses, no window
functions, so it shares nothing with the kernels.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
from duckdb_oracle import aggregates_since_frame_start


def probe_features(events: pa.Table, probes: pa.Table) -> pa.Table:
    """One row per probe (``user_id``, ``event_ns``), in probe order, with every feature."""
    aggregates = aggregates_since_frame_start("p.event_ns", hop_s=None)
    con = duckdb.connect()
    con.register("events", events)
    con.register("probes", probes)
    return con.sql(
        f"""
        WITH p AS (SELECT *, row_number() OVER () AS probe FROM probes)
        SELECT p.probe, {aggregates}
        FROM p LEFT JOIN events e
          ON e.user_id = p.user_id AND e.event_ns <= p.event_ns
        GROUP BY p.probe ORDER BY p.probe
        """
    ).to_arrow_table()
