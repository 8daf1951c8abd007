"""Bulk writes into Feast's SQLite online store, in Feast's own table layout.

Layout (``feast.infra.online_stores.sqlite``): table ``{project}_{view}`` with one
row per (entity, feature): ``entity_key`` (serialised key), ``feature_name``,
``value`` (serialised ``ValueProto``), ``value_text`` (``str`` of numbers,
bools, strings), ``event_ts`` and ``created_ts`` as integer seconds.

One transaction per call (all rows or none). Ordering lives in the upsert
itself: ``ON CONFLICT … DO UPDATE … WHERE excluded.event_ts >= event_ts``, so
a row older than the stored one changes nothing, with no read round trip.
Feast's SQLite layout keeps whole seconds, so within the same second the
later write wins (a replay of the same batch rewrites identical bytes).

Performance: entities are sent sorted by entity key, so SQLite's B-trees
fill in order; one multi-row upsert statement per entity writes all its
features, so the key and timestamps are bound once instead of once per
feature (half the time of a statement per row); parameters come from a
C-level ``zip`` of per-feature lists built by Arrow; the page cache of this
connection is raised for the batch. What remains is SQLite's own per-row
cost: three B-tree inserts per (entity, feature) row (the table, its primary
key and Feast's ``entity_key`` index).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from feast.infra.online_stores.sqlite import SqliteOnlineStore
from feast.repo_config import RepoConfig

from featureflow.errors import OnlineStoreError
from featureflow.online import encoding as E
from featureflow.online.batch import Batch, reorder

_ROWS_PER_STATEMENT = 100
"""Features per upsert statement (one statement per entity when the view has fewer)."""

_CACHE_KIB = 256 * 1024
"""SQLite page cache of the writing connection, KiB (the default 2 MiB thrashes)."""

LOCK_TIMEOUT_ENV = "FEATUREFLOW_SQLITE_LOCK_TIMEOUT_S"
"""Environment variable: seconds a write waits for another connection's lock."""

DEFAULT_LOCK_TIMEOUT_S = 10.0
"""Default lock wait, seconds: a write that finds the database locked by another
process (a reader's long transaction, a backup) retries for this long, then fails
with ``OnlineStoreUnavailableError``, and the stream job restarts the batch."""


def lock_timeout_s() -> float:
    """The lock wait of a write, seconds: ``$FEATUREFLOW_SQLITE_LOCK_TIMEOUT_S`` or the default."""
    text = os.environ.get(LOCK_TIMEOUT_ENV)
    if not text:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        msg = f"${LOCK_TIMEOUT_ENV} must be a number of seconds >= 0, got {text!r}"
        raise OnlineStoreError(msg)
    return value


def db_path(config: RepoConfig) -> Path:
    """The SQLite file of the online store, resolved as Feast resolves it."""
    return Path(SqliteOnlineStore._get_db_path(config))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def write(config: RepoConfig, table_name: str, batch: Batch) -> tuple[int, int]:
    """Write ``batch`` into ``table_name``; returns (entities written, entities skipped).

    Raises ``OnlineStoreError`` (nothing written) when the table is missing or
    SQLite fails.
    """
    path = db_path(config)
    if not path.exists():
        msg = f"the SQLite online store {path} does not exist: run `feast apply` first"
        raise OnlineStoreError(msg)
    if batch.n == 0:
        return 0, 0
    order = pc.sort_indices(
        pa.array(batch.keys.to_pylist(), pa.large_binary())
    ).to_numpy()
    batch = reorder(batch, order)
    names = sorted(batch.features)
    n, n_features = batch.n, len(names)

    keys = batch.keys.to_pylist()
    event_ts = E.sqlite_event_seconds(batch.event_micros).tolist()
    created_ts: list[int] | list[None] = (
        [None] * n
        if batch.created_micros is None
        else E.sqlite_event_seconds(batch.created_micros).tolist()
    )
    table = _quote(table_name)
    statements = []
    for at in range(0, len(names), _ROWS_PER_STATEMENT):
        group = names[at : at + _ROWS_PER_STATEMENT]
        values = [batch.encoded(name).to_pylist() for name in group]
        texts = [E.value_texts(*batch.features[name]) for name in group]
        # one statement per entity: key and timestamps bound once for all its features
        params = zip(keys, *values, *texts, event_ts, created_ts, strict=True)
        statements.append((_upsert_sql(table, group), params))
    conn = sqlite3.connect(path, isolation_level=None, timeout=lock_timeout_s())
    try:
        conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
        if not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table_name,)
        ).fetchone():
            msg = (f"table {table_name!r} is missing from {path}: run `feast apply` so "
                   "Feast creates the view's online table")
            raise OnlineStoreError(msg)
        before = conn.total_changes
        conn.execute("BEGIN IMMEDIATE")
        try:
            for sql, params in statements:
                conn.executemany(sql, params)
            changed = conn.total_changes - before
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        msg = f"SQLite write to {table_name!r} in {path} failed, nothing written: {exc}"
        raise OnlineStoreError(msg) from exc
    finally:
        conn.close()
    written = round(changed / n_features) if n_features else 0
    return written, n - written


def _upsert_sql(table: str, features: Sequence[str]) -> str:
    """Upsert of all ``features`` of one entity: parameters are the entity key, the
    values, the ``value_text``s, ``event_ts``, ``created_ts``; an older event changes
    nothing."""
    f = len(features)
    rows = ", ".join(
        f"(?1, {_literal(name)}, ?{2 + j}, ?{2 + f + j}, ?{2 + 2 * f}, ?{3 + 2 * f})"
        for j, name in enumerate(features)
    )
    return (
        f"INSERT INTO {table} (entity_key, feature_name, value, value_text, event_ts, "
        f"created_ts) VALUES {rows} ON CONFLICT(entity_key, feature_name) DO UPDATE SET "
        "value = excluded.value, value_text = excluded.value_text, "
        "event_ts = excluded.event_ts, created_ts = excluded.created_ts "
        f"WHERE excluded.event_ts >= {table}.event_ts"
    )


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"

