"""DuckDB as the independent oracle for the window functions.

DuckDB's aggregates over doubles follow IEEE arithmetic: a frame holding +inf
sums (and averages) to +inf, one holding both infinities to NaN, var/std of two
or more values one of them infinite are NaN; min/max/first/last/count_distinct
take infinities as ordinary values. NaN is turned into NULL (skipped) first.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

# first/last: by ts, ties by input order (rid), nulls skipped
SQL_AGG = {
    "count": "count(v)",
    "sum": "sum(v)",
    "mean": "avg(v)",
    "min": "min(v)",
    "max": "max(v)",
    "std": "stddev_samp(v)",
    "var": "var_samp(v)",
    "first": "arg_min(v, CASE WHEN v IS NOT NULL THEN [ts, rid] END)",
    "last": "arg_max(v, CASE WHEN v IS NOT NULL THEN [ts, rid] END)",
    "count_distinct": "count(DISTINCT v)",
}


def frame_table(ts: np.ndarray, values: pa.Array, keys: object) -> pa.Table:
    """Rows as DuckDB sees them: NaN turned into NULL, a row id for input order."""
    arr = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    mask = np.isnan(arr)
    v = pa.array(np.where(mask, 0.0, arr), mask=mask)
    k = pa.array(np.zeros(len(ts), dtype=np.int64)) if keys is None else keys
    return pa.table({"rid": np.arange(len(ts)), "ts": ts, "v": v, "k": k})


def rolling(
    ts: np.ndarray,
    values: pa.Array,
    window_ns: int,
    aggs: list[str],
    keys: object = None,
    hop: int | None = None,
) -> dict[str, pa.ChunkedArray]:
    """``agg(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN W PRECEDING AND CURRENT ROW)``;
    with ``hop`` the frame reaches back to ``floor((ts - W) / hop) * hop`` (a per-row
    offset). Results in input order, nulls kept."""
    rows = frame_table(ts, values, keys)
    preceding = str(window_ns)
    if hop is not None:
        preceding = f"(ts - floor((ts - {window_ns}) / {hop})::BIGINT * {hop})"
    frame = f"PARTITION BY k ORDER BY ts RANGE BETWEEN {preceding} PRECEDING AND CURRENT ROW"
    selects = ", ".join(f'{SQL_AGG[a]} OVER ({frame}) AS "{a}"' for a in aggs)
    con = duckdb.connect()
    con.register("rows", rows)
    result = con.sql(f"SELECT {selects} FROM rows ORDER BY rid").to_arrow_table()
    return {a: result[a] for a in aggs}


def _aggs_sql(aggs: list[str]) -> str:
    return ", ".join(f'{SQL_AGG[a]} AS "{a}"' for a in aggs)


def hopping(
    ts: np.ndarray, values: pa.Array, size: int, step: int, aggs: list[str], keys: object = None
) -> pa.Table:
    """Every window [k*step, k*step + size) holding a row, by expanding rows in SQL."""
    con = duckdb.connect()
    con.register("rows", frame_table(ts, values, keys))
    sql = f"""
        WITH expanded AS (
            SELECT *, unnest(range(floor((ts - {size}) / {step})::BIGINT + 1,
                                   floor(ts / {step})::BIGINT + 1)) * {step} AS ws
            FROM rows)
        SELECT k, ws, {_aggs_sql(aggs)} FROM expanded GROUP BY k, ws ORDER BY k NULLS LAST, ws
    """
    return con.sql(sql).to_arrow_table()


def sessions(
    ts: np.ndarray,
    values: pa.Array,
    gaps: np.ndarray,
    aggs: list[str],
    keys: object = None,
    max_length: int | None = None,
) -> pa.Table:
    """A row opens a session when its ts is past max(ts + gap) of every earlier row of its key.

    With ``max_length`` (ns) the rows are walked one by one per key in a recursive
    CTE: a row opens a session when it is past the open session's end (the max of
    ts + gap over its rows) or more than ``max_length`` after its first row."""
    if max_length is not None:
        return _capped_sessions(ts, values, gaps, aggs, keys, max_length)
    rows = frame_table(ts, values, keys).append_column("gap", pa.array(gaps, pa.int64()))
    con = duckdb.connect()
    con.register("rows", rows)
    sql = f"""
        WITH kept AS (SELECT * FROM rows WHERE gap > 0),
        flagged AS (
            SELECT *, CASE WHEN ts > max(ts + gap) OVER (PARTITION BY k ORDER BY ts, rid
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                  THEN 1 ELSE 0 END AS opens
            FROM kept),
        numbered AS (
            SELECT *, sum(opens) OVER (PARTITION BY k ORDER BY ts, rid) AS sid FROM flagged)
        SELECT k, min(ts) AS s, max(ts + gap) AS e, {_aggs_sql(aggs)}
        FROM numbered GROUP BY k, sid ORDER BY k NULLS LAST, s
    """
    return con.sql(sql).to_arrow_table()


def _capped_sessions(
    ts: np.ndarray,
    values: pa.Array,
    gaps: np.ndarray,
    aggs: list[str],
    keys: object,
    max_length: int,
) -> pa.Table:
    rows = frame_table(ts, values, keys).append_column("gap", pa.array(gaps, pa.int64()))
    con = duckdb.connect()
    con.register("rows", rows)
    opens = f"(o.ts > w.fin OR o.ts - w.start > {max_length})"
    sql = f"""
        WITH RECURSIVE ordered AS (
            SELECT *, row_number() OVER (PARTITION BY k ORDER BY ts, rid) AS rn
            FROM rows WHERE gap > 0),
        walk(k, rn, sid, start, fin) AS (
            SELECT k, rn, 1, ts, ts + gap FROM ordered WHERE rn = 1
            UNION ALL
            SELECT o.k, o.rn,
                   CASE WHEN {opens} THEN w.sid + 1 ELSE w.sid END,
                   CASE WHEN {opens} THEN o.ts ELSE w.start END,
                   CASE WHEN {opens} THEN o.ts + o.gap ELSE greatest(w.fin, o.ts + o.gap) END
            FROM walk w JOIN ordered o ON o.k IS NOT DISTINCT FROM w.k AND o.rn = w.rn + 1),
        numbered AS (
            SELECT o.*, w.sid FROM ordered o
            JOIN walk w ON o.k IS NOT DISTINCT FROM w.k AND o.rn = w.rn)
        SELECT k, min(ts) AS s, max(ts + gap) AS e, {_aggs_sql(aggs)}
        FROM numbered GROUP BY k, sid ORDER BY k NULLS LAST, s
    """
    return con.sql(sql).to_arrow_table()
