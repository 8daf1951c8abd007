"""Session states kept between calls, and the runs they are read back from: the numpy reference.

A session *record* is one row of int64 words (floats stored as their bits), the
layout of ``mojo_ops/featureflow_kernels/sessions/_resume.mojo``: the key (or a
work key's index), the session's start and last row's time (ns), its rows, a
checkpoint's time (or a session's rows since its key's last checkpoint), then per
value column the count of non-NaN values (infinities included), the count of
finite ones, their compensated sum (sum and compensation, Knuth's two_sum in row
order), and min and max of the non-NaN values. That is the state the session
kernel keeps of a session, split as `featureflow.ops._nonfinite` splits a call
over values holding ±inf, so a record answers count, sum, mean, min and max
exactly as a pass over the session's rows does.

`resume_sessions` continues records over more rows; `record_segments` and
`splice_records` keep a table of records sorted by key (which rows a key owns;
the table after a batch, split by the watermark); `gather_runs` reads rows back
from runs sorted by (key, ts); `sort_run` orders a batch's rows into a run. The
functions here are the numpy backend's (plain loops where the kernel's order of
additions must be kept); the Mojo backend runs the same algorithms natively.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

R_KEY: Final = 0
"""The key (callers' tables) or the work key's index (`resume_sessions`' outputs)."""
R_START: Final = 1
"""The session's first row's time (ns)."""
R_LAST: Final = 2
"""The session's last row's time (ns) before the record's point."""
R_ROWS: Final = 3
"""The session's rows, null and NaN values included; 0: no session (an empty record)."""
R_AT: Final = 4
"""A checkpoint's time X (it holds the key's rows with time < X); a session's rows since
its key's last checkpoint."""
R_HEAD: Final = 5
"""Words before the per-column words."""
R_COL: Final = 6
"""Words a value column (`C_*` offsets)."""
C_COUNT, C_FINITE, C_SUM, C_SUM_C, C_MIN, C_MAX = range(6)
"""Per column: non-NaN values, finite values, sum and its compensation, min, max (the
last four float64 bits)."""


def record_words(ncols: int) -> int:
    """int64 words of one record with ``ncols`` value columns."""
    return R_HEAD + R_COL * ncols


def column_floats(records: np.ndarray, column: int) -> np.ndarray:
    """Column ``column``'s float words (sum, compensation, min, max) as float64, ``(n, 4)``."""
    base = R_HEAD + R_COL * column
    return np.ascontiguousarray(records[:, base + C_SUM : base + C_MAX + 1]).view(np.float64)


@dataclass(frozen=True)
class KeyedRows:
    """Rows of several keys: key k's are ``[offsets[k], offsets[k + 1])``, in time order
    (ties in arrival order). ``values``: one float64 array per value column, NaN where
    the value is null; ``rows``: where `gather_runs` found each (its index in the runs'
    concatenation), when it did."""

    ts: np.ndarray
    values: list[np.ndarray]
    offsets: np.ndarray
    rows: np.ndarray | None = None

    @staticmethod
    def empty(nkeys: int, ncols: int) -> KeyedRows:
        return KeyedRows(
            np.zeros(0, np.int64),
            [np.zeros(0, np.float64) for _ in range(ncols)],
            np.zeros(nkeys + 1, np.int64),
            np.zeros(0, np.int64),
        )


@dataclass(frozen=True)
class InitialRecords:
    """Where each work key of `featureflow.ops.resume_sessions` starts: row ``at[k]`` of
    ``records`` when >= 0, row ``-2 - at[k]`` of ``extra`` when <= -2, no session (-1)."""

    records: np.ndarray
    at: np.ndarray
    extra: np.ndarray

    def resolved(self) -> np.ndarray:
        """The initial record of every key (an empty one, rows 0, for -1)."""
        width = self.records.shape[1]
        out = np.zeros((len(self.at), width), np.int64)
        mine, theirs = self.at >= 0, self.at <= -2
        out[mine] = self.records[self.at[mine]]
        out[theirs] = self.extra[-2 - self.at[theirs]]
        return out


def pooled(shape: tuple[int, ...], dtype: type = np.int64) -> np.ndarray:
    """An uninitialised array in Arrow's memory pool, whose freed pages it keeps: a batch
    that allocates what the batch before it did pays no page faults for it (on a VM that
    hands freed pages back to its host, 0.5 s a GiB)."""
    itemsize = np.dtype(dtype).itemsize
    count = int(np.prod(shape))
    buffer = pa.allocate_buffer(max(count * itemsize, 1))
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape)


@dataclass(frozen=True)
class Spliced:
    """`featureflow.ops.splice_records`' result: the open and the closed records (each
    sorted by key), each open record's key and last row's time (contiguous), each key
    of the open records with its first open record's start, and the rows the open
    records hold."""

    open: np.ndarray
    closed: np.ndarray
    keys: np.ndarray
    lasts: np.ndarray
    first_keys: np.ndarray
    first_starts: np.ndarray
    rows: int


RunColumns = tuple[np.ndarray, np.ndarray, Sequence[pa.Array]]
"""One run: int64 keys and ts (numpy, sorted by key then ts) and its value columns."""


def float_values(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A value column as float64 numpy, NaN where null (what the kernels skip)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        values = pc.fill_null(values.cast(pa.float64()), np.nan)
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)


def reference_sort_run(
    keys: np.ndarray, ts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, distinct keys, offsets): rows sorted by key then ts, ties in input order."""
    order = np.lexsort((ts, keys))
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    offsets = np.append(starts[: len(keys)], len(keys)).astype(np.int64)
    return order.astype(np.int64), sorted_keys[offsets[:-1]].astype(np.int64), offsets


def reference_gather_runs(
    runs: Sequence[RunColumns], keys: np.ndarray, from_ns: np.ndarray
) -> KeyedRows:
    """The rows of ``keys`` with ts >= ``from_ns`` (per key) from ``runs``, each key's in
    ts order, ties to the earlier run."""
    ncols = len(runs[0][2]) if runs else 0
    firsts = np.cumsum([0, *(len(run[1]) for run in runs)])
    parts_key, parts_ts, parts_row = [], [], []
    parts_vals: list[list[np.ndarray]] = [[] for _ in range(ncols)]
    for at, (run_keys, run_ts, run_values) in enumerate(runs):
        lo = np.searchsorted(run_keys, keys, side="left")
        hi = np.searchsorted(run_keys, keys, side="right")
        for q in np.flatnonzero(hi > lo):
            a = lo[q] + np.searchsorted(run_ts[lo[q] : hi[q]], from_ns[q], side="left")
            if a >= hi[q]:
                continue
            picked = np.arange(a, hi[q])
            parts_key.append(np.full(len(picked), q, np.int64))
            parts_ts.append(run_ts[picked])
            parts_row.append(picked + firsts[at])
            for c in range(ncols):
                parts_vals[c].append(float_values(run_values[c].take(pa.array(picked))))
    if not parts_key:
        return KeyedRows.empty(len(keys), ncols)
    which = np.concatenate(parts_key)
    ts = np.concatenate(parts_ts)
    order = np.lexsort((ts, which))  # stable: ties keep run order
    offsets = np.searchsorted(which[order], np.arange(len(keys) + 1), side="left")
    return KeyedRows(
        ts[order],
        [np.concatenate(parts)[order] for parts in parts_vals],
        offsets.astype(np.int64),
        np.concatenate(parts_row)[order],
    )


def _two_sum(s: float, c: float, x: float) -> tuple[float, float]:
    t = s + x
    z = t - s
    return t, c + ((s - (t - z)) + (x - z))


def reference_resume_sessions(
    initial: InitialRecords, keys: np.ndarray, kept: KeyedRows, new: KeyedRows, gap: int,
    max_length: int, every: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """`featureflow.ops.resume_sessions`, row by row in Python (the kernel's additions)."""
    init = initial.resolved()
    ncols = len(new.values)
    latest = np.zeros((len(init), record_words(ncols)), np.int64)
    width = record_words(ncols)
    sessions: list[list[int]] = []
    checkpoints: list[list[int]] = []
    fl = np.zeros(1, np.float64)
    bits = fl.view(np.int64)

    def as_bits(x: float) -> int:
        fl[0] = x
        return int(bits[0])

    def as_float(w: int) -> float:
        bits[0] = w
        return float(fl[0])

    for k in range(len(init)):
        cur = [int(w) for w in init[k]]
        cur[R_KEY] = k
        rows = cur[R_ROWS]
        since = cur[R_AT] if rows > 0 else 0
        prev = cur[R_LAST]
        i, ie = int(kept.offsets[k]), int(kept.offsets[k + 1])
        j, je = int(new.offsets[k]), int(new.offsets[k + 1])
        while i < ie or j < je:
            from_new = i >= ie or (j < je and new.ts[j] < kept.ts[i])
            t = int(new.ts[j] if from_new else kept.ts[i])
            if cur[R_ROWS] > 0 and every > 0 and since >= every and t > prev:
                checkpoints.append([*cur[:R_AT], t, *cur[R_HEAD:]])
                since = 0
            past = t > cur[R_LAST] + gap or (max_length > 0 and t - cur[R_START] > max_length)
            if cur[R_ROWS] == 0 or past:
                if cur[R_ROWS] > 0:
                    cur[R_AT] = since
                    sessions.append(cur)
                cur = [k, t, t, 0, 0] + [0] * (R_COL * ncols)  # zero words: 0.0 bits
            cur[R_LAST] = t
            cur[R_ROWS] += 1
            for c in range(ncols):
                v = float(new.values[c][j] if from_new else kept.values[c][i])
                if v != v:  # NaN: a missing value
                    continue
                b = R_HEAD + R_COL * c
                if cur[b + C_COUNT] == 0:
                    lo = hi = v
                else:
                    lo = min(as_float(cur[b + C_MIN]), v)
                    hi = max(as_float(cur[b + C_MAX]), v)
                cur[b + C_MIN], cur[b + C_MAX] = as_bits(lo), as_bits(hi)
                cur[b + C_COUNT] += 1
                if v in (np.inf, -np.inf):
                    continue
                cur[b + C_FINITE] += 1
                s, sc = _two_sum(as_float(cur[b + C_SUM]), as_float(cur[b + C_SUM_C]), v)
                cur[b + C_SUM], cur[b + C_SUM_C] = as_bits(s), as_bits(sc)
            if from_new:
                j += 1
            else:
                i += 1
            since += 1
            prev = t
        if cur[R_ROWS] > 0:
            cur[R_AT] = since
            sessions.append(cur)
            latest[k] = cur
        latest[k, R_KEY] = keys[k]
    return (
        np.array(sessions, dtype=np.int64).reshape(-1, width),
        np.array(checkpoints, dtype=np.int64).reshape(-1, width),
        latest,
    )


def reference_record_segments(
    own: np.ndarray, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per wanted key (sorted, distinct), its records [lo, hi) by their keys ``own`` (sorted)."""
    return np.searchsorted(own, keys, "left"), np.searchsorted(own, keys, "right")


def reference_splice_records(
    old: np.ndarray, cut: np.ndarray, end: np.ndarray, new: np.ndarray, keys: np.ndarray,
    gap: int, max_length: int, watermark: int,
) -> Spliced:  # fmt: skip
    """`featureflow.ops.splice_records` with numpy."""
    size = len(old) + 1
    gone = np.bincount(cut, minlength=size) - np.bincount(end, minlength=size)
    kept = old[np.cumsum(gone)[:-1] == 0]
    added = new.copy()
    added[:, R_KEY] = keys[added[:, R_KEY]] if len(added) else added[:, R_KEY]
    both = np.concatenate([kept, added])
    merged = both[np.argsort(both[:, R_KEY], kind="stable")]
    done = (merged[:, R_LAST] + gap < watermark) | (merged[:, R_START] + max_length < watermark)
    opened = merged[~done]
    own = opened[:, R_KEY].copy()
    first = np.flatnonzero(np.r_[True, own[1:] != own[:-1]])[: len(own)]
    return Spliced(opened, merged[done], own, opened[:, R_LAST].copy(), own[first],
                   opened[first, R_START], int(opened[:, R_ROWS].sum()))  # fmt: skip
