"""Which kernel path a call takes and over how many threads.

``rolling_stream_mode`` (asked of the library) picks the rolling path: input in
ts order streams — keyed count/sum/mean/min/max in input order when a window's
frames span few rows (`in_order_ring_rows`), else through key buckets in four
phases; other keyed aggregates through per-key slots, unkeyed in place — with
results written in input order; unsorted input (or count_distinct) is grouped
by key first (prepare, parts, finish). The thresholds below are module
attributes so that tests can force every path.
"""

from __future__ import annotations

import os

import numpy as np

from featureflow.ops._inputs import Series

PARALLEL_MIN_ROWS = 200_000
"""Below this many rows one thread does a rolling call (threads cost ~0.1 ms)."""

WALK_ROWS = 16
"""Bucketed path: a window's frames are recomputed by walking back each key's rows
where a frame holds at most about this many rows (estimated per bucket; a bucket
whose walks take over twice as many steps a row falls back), else maintained by
expiry and min/max deques (`bucket_windows` in rolling/_bucketed.mojo). 0: never walk."""

INORDER_MAX_SPAN = 1 << 19
"""The in-order keyed path takes a window when its ring (`in_order_ring_rows`) needs
at most this many rows (16 MiB): beyond that the ring leaves the caches and the
bucketed path, whose passes stay in cache, is faster (measured: 10 min windows of
the 10 M-event benchmark 1.8x faster in order, 1 h about even)."""

SESSIONS_GROUPED = {"std", "var", "count_distinct"}
"""Session aggregates that only the grouping path computes."""


def parts(n: int) -> int:
    """How many threads share a rolling call: the cores, for large inputs."""
    return min(2, os.cpu_count() or 1) if n >= PARALLEL_MIN_ROWS else 1


def in_order_span_limit(n: int, nparts: int) -> int:
    """The most rows a window's frames may span on the in-order keyed path: beyond
    it they leave the caches or (several parts) the second part's warm-up is a large
    share of its rows."""
    return min(INORDER_MAX_SPAN, n // 4) if nparts > 1 else INORDER_MAX_SPAN


def in_order_ring_rows(span: int, limit: int) -> int:
    """Ring rows (a power of two >= the window's span) of the in-order keyed path, or 0
    when the span exceeds `limit` and the window takes the bucketed path."""
    if span > limit:
        return 0
    return 1 << max(span - 1, 1).bit_length()


def sessions_may_stream(s: Series, gaps: np.ndarray | None, aggs: list[str]) -> bool:
    """Keyed sessions with a fixed gap and no grouped-only aggregate: the kernel is
    first offered the (smaller) scratch of its in-order pass."""
    return s.codes is not None and gaps is None and not SESSIONS_GROUPED & set(aggs)
