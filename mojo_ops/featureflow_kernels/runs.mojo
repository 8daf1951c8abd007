"""Runs sorted by (key, ts), the stream job's state: a batch's rows sorted into
one (`sort_run`), runs merged (`merge_runs`, the state's compaction), some
keys' rows read back from all runs in ts order (`gather_runs`), and where some
keys' rows lie in a run (`run_segments`).

Each run is sorted by key, then ts, ties in arrival order; the runs are in
arrival order. `merge_runs` writes the merged order as indices into the runs'
concatenation (run r's row i is `sum(n of runs before r) + i`), dropping rows
with ts < the cut, so the caller gathers every column once (Arrow `take`).
Ties on (key, ts) go to the earlier run: the merge is stable, and merging
adjacent runs keeps arrival order. One pass, O(rows * runs).
"""

from featureflow_kernels.abi import I64P, f64p, i64p
from featureflow_kernels.buffers import load_valid
from featureflow_kernels.order import merge_sort_by_ts


comptime MERGE_WORDS = 3
"""Call words before the per-run words: runs R, cut (ns), output addr."""


def merge_runs(d: I64P) -> Int:
    """Descriptor words: 0 runs R, 1 cut (int64 ns: rows with ts < cut are
    dropped), 2 output addr (int64, room for every row); then 3 words a run:
    rows, keys addr (int64), ts addr (int64). Returns the rows written."""
    var nruns = Int(d[unsafe_offset=0])
    var cut = Int(d[unsafe_offset=1])
    var out = i64p(Int(d[unsafe_offset=2]))
    var n = List[Int]()
    var keys = List[I64P]()
    var ts = List[I64P]()
    var first = List[Int]()
    var pos = List[Int]()
    var total = 0
    for r in range(nruns):
        var b = MERGE_WORDS + 3 * r
        n.append(Int(d[unsafe_offset=b]))
        keys.append(i64p(Int(d[unsafe_offset=b + 1])))
        ts.append(i64p(Int(d[unsafe_offset=b + 2])))
        first.append(total)
        pos.append(0)
        total += n[r]
    var m = 0
    while True:
        var best = -1
        var bk = 0
        var bt = 0
        for r in range(nruns):
            var i = pos[r]
            if i < n[r]:
                var k = Int(keys[r][unsafe_offset=i])
                var t = Int(ts[r][unsafe_offset=i])
                if best < 0 or k < bk or (k == bk and t < bt):
                    best = r
                    bk = k
                    bt = t
        if best < 0:
            break
        if bt >= cut:
            out[unsafe_offset=m] = Int64(first[best] + pos[best])
            m += 1
        pos[best] += 1
    return m


def sort_run(d: I64P) -> Int:
    """A batch's rows as a run: their order by key, then ts, ties in input order.

    Descriptor words: 0 rows n, 1 keys addr (int64), 2 ts addr (int64), 3 the
    lowest key, 4 span (highest - lowest + 1), 5 table addr (int64, span + 1
    slots: scratch), 6 order out addr (int64, n: the input row at each sorted
    position), 7 scratch addr (int64, n), 8 distinct keys out addr (int64, up to
    min(n, span)), 9 offsets out addr (int64, distinct keys + 1: key g's rows are
    sorted positions [off[g], off[g + 1])). A counting sort through a direct
    table over the key range, so keys come out in value order with no compare,
    then a stable merge sort by ts of each key's rows that are not in ts order
    already (the stream's rows mostly are). O(n + span). Returns the number of
    distinct keys."""
    var n = Int(d[unsafe_offset=0])
    var keys = i64p(Int(d[unsafe_offset=1]))
    var ts = i64p(Int(d[unsafe_offset=2]))
    var lowest = d[unsafe_offset=3]
    var span = Int(d[unsafe_offset=4])
    var table = i64p(Int(d[unsafe_offset=5]))
    var order = i64p(Int(d[unsafe_offset=6]))
    var scratch = i64p(Int(d[unsafe_offset=7]))
    var out_keys = i64p(Int(d[unsafe_offset=8]))
    var offsets = i64p(Int(d[unsafe_offset=9]))
    for j in range(span + 1):
        table[unsafe_offset=j] = 0
    for i in range(n):
        table[unsafe_offset=Int(keys[unsafe_offset=i] - lowest) + 1] += 1
    var g = 0
    var at = 0
    for j in range(span):
        var c = Int(table[unsafe_offset=j + 1])
        table[unsafe_offset=j] = Int64(at)  # the key's cursor
        if c > 0:
            out_keys[unsafe_offset=g] = lowest + Int64(j)
            offsets[unsafe_offset=g] = Int64(at)
            g += 1
            at += c
    offsets[unsafe_offset=g] = Int64(at)
    for i in range(n):
        var j = Int(keys[unsafe_offset=i] - lowest)
        var p = Int(table[unsafe_offset=j])
        order[unsafe_offset=p] = Int64(i)
        table[unsafe_offset=j] = Int64(p + 1)
    for k in range(g):
        var a = Int(offsets[unsafe_offset=k])
        var b = Int(offsets[unsafe_offset=k + 1])
        for p in range(a + 1, b):
            if (
                ts[unsafe_offset=Int(order[unsafe_offset=p])]
                < ts[unsafe_offset=Int(order[unsafe_offset=p - 1])]
            ):
                _sort_nearly_sorted(order, scratch, a, b, ts)
                break
    return g


def _sort_nearly_sorted(order: I64P, scratch: I64P, a: Int, b: Int, ts: I64P):
    """Stable sort by ts of order[a:b] when few rows are out of place (a stream's
    late events): the rows below the running maximum are taken aside (their order
    kept), sorted (merge sort), and merged back; the others are in order already.
    On equal times the rows left in place come first: they came earlier. O(n + d
    log d) for d rows taken aside."""
    var kept = a  # compacts the in-order rows to the front of [a, b)
    var aside = a  # scratch[a:aside] holds the rows taken aside
    var high = ts[unsafe_offset=Int(order[unsafe_offset=a])]
    for p in range(a, b):
        var row = order[unsafe_offset=p]
        var t = ts[unsafe_offset=Int(row)]
        if t < high:
            scratch[unsafe_offset=aside] = row
            aside += 1
        else:
            high = t
            order[unsafe_offset=kept] = row
            kept += 1
    # sort the rows aside within scratch[a:aside], with order[kept:b] (free) as room
    merge_sort_by_ts(scratch, order.unsafe_offset(kept - a), a, aside, ts)
    # merge from the back: order[a:kept] and scratch[a:aside] into order[a:b]
    var i = kept - 1
    var j = aside - 1
    var out = b - 1
    while j >= a:
        if (
            i >= a
            and ts[unsafe_offset=Int(order[unsafe_offset=i])]
            > ts[unsafe_offset=Int(scratch[unsafe_offset=j])]
        ):
            order[unsafe_offset=out] = order[unsafe_offset=i]
            i -= 1
        else:
            order[unsafe_offset=out] = scratch[unsafe_offset=j]
            j -= 1
        out -= 1


comptime GATHER_WORDS = 10
"""Call words of `gather_runs` before the per-run words."""


@always_inline
def lower_bound_from(keys: I64P, n: Int, at: Int, key: Int64) -> Int:
    """The first position >= `at` whose key is >= `key` (keys sorted): galloping
    from `at`, then a binary search, so walking a run's keys in order costs
    the log of each step, not of the run."""
    if at >= n or keys[unsafe_offset=at] >= key:
        return at
    var lo = at  # keys[lo] < key
    var step = 1
    var hi = at + 1
    while hi < n and keys[unsafe_offset=hi] < key:
        lo = hi
        step *= 2
        hi = at + step
    if hi > n:
        hi = n
    while hi - lo > 1:  # keys[lo] < key <= keys[hi] (or hi == n)
        var mid = (lo + hi) // 2
        if keys[unsafe_offset=mid] < key:
            lo = mid
        else:
            hi = mid
    return hi


@always_inline
def upper_bound_from(keys: I64P, n: Int, at: Int, key: Int64) -> Int:
    """The first position >= `at` whose key is > `key` (keys sorted): for integers,
    the first whose key is >= key + 1."""
    if key == Int64.MAX:
        return max(at, n)
    return lower_bound_from(keys, n, at, key + 1)


def run_segments(d: I64P) -> Int:
    """Each asked key's rows in one run: descriptor words 0 the run's rows n, 1 its
    keys addr (int64, sorted), 2 asked keys G, 3 their addr (int64), 4 output addr
    (int64, 2 G words): per asked key, the start and end [left, right) of its rows
    (left == right: none, at the position it would take). Asked keys in ascending
    order are found in one pass, each galloping from the previous key's end (the
    log of the step, not of the run, and the run's keys read in order); a key
    below its predecessor starts again from the run's start, so any order is
    answered correctly. Returns G."""
    var n = Int(d[unsafe_offset=0])
    var keys = i64p(Int(d[unsafe_offset=1]))
    var asked = Int(d[unsafe_offset=2])
    var wanted = i64p(Int(d[unsafe_offset=3]))
    var out = i64p(Int(d[unsafe_offset=4]))
    var at = 0  # every row before it has a key below the next asked key (ascending)
    for i in range(asked):
        var key = wanted[unsafe_offset=i]
        if i > 0 and key == wanted[unsafe_offset=i - 1]:
            out[unsafe_offset=2 * i] = out[unsafe_offset=2 * i - 2]
            out[unsafe_offset=2 * i + 1] = out[unsafe_offset=2 * i - 1]
            continue
        if i > 0 and key < wanted[unsafe_offset=i - 1]:
            at = 0
        var left = lower_bound_from(keys, n, at, key)
        var right = upper_bound_from(keys, n, left, key)
        out[unsafe_offset=2 * i] = Int64(left)
        out[unsafe_offset=2 * i + 1] = Int64(right)
        at = right
    return asked


@always_inline
def first_at_or_after(ts: I64P, lo: Int, hi: Int, t: Int64) -> Int:
    """The first position in [lo, hi) whose ts is >= t (ts sorted there), or hi."""
    var a = lo
    var b = hi
    while a < b:
        var mid = (a + b) // 2
        if ts[unsafe_offset=mid] < t:
            a = mid + 1
        else:
            b = mid
    return a


def gather_runs(d: I64P) -> Int:
    """The rows of some keys from runs sorted by (key, ts), each key's merged in
    ts order (ties to the earlier run, i.e. in arrival order): what a session
    view reads back of its state for the keys it recomputes.

    Descriptor words: 0 runs R, 1 value columns C, 2 keys K, 3 keys addr (int64,
    sorted, distinct), 4 from addr (int64 ns a key: only its rows with ts >= it), 5
    offsets out addr (int64, K + 1), 6 ts out addr (int64), 7 rows out addr (int64:
    the row's index in the runs' concatenation), 8 scratch addr (int64, twice the
    most rows one key gathers: it sorts one key's rows at a time), 9 the rows the
    outputs hold; then 3 words a run: rows, keys addr (int64), ts addr (int64); then
    4 words a (run, column), run-major: values addr, dtype code, validity addr (0:
    none), validity offset (bits); then C words: each column's float64 out addr (NaN
    for null). Returns the rows written, or -1 when the keys have more rows than the
    outputs hold (nothing is then valid)."""
    var nruns = Int(d[unsafe_offset=0])
    var ncols = Int(d[unsafe_offset=1])
    var nkeys = Int(d[unsafe_offset=2])
    var qkeys = i64p(Int(d[unsafe_offset=3]))
    var qfrom = i64p(Int(d[unsafe_offset=4]))
    var offsets = i64p(Int(d[unsafe_offset=5]))
    var out_ts = i64p(Int(d[unsafe_offset=6]))
    var out_rows = i64p(Int(d[unsafe_offset=7]))
    var scratch = i64p(Int(d[unsafe_offset=8]))
    var capacity = Int(d[unsafe_offset=9])
    var n = List[Int]()
    var keys = List[I64P]()
    var ts = List[I64P]()
    var first = List[Int]()
    var cursor = List[Int]()
    var total = 0
    for r in range(nruns):
        var b = GATHER_WORDS + 3 * r
        n.append(Int(d[unsafe_offset=b]))
        keys.append(i64p(Int(d[unsafe_offset=b + 1])))
        ts.append(i64p(Int(d[unsafe_offset=b + 2])))
        first.append(total)
        cursor.append(0)
        total += n[r]
    var vbase = GATHER_WORDS + 3 * nruns
    var obase = vbase + 4 * nruns * ncols
    var m = 0
    for q in range(nkeys):
        var key = qkeys[unsafe_offset=q]
        var t0 = qfrom[unsafe_offset=q]
        offsets[unsafe_offset=q] = Int64(m)
        var start = m
        var sorted = True
        for r in range(nruns):
            var lo = lower_bound_from(keys[r], n[r], cursor[r], key)
            var hi = lower_bound_from(keys[r], n[r], lo, key + 1)
            cursor[r] = hi
            var a = first_at_or_after(ts[r], lo, hi, t0)
            if m + hi - a > capacity:
                return -1
            for i in range(a, hi):
                var t = ts[r][unsafe_offset=i]
                if m > start and out_ts[unsafe_offset=m - 1] > t:
                    sorted = False
                out_ts[unsafe_offset=m] = t
                out_rows[unsafe_offset=m] = Int64(first[r] + i)
                for c in range(ncols):
                    var w = vbase + 4 * (r * ncols + c)
                    var v = load_valid(
                        Int(d[unsafe_offset=w]),
                        Int(d[unsafe_offset=w + 1]),
                        Int(d[unsafe_offset=w + 2]),
                        Int(d[unsafe_offset=w + 3]),
                        i,
                    )
                    f64p(Int(d[unsafe_offset=obase + c]))[unsafe_offset=m] = v
                m += 1
        if not sorted:
            _sort_gathered(start, m, out_ts, out_rows, scratch, d, obase, ncols)
    offsets[unsafe_offset=nkeys] = Int64(m)
    return m


def _sort_gathered(
    a: Int, b: Int, out_ts: I64P, out_rows: I64P, scratch: I64P, d: I64P, obase: Int, ncols: Int
):
    """Put the gathered rows [a, b) in ts order, stably (ties keep run order)."""
    var perm = scratch
    var aside = scratch.unsafe_offset(b - a)
    for p in range(a, b):
        perm[unsafe_offset=p - a] = Int64(p)
    merge_sort_by_ts(perm, aside, 0, b - a, out_ts)
    _permute_i64(out_ts, perm, a, b, aside)
    _permute_i64(out_rows, perm, a, b, aside)
    for c in range(ncols):
        var col = i64p(Int(d[unsafe_offset=obase + c]))  # float64 bits, moved as words
        _permute_i64(col, perm, a, b, aside)


def _permute_i64(col: I64P, perm: I64P, a: Int, b: Int, aside: I64P):
    """col[a + j] = old col[perm[j]] for j < b - a, through `aside`."""
    for j in range(b - a):
        aside[unsafe_offset=j] = col[unsafe_offset=Int(perm[unsafe_offset=j])]
    for j in range(b - a):
        col[unsafe_offset=a + j] = aside[unsafe_offset=j]
