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

Performance: entities are written sorted by entity key, so SQLite's B-trees
fill in order, and each block of entities is one ``INSERT … SELECT`` with no
per-row Python and no per-row parameter binding. The rows reach SQLite as a
ready database image (:mod:`featureflow.online.sqlite_image`): numpy and the row
join build its pages, ``sqlite3_deserialize`` attaches it to the writing
connection, and the upsert reads it like any table, so SQLite's work is the
store's floor (a staged table upserted). Measured (100,000 entities x 18
doubles, 2-core VM): cutting the same rows out of bound blobs with ``substr``
in a recursive CTE, as before (and still where a Python's SQLite cannot take
images, or a record would not fit one 64 KiB page), cost SQLite 3.2 s of row
building against 0.4 s to read them staged; binding them through
``executemany`` costs more again (1.5-2.9 s of Python).

Pipelined: a worker thread owns the connection and executes each block's
statement while the calling thread builds the next block (the ``sqlite3``
module releases the GIL inside ``sqlite3_step``), so the Python work hides
behind SQLite's; the first block is small so SQLite starts early. What remains
is SQLite's own per-row cost: three B-tree inserts per (entity, feature) row
(the table, its primary key and Feast's ``entity_key`` index), and the commit.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from feast.infra.online_stores.sqlite import SqliteOnlineStore
from feast.repo_config import RepoConfig

from featureflow.errors import OnlineStoreError
from featureflow.online import _bytes as B
from featureflow.online import encoding as E
from featureflow.online.batch import Batch, reorder
from featureflow.online.sqlite_image import TABLE as IMAGE_TABLE
from featureflow.online.sqlite_image import OnlineRows, table_image

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

    One transaction: a worker thread opens the connection, takes the write lock
    (``BEGIN IMMEDIATE``) and executes the blocks' statements as this thread builds
    them; it commits after the last one, or rolls back on any error (SQLite's, or
    one raised while building a block), so nothing is written unless everything is.

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
    worker = _Transaction(path, table_name)
    worker.start()
    try:
        if n_features:
            for statement in _statements(_quote(table_name), batch, names):
                if not worker.put(statement):
                    break  # the transaction failed: stop building, report its error
    except BaseException:
        worker.finish(commit=False)
        raise
    changed = worker.finish(commit=True)
    written = round(changed / n_features) if n_features else 0
    return written, n - written


_Statement = tuple[str, "dict[str, bytes] | npt.NDArray[np.uint8]"]
"""SQL and its blob parameters, or SQL reading ``_STAGE`` and the image to put there."""

_DONE: _Statement = ("", {})
"""Queue marker: no more statements; commit (or roll back when told to abort)."""


class _Transaction(threading.Thread):
    """The connection and the one transaction of a write, in a thread of its own.

    ``put`` hands it a statement (it holds at most two, so building stays at most two
    blocks ahead of SQLite); ``finish`` waits for the commit (or the rollback) and
    returns the rows changed, or raises the ``OnlineStoreError`` of the failure.
    """

    def __init__(self, path: Path, table_name: str) -> None:
        super().__init__(name="featureflow-sqlite-write", daemon=True)
        self._path = path
        self._table = table_name
        self._queue: queue.Queue[_Statement] = queue.Queue(maxsize=2)
        self._abort = False
        self._failed = threading.Event()
        self._error: BaseException | None = None
        self._changed = 0

    def put(self, statement: _Statement) -> bool:
        """Queue ``statement``; False once the transaction has failed (nothing more runs)."""
        while not self._failed.is_set():
            try:
                self._queue.put(statement, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def finish(self, commit: bool) -> int:
        """End the transaction (commit, or roll back when ``commit`` is false or a
        statement failed); the rows changed by it."""
        self._abort = not commit
        while self.is_alive() and not self._failed.is_set():
            try:
                self._queue.put(_DONE, timeout=0.05)
                break
            except queue.Full:
                continue
        self.join()
        if self._error is not None:
            raise self._error
        return self._changed

    def run(self) -> None:
        try:
            self._changed = self._transaction()
        except BaseException as exc:  # handed to the caller by finish()
            self._error = exc
            self._failed.set()

    def _transaction(self) -> int:
        path, table_name = self._path, self._table
        try:
            conn = sqlite3.connect(path, isolation_level=None, timeout=lock_timeout_s())
        except sqlite3.Error as exc:
            msg = f"SQLite write to {table_name!r} in {path} failed, nothing written: {exc}"
            raise OnlineStoreError(msg) from exc
        try:
            conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
            if not conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table_name,)
            ).fetchone():
                msg = (f"table {table_name!r} is missing from {path}: run `feast apply` so "
                       "Feast creates the view's online table")
                raise OnlineStoreError(msg)
            if _IMAGES:
                conn.execute(f"ATTACH ':memory:' AS {_STAGE}")
            before = conn.total_changes
            conn.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in iter(self._queue.get, _DONE):
                    if isinstance(params, dict):
                        conn.execute(sql, params)
                    else:
                        # a block's rows as a database image, read from there; each image
                        # replaces the one before (the schema holds nothing else), inside
                        # the open transaction, which only writes to ``main``
                        conn.deserialize(params.data, name=_STAGE)
                        conn.execute(sql)
                if self._abort:
                    raise _Aborted
                changed = conn.total_changes - before
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return changed
        except _Aborted:
            return 0
        except sqlite3.Error as exc:
            msg = f"SQLite write to {table_name!r} in {path} failed, nothing written: {exc}"
            raise OnlineStoreError(msg) from exc
        finally:
            conn.close()


class _Aborted(Exception):
    """The caller failed while building statements: roll back."""


_ENTITIES_PER_STATEMENT = 32_768
"""Entities per ``INSERT … SELECT`` of bound blobs (bounds the size of each blob)."""

_IMAGE_ROWS = 131_072
"""Rows per database image (~12 MiB for 18 doubles: bounds the memory held)."""

_IMAGES = hasattr(sqlite3.Connection, "deserialize")
"""Whether this Python's SQLite takes database images (Python 3.11+, SQLite built with
``sqlite3_deserialize``, the default since 3.36)."""

_STAGE = "featureflow_rows"
"""Schema name the images are attached under, on the writing connection only."""

_FIRST_STATEMENT = 4_096
"""Entities of the first block: small, so SQLite starts while the rest is built."""

_Params = dict[str, bytes]


def _blocks(n: int, size: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of each block of entities: a small first one, then ``size`` each."""
    lo = 0
    step = min(_FIRST_STATEMENT, size)
    while lo < n:
        hi = min(lo + step, n)
        yield lo, hi
        lo, step = hi, size


def _statements(table: str, batch: Batch, names: list[str]) -> Iterator[_Statement]:
    """The upserts writing ``batch`` (sorted by key), one per block of entities, built
    block by block: each block's rows as a database image and the SQL reading them from
    there (:mod:`featureflow.online.sqlite_image`), or, where SQLite cannot take images
    or a record would not fit one page, the SQL cutting the rows out of bound blobs."""
    event_ts = E.sqlite_event_seconds(batch.event_micros)
    created_ts = (None if batch.created_micros is None
                  else E.sqlite_event_seconds(batch.created_micros))
    f = len(names)
    size = max(1, _IMAGE_ROWS // f) if _IMAGES else _ENTITIES_PER_STATEMENT
    for lo, hi in _blocks(batch.n, size):
        block = batch.rows(lo, hi)
        values = B.interleave([block.encoded(name).to_arrow() for name in names])
        texts = [E.value_text_array(*block.features[name]) for name in names]
        text_cells = B.interleave([
            t if t is not None else pa.nulls(block.n, pa.large_binary()) for t in texts])
        nulls = np.stack([
            np.ones(block.n, dtype=bool) if t is None
            else np.asarray(t.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            for t in texts], axis=1).reshape(-1)
        image = None if not _IMAGES else table_image(OnlineRows(
            block.keys, names, values, text_cells, nulls, event_ts[lo:hi],
            None if created_ts is None else created_ts[lo:hi]))
        if image is not None:
            yield _upsert(table, f"SELECT {_COLUMNS} FROM {_STAGE}.{IMAGE_TABLE}"), image
            continue
        params: _Params = {}
        cell = f"(e.i * {f} + f.j)"
        # per entity, cut once in the recursive CTE (``{i}``: the entity's row there)
        per_entity = [
            _cells("k", block.keys, "{i}", params),
            _integers("ts", event_ts[lo:hi], "{i}", params),
            "NULL" if created_ts is None else _integers("cts", created_ts[lo:hi], "{i}", params),
        ]
        value = _cells("v", values, cell, params)
        text = f"CAST({_cells('t', text_cells, cell, params)} AS TEXT)"
        if nulls.all():
            text = "NULL"
        elif nulls.any():
            params["tn"] = nulls.astype(np.uint8).tobytes()
            text = f"CASE WHEN substr(:tn, {cell} + 1, 1) = x'01' THEN NULL ELSE {text} END"
        first = ", ".join(x.replace("{i}", "0") for x in per_entity)
        step = ", ".join(x.replace("{i}", "i + 1") for x in per_entity)
        features = ", ".join(f"({j}, {_literal(name)})" for j, name in enumerate(names))
        common = (
            f"WITH RECURSIVE e(i, k, ts, cts) AS (SELECT 0, {first} UNION ALL SELECT i + 1, "
            f"{step} FROM e WHERE i < {hi - lo - 1}), "
            f"f(j, name) AS MATERIALIZED (VALUES {features}) "
        )
        # CROSS JOIN keeps e the outer loop: rows in (entity_key, feature_name) order
        rows = f"SELECT e.k, f.name, {value}, {text}, e.ts, e.cts FROM e CROSS JOIN f"
        yield _upsert(table, rows, common), params


_COLUMNS = "entity_key, feature_name, value, value_text, event_ts, created_ts"


def _upsert(table: str, rows: str, common: str = "") -> str:
    """The upsert of ``rows`` (a SELECT of :data:`_COLUMNS`; ``common``: the WITH clause
    it reads): a row replaces the stored one unless the stored one is newer."""
    return (
        f"{common}INSERT INTO {table} ({_COLUMNS}) {rows} "
        # WHERE true: SQLite's parser needs it before an upsert clause
        "WHERE true ON CONFLICT(entity_key, feature_name) DO UPDATE SET "
        "value = excluded.value, value_text = excluded.value_text, "
        "event_ts = excluded.event_ts, created_ts = excluded.created_ts "
        f"WHERE excluded.event_ts >= {table}.event_ts"
    )


def _cells(name: str, cells: B.Packed, row: str, params: _Params) -> str:
    """SQL for cell ``row`` of ``cells``, binding its bytes as ``:name`` (+ offset tables)."""
    lengths = cells.lengths()
    start = int(cells.offsets[0])
    params[name] = cells.data[start : int(cells.offsets[-1])].tobytes()
    if len(lengths) and int(lengths.min()) == int(lengths.max()):
        w = int(lengths[0])
        return f"substr(:{name}, ({row}) * {w} + 1, {w})"
    at = cells.offsets[:-1] - start
    at_w = len(str(int(at.max()))) if len(at) else 1
    len_w = len(str(int(lengths.max()))) if len(lengths) else 1
    params[f"{name}_at"] = B.padded_decimal(at, at_w).tobytes()
    params[f"{name}_len"] = B.padded_decimal(lengths, len_w).tobytes()
    return (f"substr(:{name}, CAST(substr(:{name}_at, ({row}) * {at_w} + 1, {at_w}) AS INTEGER)"
            f" + 1, CAST(substr(:{name}_len, ({row}) * {len_w} + 1, {len_w}) AS INTEGER))")


def _integers(name: str, values: npt.NDArray[np.int64], row: str, params: _Params) -> str:
    """SQL for integer ``row`` of ``values``, bound as ``:name`` (decimal digits above the
    minimum, so negative numbers need no sign)."""
    low = int(values.min())
    above = values - low
    width = len(str(int(above.max())))
    params[name] = B.padded_decimal(above, width).tobytes()
    return f"(CAST(substr(:{name}, ({row}) * {width} + 1, {width}) AS INTEGER) + {low})"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
