"""A rolling view's window state as runs sorted by (entity, time): cheap to extend and prune.

The state of a plain rolling view is one Arrow table whose record batches are
*runs*: each sorted by the join key, then event time (ties in arrival order),
the runs in arrival order; the schema's metadata says so (:data:`LAYOUT_KEY`).
This is the layout :func:`featureflow.ops.rolling_at` reads in place, so a
micro-batch costs what its new events cost, not what the state holds:

- a batch's new events become one new run (sorted: O(new log new));
- runs are merged (:func:`featureflow.ops.merge_runs`, one linear pass, then
  one Arrow ``take`` per column) only when the newer of two adjacent runs holds
  at least 1/:data:`FANOUT` of the older one's rows, so there are
  O(log(state / batch)) runs and each event is copied O(log) times over its
  life (an LSM tree);
- pruning is by time, done while merging, or when more than
  :data:`STALE_SHARE` of a run's rows (estimated from a sample) are older than
  the cut (a run wholly older is dropped, without a copy); until then a run may
  hold events no future frame reaches (frames of on-time events start at or after
  the cut, so they never see them).

A state table without the metadata (a state saved in time order before this
layout, or a caller's table) is sorted into one run once.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow import ops
from featureflow.columns import EVENT_NS

LAYOUT_KEY: Final = b"featureflow.state_layout"
LAYOUT: Final = b"runs-by-key-v1"
FANOUT: Final = 4
"""Adjacent runs merge when the newer one holds at least 1/FANOUT of the older one's rows."""
STALE_SHARE: Final = 0.25
"""A run is rewritten without its pruned rows once more than this share of them is."""
STALE_SAMPLE: Final = 1024
"""Rows of a run read to estimate its stale share (:func:`_stale_share`)."""


def with_layout(schema: pa.Schema) -> pa.Schema:
    """``schema`` marked as holding runs."""
    return schema.with_metadata({**(schema.metadata or {}), LAYOUT_KEY: LAYOUT})


def _numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return np.asarray(column.to_numpy(zero_copy_only=False))


def sorted_run(table: pa.Table, join_key: str) -> pa.Table:
    """``table``'s rows as one run: sorted by (join key, time), ties in row order."""
    keys, ts = _numpy(table.column(join_key)), _numpy(table.column(EVENT_NS))
    order = np.lexsort((ts, keys))
    if len(order) > 1 and np.all(order[1:] > order[:-1]):
        return table.combine_chunks()
    return table.take(pa.array(order)).combine_chunks()


def runs_of(state: pa.Table, join_key: str) -> list[pa.Table]:
    """The runs of a state table (each a one-chunk table), oldest first."""
    if state.num_rows == 0:
        return []
    if (state.schema.metadata or {}).get(LAYOUT_KEY) == LAYOUT:
        return [pa.Table.from_batches([b]) for b in state.to_batches() if b.num_rows]
    return [sorted_run(state, join_key)]


def take_rows(runs: list[pa.Table], rows: np.ndarray) -> pa.Table:
    """Rows ``rows`` (int64 indices into the runs' concatenation) of ``runs`` (one
    schema) as a one-chunk table.

    Column by column: a fixed-width column gathered straight from the runs' chunks
    (:func:`featureflow.ops.gather_chunks`), any other joined, then taken. A
    whole-table ``take`` of chunked columns is several times slower, and this holds at
    most one joined column at a time beside the output."""
    indices = pa.array(rows)
    columns = []
    for name in runs[0].column_names:
        chunks = [chunk for run in runs for chunk in run.column(name).chunks]
        if not chunks:
            chunks = [pa.array([], runs[0].schema.field(name).type)]
        gathered = ops.gather_chunks(chunks, rows)  # fixed-width: no joined copy first
        if gathered is not None:
            columns.append(gathered)
            continue
        joined = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
        columns.append(joined.take(indices))
        del joined
    return pa.Table.from_arrays(columns, schema=runs[0].schema)


def _merge(runs: list[pa.Table], join_key: str, cut_ns: int) -> pa.Table:
    """The runs as one run, rows before ``cut_ns`` dropped."""
    order = ops.merge_runs([(r.column(join_key), r.column(EVENT_NS)) for r in runs], cut_ns)
    return take_rows(runs, order)


def compact(runs: list[pa.Table], join_key: str, cut_ns: int) -> list[pa.Table]:
    """Merge and prune runs (module docstring); ``cut_ns``: the first time a future
    frame can reach. Returns the runs, oldest first."""
    out: list[pa.Table] = []
    for run in runs:
        if run.num_rows == 0:
            continue
        out.append(run)
        while len(out) >= 2 and out[-1].num_rows * FANOUT >= out[-2].num_rows:
            out[-2:] = [_merge(out[-2:], join_key, cut_ns)]
    pruned = []
    for run in out:
        share = _stale_share(_numpy(run.column(EVENT_NS)), cut_ns)
        if share == 1.0:
            continue
        if share > STALE_SHARE:
            run = _merge([run], join_key, cut_ns)
        pruned.append(run)
    return pruned


def _stale_share(ts: np.ndarray, cut_ns: int) -> float:
    """The share of a run's rows older than ``cut_ns``: 1.0 only when every row is.

    Estimated from :data:`STALE_SAMPLE` rows drawn by a fixed-seed generator (every
    row of a smaller run), so a batch does not read every run's times: a wrong estimate
    only moves a rewrite, which drops exactly the rows before the cut. Evenly spaced
    rows would alias with the runs' order (each key's rows oldest first). A sample
    wholly before the cut is confirmed on every row before the run is dropped. The same
    rows give the same estimate, so a replayed batch compacts as the first try did."""
    n = len(ts)
    if n == 0:
        return 1.0
    if n <= STALE_SAMPLE:
        sample = ts
    else:
        sample = ts[np.random.default_rng(0).integers(0, n, size=STALE_SAMPLE)]
    stale = int(np.count_nonzero(sample < cut_ns))
    if stale < len(sample):
        return stale / len(sample)
    return 1.0 if int(ts.max()) < cut_ns else (n - 1) / n


def state_table(runs: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """One table holding ``runs`` as its record batches, marked with the layout."""
    marked = with_layout(schema)
    batches = [b for run in runs for b in run.cast(schema).combine_chunks().to_batches()]
    return pa.Table.from_batches(batches, schema=marked)


def latest_times(runs: list[pa.Table], join_key: str, keys: np.ndarray) -> np.ndarray:
    """Per key (sorted, unique, each in some run): its latest event time over the runs."""
    latest = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
    for run in runs:
        segments = ops.run_segments(_numpy(run.column(join_key)), keys)
        has = segments[:, 1] > segments[:, 0]
        last = segments[has, 1] - 1  # a key's last row is its latest (rows in ts order)
        ts = _numpy(run.column(EVENT_NS))
        latest[has] = np.maximum(latest[has], ts[last])
    return latest


def entity_keys(runs: list[pa.Table], join_key: str) -> np.ndarray:
    """Every key the runs hold, sorted."""
    parts = [np.asarray(pc.unique(run.column(join_key)).to_numpy()) for run in runs]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
