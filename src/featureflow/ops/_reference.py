"""The numpy reference backend: fallback when the Mojo kernels are missing, and oracle.

It follows the same plan as the kernels, written for clarity rather than
speed: rows are put in (key, ts) order with a stable sort (ties keep input
order), every function turns each key's rows into frames ``[lo, hi)`` of
sorted positions, and `frame_aggregates` computes every aggregate of every
frame with prefix sums (count, sum, mean, shifted sums for var/std), sparse
tables (min/max), next/previous valid pointers (first/last) and a sliding
counter (count_distinct). The prefix sums run over all keys, so they must only
see finite values: `featureflow.ops._nonfinite` takes infinities out of the
values for sum/mean/std/var and sets those frames' results itself.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import pyarrow as pa

from featureflow.ops._inputs import Series
from featureflow.ops._tables import OutputColumn, WindowBounds

if TYPE_CHECKING:
    from featureflow.ops._byte_rows import ByteRows
    from featureflow.ops._flat_json import FlatField, FlatRead
    from featureflow.ops._query import Plan, Run
    from featureflow.ops._resume import InitialRecords, KeyedRows, RunColumns, Spliced


@dataclass(frozen=True)
class Sorted:
    """Rows in (key, ts) order: ``perm[p]`` is the input row at sorted position p."""

    perm: np.ndarray
    ts: np.ndarray
    values: np.ndarray  # float64, NaN for null
    starts: np.ndarray  # key g owns sorted positions [starts[g], starts[g + 1])


def sort_rows(s: Series) -> Sorted:
    ts = s.ts.to_numpy(zero_copy_only=False)
    vals = s.values.cast("float64").fill_null(np.nan).to_numpy(zero_copy_only=False)
    if s.codes is None:
        perm = np.argsort(ts, kind="stable")
        starts = np.array([0, s.n], dtype=np.int64)
    else:
        perm = np.lexsort((ts, s.codes))  # stable: ties keep input order
        counts = np.bincount(s.codes, minlength=s.ngroups)
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Sorted(perm, ts[perm], vals[perm], starts)


def _range_reduce(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, op: np.ufunc) -> np.ndarray:
    """op-reduction of x[lo:hi] for every frame (hi > lo) with a sparse table."""
    out = np.empty(len(lo), dtype=x.dtype)
    if len(lo) == 0:
        return out
    length = hi - lo
    level = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
    table = x
    for k in range(int(level.max()) + 1):
        if k:
            half = 1 << (k - 1)
            table = op(table[:-half], table[half:])
        sel = level == k
        if sel.any():
            out[sel] = op(table[lo[sel]], table[hi[sel] - (1 << k)])
    return out


def _sliding_distinct(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Distinct non-NaN values of each frame; frames must be monotone (lo, hi nondecreasing)."""
    counts: Counter[float] = Counter()
    out = np.zeros(len(lo), dtype=np.int64)
    cur_lo = cur_hi = 0
    for f in range(len(lo)):
        while cur_hi < hi[f]:
            v = values[cur_hi]
            if v == v:
                counts[v + 0.0] += 1
            cur_hi += 1
        while cur_lo < lo[f]:
            v = values[cur_lo]
            if v == v:
                counts[v + 0.0] -= 1
                if not counts[v + 0.0]:
                    del counts[v + 0.0]
            cur_lo += 1
        out[f] = len(counts)
    return out


def _next_valid(valid: np.ndarray) -> np.ndarray:
    """For p in 0..n: the first valid position >= p, or n (one extra entry for p = n)."""
    n = len(valid)
    idx = np.where(valid, np.arange(n), n)
    return np.concatenate([np.minimum.accumulate(idx[::-1])[::-1], [n]])


def frame_aggregates(
    srt: Sorted, lo: np.ndarray, hi: np.ndarray, aggs: list[str]
) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Every agg of every frame ``[lo, hi)`` of sorted positions: (values, valid mask)."""
    v = srt.values
    valid = ~np.isnan(v)
    zero = np.zeros(1)
    count = np.concatenate([[0], np.cumsum(valid)])
    cnt = count[hi] - count[lo]
    out: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    clean = np.where(valid, v, 0.0)
    if {"sum", "mean"} & set(aggs):
        psum = np.concatenate([zero, np.cumsum(clean)])
        total = psum[hi] - psum[lo]
        out["sum"] = (total, cnt > 0)
        out["mean"] = (total / np.maximum(cnt, 1), cnt > 0)
    if {"std", "var"} & set(aggs):
        # shift each key's values by its first valid value: no cancellation
        # when values share a large offset
        seg = np.repeat(np.arange(len(srt.starts) - 1), np.diff(srt.starts))
        nxt = _next_valid(valid)
        first = nxt[np.minimum(srt.starts[:-1], len(v))]  # first valid at/after each key start
        shift = np.where(first < len(v), np.concatenate([v, zero])[first], 0.0)
        d = np.where(valid, v - shift[seg], 0.0)
        s1 = np.concatenate([zero, np.cumsum(d)])
        s2 = np.concatenate([zero, np.cumsum(d * d)])
        a1 = s1[hi] - s1[lo]
        a2 = s2[hi] - s2[lo]
        n = np.maximum(cnt, 2).astype(np.float64)
        m2 = a2 - a1 * a1 / n
        # differences of large prefix sums lose ~eps * |prefix| absolutely: frames
        # whose result could be off by more than ~1e-10 relative are recomputed
        # directly (two-pass); typically there are none or a few
        eps = np.finfo(np.float64).eps
        s1_mag = np.maximum(np.abs(s1[hi]), np.abs(s1[lo]))
        s2_mag = np.maximum(np.abs(s2[hi]), np.abs(s2[lo]))
        err = 4 * eps * (s2_mag + 2 * np.abs(a1) * s1_mag / n)
        for i in np.flatnonzero((cnt > 1) & (err > 1e-10 * np.abs(m2))):
            w = v[lo[i] : hi[i]]
            w = w[~np.isnan(w)]
            m2[i] = np.sum((w - w.mean()) ** 2)
        var = np.maximum(m2 / (n - 1.0), 0.0)
        out["var"] = (var, cnt > 1)
        out["std"] = (np.sqrt(var), cnt > 1)
    if "min" in aggs:
        out["min"] = (_range_reduce(np.where(valid, v, np.inf), lo, hi, np.minimum), cnt > 0)
    if "max" in aggs:
        out["max"] = (_range_reduce(np.where(valid, v, -np.inf), lo, hi, np.maximum), cnt > 0)
    idx = np.arange(len(v))
    if "first" in aggs:
        pos = _next_valid(valid)[lo]
        has = pos < hi
        out["first"] = (np.where(has, np.concatenate([v, zero])[pos], 0.0), has)
    if "last" in aggs:
        prv = np.maximum.accumulate(np.where(valid, idx, -1)) if len(v) else idx
        pos = prv[np.maximum(hi - 1, 0)] if len(v) else hi
        has = (pos >= lo) & (hi > lo)
        out["last"] = (np.where(has, v[np.maximum(pos, 0)] if len(v) else 0.0, 0.0), has)
    out["count"] = (cnt, None)
    if "count_distinct" in aggs:
        out["count_distinct"] = (_sliding_distinct(v, lo, hi), None)
    return out


def _write(
    columns: list[OutputColumn],
    results: dict[str, tuple[np.ndarray, np.ndarray | None]],
    rows: np.ndarray | None,
) -> None:
    """Write results for frames into columns, scattering frame f to row rows[f] if given."""
    for c in columns:
        vals, valid = results[c.agg]
        vals = np.where(valid, vals, 0) if valid is not None else vals
        vals = vals.astype(c.type.to_pandas_dtype())
        if rows is not None:
            scattered = np.empty_like(vals)
            scattered[rows] = vals
            vals = scattered
            if valid is not None:
                mask = np.empty_like(valid)
                mask[rows] = valid
                valid = mask
        c.write(vals, valid)


def rolling_frames(srt: Sorted, window: int, hop: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per sorted row at time t: lo = first row of its key with ts >= lower, hi = past
    the last row of its key with ts == t, where lower = t - W or, with a hop, the
    sawtooth floor((t - W) / hop) * hop."""
    n = len(srt.ts)
    lo = np.empty(n, dtype=np.int64)
    hi = np.empty(n, dtype=np.int64)
    lower = srt.ts - window
    if hop:
        lower = (lower // hop) * hop
    for a, b in zip(srt.starts[:-1], srt.starts[1:], strict=True):
        seg = srt.ts[a:b]
        lo[a:b] = a + np.searchsorted(seg, lower[a:b], side="left")
        hi[a:b] = a + np.searchsorted(seg, seg, side="right")
    return lo, hi


class ReferenceBackend:
    """Pure numpy implementation of the backend interface."""

    name: Final = "numpy"

    def rolling_at(
        self,
        runs: list[Run],
        plan: Plan,
        windows: list[int],
        hop: int | None,
        aggs: list[str],
        columns: list[OutputColumn],
        frames_in: tuple[np.ndarray, np.ndarray] | None = None,
        frames_out: tuple[np.ndarray, np.ndarray | None] | None = None,
        clip_ns: int = 0,
        added_run: int | None = None,
    ) -> bool:
        """Every frame from its rows: the reference keeps no frame states (False)."""
        from featureflow.ops._query import reference_rolling_at

        reference_rolling_at(runs, plan, windows, hop, aggs, columns)
        return False

    def crc64_rows(self, data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        from featureflow.ops._checksums import crc64_rows

        return crc64_rows(data, offsets)

    def stamp_micros(
        self, stamps: pa.StringArray, max_millis: int
    ) -> tuple[np.ndarray, np.ndarray]:
        from featureflow.ops._stamps import stamp_micros

        return stamp_micros(stamps, max_millis)

    def gather_chunks(self, chunks: list[pa.Array], rows: np.ndarray) -> pa.Array | None:
        """No chunk gather here: the caller's (Arrow's concat and take) runs."""
        return None

    def ascii_decimal(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from featureflow.ops._digits import ascii_decimal

        return ascii_decimal(values)

    def varint(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from featureflow.ops._digits import varint

        return varint(values)

    def join_rows(self, parts: list[ByteRows], n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """No row join here: the caller's (Arrow's ``binary_join_element_wise``) runs."""
        return None

    def hash_payloads(
        self, names: list[bytes], views_of: list[int], values: list[list[ByteRows]],
        rows: np.ndarray, version: bytes,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:  # fmt: skip
        """No payload pass here: the caller's (``redis_dump``'s numpy build) runs."""
        return None

    def read_flat_json(self, values: pa.BinaryArray, fields: list[FlatField]) -> FlatRead | None:
        """No vectorised JSON pass in numpy: the caller's per-record parser reads all."""
        return None

    def sort_run(
        self, keys: np.ndarray, ts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        from featureflow.ops._resume import reference_sort_run

        return reference_sort_run(keys, ts)

    def gather_runs(
        self, runs: list[RunColumns], keys: np.ndarray, from_ns: np.ndarray,
        capacity: int | None = None,
    ) -> KeyedRows:  # fmt: skip
        from featureflow.ops._resume import reference_gather_runs

        return reference_gather_runs(runs, keys, from_ns)

    def resume_sessions(
        self, init: InitialRecords, keys: np.ndarray, kept: KeyedRows, new: KeyedRows,
        gap: int, max_length: int, every: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        from featureflow.ops._resume import reference_resume_sessions

        return reference_resume_sessions(init, keys, kept, new, gap, max_length, every)

    def record_segments(
        self, own: np.ndarray, keys: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        from featureflow.ops._resume import reference_record_segments

        return reference_record_segments(own, keys)

    def splice_records(
        self, old: np.ndarray, cut: np.ndarray, end: np.ndarray, new: np.ndarray,
        keys: np.ndarray, gap: int, max_length: int, watermark: int,
    ) -> Spliced:  # fmt: skip
        from featureflow.ops._resume import reference_splice_records

        return reference_splice_records(old, cut, end, new, keys, gap, max_length, watermark)

    def run_segments(self, run_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Each key's ``[left, right)`` in the sorted ``run_keys``: two binary searches."""
        out = np.empty((len(keys), 2), dtype=np.int64)
        out[:, 0] = np.searchsorted(run_keys, keys, side="left")
        out[:, 1] = np.searchsorted(run_keys, keys, side="right")
        return out

    def merge_runs(self, runs: list[Run], cut_ns: int) -> np.ndarray:
        """Indices into the runs' concatenation in (key, ts) order, stable, without
        the rows before ``cut_ns``."""
        if not runs:
            return np.zeros(0, dtype=np.int64)
        keys = np.concatenate([run.keys for run in runs])
        ts = np.concatenate([run.ts for run in runs])
        order = np.lexsort((ts, keys))
        return order[ts[order] >= cut_ns].astype(np.int64)

    def rolling(
        self,
        s: Series,
        windows: list[int],
        hop: int | None,
        aggs: list[str],
        columns: list[OutputColumn],
    ) -> None:
        if s.n == 0:
            return
        srt = sort_rows(s)
        for w, window in enumerate(windows):
            lo, hi = rolling_frames(srt, window, hop)
            results = frame_aggregates(srt, lo, hi, aggs)
            _write(columns[w * len(aggs) : (w + 1) * len(aggs)], results, srt.perm)

    def hopping(
        self,
        s: Series,
        size: int,
        step: int,
        aggs: list[str],
        count_only: bool,
        bounds: WindowBounds,
        columns: list[OutputColumn],
    ) -> int:
        if s.n == 0:
            return 0
        srt = sort_rows(s)
        k_first = (srt.ts - size) // step + 1  # windows [k*step, k*step + size) holding t
        k_last = srt.ts // step
        counts = k_last - k_first + 1
        within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        ks = np.repeat(k_first, counts) + within
        groups = np.repeat(np.repeat(np.arange(len(srt.starts) - 1), np.diff(srt.starts)), counts)
        pairs = np.unique(np.stack([groups, ks]), axis=1)  # sorted by (key, start)
        if count_only:
            return pairs.shape[1]
        codes, starts = pairs[0], pairs[1] * step
        lo = np.empty(len(starts), dtype=np.int64)
        hi = np.empty(len(starts), dtype=np.int64)
        for g in np.unique(codes):
            a, b = srt.starts[g], srt.starts[g + 1]
            sel = codes == g
            lo[sel] = a + np.searchsorted(srt.ts[a:b], starts[sel], side="left")
            hi[sel] = a + np.searchsorted(srt.ts[a:b], starts[sel] + size, side="left")
        return _fill(bounds, columns, srt, aggs, lo, hi, codes, starts, starts + size)

    def sessions(
        self,
        s: Series,
        gap: int,
        gaps: np.ndarray | None,
        max_length: int | None,
        aggs: list[str],
        bounds: WindowBounds,
        columns: list[OutputColumn],
    ) -> int:
        if s.n == 0:
            return 0
        srt = sort_rows(s)
        reach = srt.ts + (gap if gaps is None else gaps[srt.perm])  # ts + gap per row
        if max_length and gaps is not None:
            new = _session_openers(srt, reach, max_length)
        else:
            new = _gap_openers(srt, reach)
            if max_length:
                _split_long(srt.ts, new, max_length)
        lo = np.flatnonzero(new)
        hi = np.append(lo[1:], s.n)
        seg = np.repeat(np.arange(len(srt.starts) - 1), np.diff(srt.starts))
        ends = np.maximum.reduceat(reach, lo)
        return _fill(bounds, columns, srt, aggs, lo, hi, seg[lo], srt.ts[lo], ends)


def _gap_openers(srt: Sorted, reach: np.ndarray) -> np.ndarray:
    """Which sorted rows open a session without a max length (bool per row)."""
    new = np.zeros(len(reach), dtype=bool)
    for a, b in zip(srt.starts[:-1], srt.starts[1:], strict=True):
        if a == b:
            continue
        # a row opens a session when it is past every earlier row's reach:
        # earlier sessions all ended before the current one started
        before = np.maximum.accumulate(reach[a:b])
        new[a] = True
        new[a + 1 : b] = srt.ts[a + 1 : b] > before[:-1]
    return new


def _split_long(ts: np.ndarray, new: np.ndarray, max_length: int) -> None:
    """Fixed gap: cut each run of rows ``new`` marks (sorted ts, one key each) into
    sessions no longer than ``max_length`` ns: from a session's first row at t0, the
    first row with ts - t0 > max_length opens the next one. A fixed gap's reach
    only grows along a run, so the gap splits are the same with the cap."""
    lo = np.flatnonzero(new)
    hi = np.append(lo[1:], len(ts))
    for a, b in zip(lo, hi, strict=True):
        if ts[b - 1] - ts[a] <= max_length:
            continue  # most runs: one session
        p = int(a)
        while p < b:
            new[p] = True
            p += int(np.searchsorted(ts[p:b], ts[p] + max_length, side="right"))


def _session_openers(srt: Sorted, reach: np.ndarray, max_length: int) -> np.ndarray:
    """Per-row gaps with a max length, row by row: a row opens a session unless
    ts <= the open session's end (max reach of its rows) and ts - start <= max_length."""
    new = np.zeros(len(reach), dtype=bool)
    ts, rs = srt.ts.tolist(), reach.tolist()
    for a, b in zip(srt.starts[:-1].tolist(), srt.starts[1:].tolist(), strict=True):
        start = end = 0
        for p in range(a, b):
            if p == a or ts[p] > end or ts[p] - start > max_length:
                new[p] = True
                start, end = ts[p], rs[p]
            else:
                end = max(end, rs[p])
    return new


def _fill(
    bounds: WindowBounds,
    columns: list[OutputColumn],
    srt: Sorted,
    aggs: list[str],
    lo: np.ndarray,
    hi: np.ndarray,
    codes: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
) -> int:
    """Write frames' aggregates and bounds to consecutive output rows."""
    m = len(lo)
    bounds.codes[:m] = codes
    bounds.starts[:m] = starts
    bounds.ends[:m] = ends
    _write(columns, frame_aggregates(srt, lo, hi, aggs), None)
    return m
