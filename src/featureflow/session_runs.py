"""A session view's state as runs sorted by (entity, time), whose closed sessions leave lazily.

The state table of a session view (:func:`featureflow.window_state.session_step`)
holds the events of its entities' open sessions as *runs*, the layout of
:mod:`featureflow.state_runs`: record batches each sorted by the join key, then
event time (ties in arrival order), the runs in arrival order. A micro-batch
appends its new events as one more run and touches only its entities' rows
(binary search per run); it never sorts or filters the whole state.

Rows of a closed session leave *lazily*: the schema's metadata records the
watermark the state has closed its sessions under (:data:`CLOSED_KEY`, ns), and
a row is part of the state only when its session, computed over the entity's
rows in the runs, is not closed under it (last event + gap < watermark, or
first event + max length < watermark). That is exact because a closed
session's rows all come before the entity's open sessions' rows and no row the
state accepts later can join it (each is at or after that watermark: past the
gap, or more than the max length after its start), so the sessions of the
rows in the runs are the closed ones, then the open ones, as they were
computed. The state is *compacted* (:func:`compact`: its live rows as one run)
once it holds more rows of closed sessions than of open ones, or more than
:data:`MAX_RUNS` runs: a few full rewrites instead of a rewrite every batch.

A table without the layout (a state saved in time order by an earlier version,
holding exactly the open sessions' events) is read as one run with nothing
closed in it.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa

from featureflow import ops, state_runs
from featureflow.columns import EVENT_NS
from featureflow.ops import KeyedRows

LAYOUT_KEY: Final = b"featureflow.state_layout"
LAYOUT: Final = b"session-runs-v1"
CLOSED_KEY: Final = b"featureflow.session_closed_ns"
"""Schema metadata: the watermark (ns, decimal) the state closed its sessions under."""
MAX_RUNS: Final = 48
"""Runs a state may hold before it is compacted whatever its closed rows (each run
costs a binary search per entity read back)."""


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` without metadata (what a state's columns are)."""
    return schema.remove_metadata()


def is_session_runs(table: pa.Table | None) -> bool:
    """Whether ``table`` has this layout."""
    return table is not None and (table.schema.metadata or {}).get(LAYOUT_KEY) == LAYOUT


def closed_ns(table: pa.Table | None) -> int | None:
    """The watermark ``table``'s closed sessions left under (None: nothing closed in it)."""
    if not is_session_runs(table):
        return None
    assert table is not None
    value = (table.schema.metadata or {}).get(CLOSED_KEY)
    return None if value is None else int(value)


def state_table(runs: list[pa.Table], schema: pa.Schema, closed: int | None) -> pa.Table:
    """One table holding ``runs`` as its record batches, marked with the layout and the
    watermark ``closed`` (ns) its closed sessions left under."""
    metadata = {LAYOUT_KEY: LAYOUT}
    if closed is not None:
        metadata[CLOSED_KEY] = str(int(closed)).encode()
    marked = plain_schema(schema).with_metadata(metadata)
    batches = [b for run in runs for b in run.cast(marked).to_batches() if b.num_rows]
    return pa.Table.from_batches(batches, schema=marked)


def numpy_int64(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """An integer column as int64 numpy (no copy when it is one chunk of int64)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return np.asarray(column.to_numpy(zero_copy_only=False)).astype(np.int64, copy=False)


def compaction_due(held_rows: int, live_rows: int, runs: int) -> bool:
    """Whether to compact: the runs hold more rows of closed sessions than of open
    ones, or more than :data:`MAX_RUNS` runs."""
    return held_rows - live_rows > live_rows or runs > MAX_RUNS


def sorted_run(table: pa.Table, join_key: str) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """``table``'s rows as one run (key, then time, ties in row order), with its
    distinct keys and where each key's rows start (:func:`featureflow.ops.sort_run`)."""
    order, keys, offsets = ops.sort_run(
        numpy_int64(table.column(join_key)), numpy_int64(table.column(EVENT_NS))
    )
    if len(order) > 1 and np.all(order[1:] > order[:-1]):
        return table.combine_chunks(), keys, offsets
    return table.take(pa.array(order)).combine_chunks(), keys, offsets


def runs_of(state: pa.Table | None, join_key: str) -> list[pa.Table]:
    """The runs of a state table (each a one-chunk table), oldest first; a table
    without the layout is sorted into one."""
    if state is None or state.num_rows == 0:
        return []
    if is_session_runs(state):
        return [pa.Table.from_batches([b]) for b in state.to_batches() if b.num_rows]
    return [sorted_run(state, join_key)[0]]


def run_columns(
    runs: list[pa.Table], join_key: str, columns: list[str]
) -> list[ops.RunColumns]:
    """What the kernels read of each run: keys and times (int64 numpy) and the value
    columns (Arrow, read in place)."""
    return [
        (
            numpy_int64(run.column(join_key)),
            numpy_int64(run.column(EVENT_NS)),
            [_one_chunk(run.column(c)) for c in columns],
        )
        for run in runs
    ]


def _one_chunk(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def entity_keys(runs: list[ops.RunColumns]) -> np.ndarray:
    """Every key the runs hold, sorted (int64)."""
    parts = [np.unique(keys) for keys, _, _ in runs]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def read_back(
    runs: list[ops.RunColumns], keys: np.ndarray, from_ns: np.ndarray,
    capacity: int | None = None,
) -> KeyedRows:  # fmt: skip
    """The rows of ``keys`` (sorted, distinct) with time >= ``from_ns`` (per key), in
    time order, ties in arrival order (:func:`featureflow.ops.gather_runs`, ``capacity``
    its hint of the rows found)."""
    ncols = len(runs[0][2]) if runs else 0
    if not runs or not len(keys):
        return KeyedRows.empty(len(keys), ncols)
    return ops.gather_runs(runs, keys, from_ns, capacity)


def compact(
    runs: list[pa.Table], columns: list[ops.RunColumns], keys: np.ndarray, bounds: np.ndarray,
    live_rows: int | None = None,
) -> list[pa.Table]:  # fmt: skip
    """The live rows of ``runs`` as one run: of each key in ``keys`` (sorted, distinct)
    its rows at or after its bound (ns), of the other keys none. ``live_rows``: how many
    that is, when known (the read-back then holds room for those, not for every row:
    compaction runs when the runs hold twice the live rows or more)."""
    if not runs or not len(keys):
        return []
    # only the row indices are kept: the rows' times go before the columns are taken
    rows = read_back([(k, t, []) for k, t, _ in columns], keys, bounds, live_rows).rows
    if rows is None or not len(rows):
        return []
    return [state_runs.take_rows(runs, rows)]
