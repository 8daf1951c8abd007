"""Rolling frames at query points over runs sorted by (key, ts): inputs and the reference.

A *run* is a set of rows sorted by integer key, then ts (ties in arrival
order); runs come in arrival order, so the rows of all runs in (key, ts)
order, ties to the earlier run, are the rows as a stable sort would order
them. A *query* is a key and a time t (int64 ns); its frame for window W is
every row of that key with ts in ``[t - W, t]`` (or the sawtooth
``[floor((t - W) / hop) * hop, t]``): the frame `featureflow.ops.rolling`
gives a row of that key at time t, rows with ts == t included.

`plan` groups the queries by key and finds each key's segment in every run
(binary search, no pass over the rows); the backends then compute only the
queries' frames. `reference_rolling_at` is the numpy reference: the queried
keys' rows gathered and sorted, then `_reference.frame_aggregates`.

`FrameStates` are what the Mojo kernel can keep between calls: each key's frame
at its last query, per window (mojo_ops/featureflow_kernels/rolling/_resume.mojo),
so the next call over the same runs plus rows that are all queried resumes them
and reads only the rows entering and leaving the frames.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa

from featureflow.ops import _tables
from featureflow.ops._reference import Sorted, _write, frame_aggregates
from featureflow.ops._tables import OutputColumn


@dataclass(frozen=True)
class Run:
    """One run: int64 ``keys`` and ``ts`` (numpy, sorted by key then ts) and its values."""

    keys: np.ndarray
    ts: np.ndarray
    values: pa.Array

    @property
    def n(self) -> int:
        return len(self.ts)


RESUMABLE_AGGS: Final = frozenset({"count", "sum", "mean", "min", "max", "std", "var"})
"""The aggregates a frame state answers (first/last/count_distinct need the rows)."""


@dataclass(frozen=True)
class FrameStates:
    """Per key and window, the frame the Mojo kernel wrote at the key's last query.

    ``keys``: int64, sorted, unique; ``words``: int64 ``(rows, windows, words)``,
    opaque to Python (the kernel's `FrameState`; a zero first word: no state), key
    ``keys[i]``'s in row ``slots[i]`` (None: row ``i``); the rows in use are rows
    ``0 .. len(keys) - 1``, in any order. Rows stay where they are written: an
    in-place update writes the keys it holds in their rows and new keys in spare rows
    after those (``words`` keeps spare rows for them), so a batch costs its own keys'
    states, not a copy of every key's (:meth:`placed`).
    ``signature``: the call they answer (windows in ns, hop, aggregates, value type).
    """

    keys: np.ndarray
    words: np.ndarray
    signature: tuple[object, ...]
    slots: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        slots = 0 if self.slots is None else self.slots.nbytes
        return int(self.keys.nbytes + self.words.nbytes + slots)

    def rows(self) -> np.ndarray:
        """The row of ``words`` holding each key's states, in key order."""
        return np.arange(len(self.keys)) if self.slots is None else self.slots

    def in_key_order(self) -> np.ndarray:
        """Each key's states, in key order (``words`` itself when its rows are in order)."""
        return self.words[: len(self.keys)] if self.slots is None else self.words[self.slots]

    def rows_for(self, keys: np.ndarray) -> np.ndarray:
        """The row of ``words`` holding each of ``keys`` (sorted, unique), int64; -1 where
        none. The kernels read the states there (`featureflow.ops.rolling_at`): no
        gather of a batch's states into a copy first."""
        if not (len(self.keys) and len(keys)):
            return np.full(len(keys), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[at] == keys, self.rows()[at], -1).astype(np.int64)

    def for_keys(self, keys: np.ndarray) -> np.ndarray:
        """The states of ``keys`` (sorted, unique) in that order; zeros where none."""
        rows = self.rows_for(keys)
        out = np.take(self.words, np.maximum(rows, 0), axis=0) if len(self.keys) else \
            np.zeros((len(keys), *self.words.shape[1:]), dtype=np.int64)
        out[rows < 0] = 0
        return out

    def placed(self, keys: np.ndarray) -> tuple[FrameStates, np.ndarray, np.ndarray]:
        """These states made ready for the kernel to write ``keys``' (sorted, unique) in
        place, for a caller that owns them and needs them no more: returns (the states of
        every held key and of ``keys``, each of ``keys``' held row (-1: none), each one's
        row to write). A held key is written in its own row, a new key in a spare row
        (the rows grow by half when none is left); the kernel writes every row given.

        A batch touches some of the entities whose frames it carries and some it never
        saw. Merging its states into the held ones cost a copy of the batch's states and
        a scatter of them (20 ms a 200 k-event batch over 24 h of state, 100 k entities),
        and a fresh array for them, all of which writing in place saves.
        """
        held_rows = self.rows_for(keys)
        fresh = held_rows < 0
        used, added = len(self.keys), int(fresh.sum())  # rows in use: 0 .. used - 1
        words = self.words
        if used + added > len(words):
            words = np.empty((max(used + added, len(words) * 3 // 2), *words.shape[1:]),
                             dtype=np.int64)  # fmt: skip
            words[:used] = self.words[:used]
        out_rows = held_rows.copy()
        out_rows[fresh] = np.arange(used, used + added)
        if not added:
            return FrameStates(self.keys, words, self.signature, self.slots), held_rows, out_rows
        all_keys, slots = _merged(self.keys, self.rows(), keys[fresh], out_rows[fresh])
        return FrameStates(all_keys, words, self.signature, slots), held_rows, out_rows

    def updated_by(self, newer: FrameStates) -> FrameStates:
        """These states with ``newer``'s keys replaced or added (newer wins), in a copy:
        the held keys' rows that ``newer`` does not replace, then ``newer``'s. (A caller
        that owns these states has the kernel write them in place: :meth:`placed`.)"""
        if not len(self.keys):
            return newer
        rows = self.rows()
        at = np.minimum(np.searchsorted(newer.keys, self.keys), max(len(newer.keys) - 1, 0))
        stays = newer.keys[at] != self.keys if len(newer.keys) else np.ones(len(self.keys), bool)
        kept = int(stays.sum())
        words = np.concatenate([self.words[rows[stays]], newer.in_key_order()])
        keys, slots = _merged(self.keys[stays], np.arange(kept),
                              newer.keys, np.arange(kept, kept + len(newer.keys)))  # fmt: skip
        return FrameStates(keys, words, newer.signature, slots)


def _merged(
    keys: np.ndarray, values: np.ndarray, more_keys: np.ndarray, more_values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted key arrays without a common key merged, each key with its value."""
    placed = np.searchsorted(keys, more_keys) + np.arange(len(more_keys))
    rest = np.ones(len(keys) + len(more_keys), dtype=bool)
    rest[placed] = False
    merged_keys = np.empty(len(rest), dtype=np.int64)
    merged_keys[placed], merged_keys[rest] = more_keys, keys
    merged_values = np.empty(len(rest), dtype=np.int64)
    merged_values[placed], merged_values[rest] = more_values, values
    return merged_keys, merged_values


@dataclass(frozen=True)
class Plan:
    """The queries sorted by (key, t), grouped by key, with each key's segment per run.

    ``qts[j]``: time of sorted query j; ``qout[j]``: its output row (``order[j]``,
    its position in the caller's query order, when those come in a few sorted pieces;
    otherwise j, see `in_query_order`); queries ``qoff[g]:qoff[g + 1]`` are of key
    ``group_keys[g]``; its rows in run r are ``segs[g, r, 0]:segs[g, r, 1]``;
    ``capacity``: the most rows one key holds over all runs.
    """

    qts: np.ndarray
    qout: np.ndarray
    qoff: np.ndarray
    group_keys: np.ndarray
    segs: np.ndarray
    capacity: int
    order: np.ndarray

    @property
    def nq(self) -> int:
        return len(self.qts)

    def in_query_order(self, columns: list[OutputColumn]) -> pa.Table:
        """The result ``columns`` as a table in the caller's query order.

        Written at their queries' own rows (``qout`` is ``order``), or computed in
        sorted order when that is the caller's, the columns are the table as they are.
        Otherwise (computed in sorted order, ``qout`` = 0, 1, ...) it gathers one
        column at a time and takes each from ``columns`` (the list is left empty): a
        column's sorted buffers are freed once it is gathered, so the results are held
        about once, not twice (the offline history of a large micro-batch is the
        biggest table a task makes)."""
        if (
            self.qout is self.order
            or len(self.order) < 2
            or bool(np.all(self.order[1:] > self.order[:-1]))
        ):
            return _tables.table(columns, self.nq)
        inverse = np.empty_like(self.order)
        inverse[self.order] = np.arange(len(self.order))
        indices = pa.array(inverse)
        names, arrays = [], []
        columns.reverse()
        while columns:
            column = columns.pop()
            names.append(column.name)
            arrays.append(column.array(self.nq).take(indices))
            del column
        return pa.Table.from_arrays(arrays, names=names)


def plan(
    runs: Sequence[Run],
    at_keys: np.ndarray,
    at_ts: np.ndarray,
    segments: Callable[[np.ndarray, np.ndarray], np.ndarray],
    merge: Callable[[list[Run], int], np.ndarray] | None = None,
) -> Plan:
    """Group the queries (``at_keys[j]``, ``at_ts[j]``) by key and find their segments
    (``segments(run.keys, group_keys)``: each group key's ``[left, right)`` in a run).

    ``merge``: the backend's ``merge_runs`` (a stable merge of runs sorted by (key, t),
    as indices into their concatenation). Queries that come in a few sorted pieces (a
    stream's new events by entity, then each touched entity's latest) are ordered by
    merging the pieces: 3.8 ms against a 31 ms lexsort for 286 k queries in two
    pieces on the Mojo backend, the same order (the lexsort is stable too)."""
    at_keys = np.ascontiguousarray(at_keys, dtype=np.int64)
    at_ts = np.ascontiguousarray(at_ts, dtype=np.int64)
    starts = _piece_starts(at_keys, at_ts)
    if len(starts) <= 1:
        order = np.arange(len(at_keys), dtype=np.int64)
    elif merge is not None and len(starts) <= SEQUENTIAL_PIECES:
        bounds = itertools.pairwise([*starts.tolist(), len(at_keys)])
        order = merge([Run(at_keys[a:b], at_ts[a:b], _NO_VALUES) for a, b in bounds],
                      _EARLIEST)  # fmt: skip
    else:
        order = np.lexsort((at_ts, at_keys))
    qk = at_keys[order]
    qts = np.ascontiguousarray(at_ts[order], dtype=np.int64)
    if len(qk):
        first = np.flatnonzero(np.concatenate([[True], qk[1:] != qk[:-1]]))
    else:
        first = np.zeros(0, dtype=np.int64)
    group_keys = qk[first]
    qoff = np.concatenate([first, [len(qk)]]).astype(np.int64)
    segs = np.zeros((len(group_keys), max(len(runs), 1), 2), dtype=np.int64)
    for r, run in enumerate(runs):
        segs[:, r, :] = segments(run.keys, group_keys)
    held = (segs[:, :, 1] - segs[:, :, 0]).sum(axis=1) if len(runs) else np.zeros(0)
    capacity = int(held.max()) if len(held) else 0
    # Queries that come as a few pieces, each sorted by (key, t), have their outputs
    # written at their own rows: one sequential store stream per piece. Any other order
    # is written in sorted order and put back with one gather (`in_query_order`):
    # scattered stores over 18 columns cost more than the frames.
    in_place = len(starts) <= SEQUENTIAL_PIECES
    qout = order if in_place else np.arange(len(qts), dtype=np.int64)
    return Plan(qts, qout, qoff, group_keys, segs, capacity, order)


SEQUENTIAL_PIECES = 4
"""The most sorted pieces of queries whose outputs `plan` has written in place (and
orders by merging them)."""

_NO_VALUES = pa.nulls(0, pa.float64())
"""The values of the query pieces given to ``merge`` (it reads keys and times only)."""
_EARLIEST = int(np.iinfo(np.int64).min)
"""``merge``'s cut that keeps every query."""


def _piece_starts(keys: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Where each of the pieces, each sorted by (key, t), that the queries come in starts
    (none for no queries)."""
    if len(keys) < 2:
        return np.zeros(len(keys), dtype=np.int64)
    down = (keys[1:] < keys[:-1]) | ((keys[1:] == keys[:-1]) & (ts[1:] < ts[:-1]))
    return np.concatenate([[0], np.flatnonzero(down) + 1]).astype(np.int64)


def _search(
    ts: np.ndarray, lo: np.ndarray, hi: np.ndarray, target: np.ndarray, right: bool
) -> np.ndarray:
    """Per query: the first p in [lo, hi) with ts[p] >= target (``right``: > target), or hi.
    ``ts`` is sorted within each [lo, hi); a vectorised binary search."""
    lo, hi = lo.copy(), hi.copy()
    last = max(len(ts) - 1, 0)
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) // 2
        at = ts[np.minimum(mid, last)] if len(ts) else np.zeros(len(mid), dtype=np.int64)
        up = active & ((at <= target) if right else (at < target))
        lo = np.where(up, mid + 1, lo)
        hi = np.where(active & ~up, mid, hi)


def reference_rolling_at(
    runs: Sequence[Run],
    p: Plan,
    windows: list[int],
    hop: int | None,
    aggs: list[str],
    columns: list[OutputColumn],
) -> None:
    """The numpy reference of `featureflow.ops.rolling_at` (see the module docstring)."""
    if p.nq == 0:
        return
    ngroups = len(p.group_keys)
    parts_ts, parts_v, parts_g = [], [], []
    for r, run in enumerate(runs):
        a, b = p.segs[:, r, 0], p.segs[:, r, 1]
        lengths = b - a
        total = int(lengths.sum())
        if not total:
            continue
        group = np.repeat(np.arange(ngroups), lengths)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        idx = a[group] + (np.arange(total) - starts[group])
        vals = run.values.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
        parts_ts.append(run.ts[idx])
        parts_v.append(vals[idx])
        parts_g.append(group)
    # a NaN row (no aggregate sees it) after every other keeps each frame's [lo, hi)
    # within the arrays, also for empty frames past a key's last row
    parts_ts.append(np.array([np.iinfo(np.int64).max]))
    parts_v.append(np.array([np.nan]))
    parts_g.append(np.array([ngroups - 1], dtype=np.int64))
    ts, vals, group = (np.concatenate(x) for x in (parts_ts, parts_v, parts_g))
    perm = np.lexsort((ts, group))  # stable: ties keep run order, then row order
    counts = np.bincount(group, minlength=ngroups)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    srt = Sorted(perm, ts[perm], vals[perm], starts)
    qgroup = np.repeat(np.arange(ngroups), np.diff(p.qoff))
    glo, ghi = starts[qgroup], starts[qgroup + 1]
    hi = _search(srt.ts, glo, ghi, p.qts, right=True)
    for w, window in enumerate(windows):
        lower = p.qts - window
        if hop:
            lower = (lower // hop) * hop
        lo = _search(srt.ts, glo, hi, lower, right=False)
        results = frame_aggregates(srt, lo, hi, aggs)
        _write(columns[w * len(aggs) : (w + 1) * len(aggs)], results, p.qout)
