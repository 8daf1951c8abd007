"""Rolling frames at query points over runs of rows sorted by (key, ts).

The stream job's state is a few runs (chunks) of events, each sorted by key,
then ts (ties in arrival order), the runs in arrival order. A query is a key
and a time t; its frame for window W is every row of that key with ts in
[lower, t], lower = t - W or the sawtooth floor (`frame_lower`): the frame
`rolling` gives a row of that key at time t (rows with ts == t included).
Output size = number of queries: nothing is computed for rows no query needs.

Per key holding queries (its queries sorted by t):
1. reach: in each run, binary-search the key's segment for the rows with
   ts in [frame_lower(first t, largest W), last t]: the only rows any of the
   key's frames can hold;
2. merge those ranges of the runs by ts (ties: the earlier run first, which
   is arrival order) into scratch, values as float64 with NaN for null;
3. per window, one `Sliding` walks the merged rows from the first one the
   window's first frame holds: both frame ends only move forward as t grows,
   so each row a frame of this window reaches enters and leaves once.

Cost: O(reached rows + queries) per window, plus two binary searches per run
and key. The sums only see finite values (`featureflow.ops._nonfinite`).
"""

from featureflow_kernels.abi import Column, F64P, I64P, f64p, i64p
from featureflow_kernels.buffers import clear_validity, load_valid
from featureflow_kernels.agg.sliding import Sliding
from featureflow_kernels.rolling._frames import first_at_or_after, frame_lower


comptime QUERY_WORDS = 12
"""Call words before the per-run words (see `rolling_query`)."""
comptime RUN_WORDS = 4
"""Words per run: ts addr, values addr, validity addr (0: none), validity bit offset."""


@fieldwise_init
struct QueryCall(Copyable, Movable):
    """The call words of a `rolling_query` descriptor."""

    var nruns: Int
    var ngroups: Int
    var nq: Int
    var nwin: Int
    var hop: Int
    var naggs: Int
    var dtype: Int
    var qts: I64P
    var qout: I64P
    var qoff: I64P
    var segs: I64P
    var capacity: Int


def read_query_call(d: I64P) -> QueryCall:
    return QueryCall(
        Int(d[unsafe_offset=0]),
        Int(d[unsafe_offset=1]),
        Int(d[unsafe_offset=2]),
        Int(d[unsafe_offset=3]),
        Int(d[unsafe_offset=4]),
        Int(d[unsafe_offset=5]),
        Int(d[unsafe_offset=6]),
        i64p(Int(d[unsafe_offset=7])),
        i64p(Int(d[unsafe_offset=8])),
        i64p(Int(d[unsafe_offset=9])),
        i64p(Int(d[unsafe_offset=10])),
        Int(d[unsafe_offset=11]),
    )


def query_scratch_bytes(capacity: Int) -> Int:
    """Scratch of `rolling_query`: merged ts and values of `capacity` rows."""
    return 16 * max(capacity, 1) + 64


def rolling_query(d: I64P, scratch: Int) raises -> Int:
    """Every window's aggregates at every query; returns the number of queries.

    Descriptor words: 0 runs R, 1 keys G, 2 queries Q, 3 windows, 4 hop (0:
    RANGE frames), 5 aggregates per window, 6 value dtype (all runs), 7 query
    times (int64 ns, Q, sorted by key then t), 8 output row per query (int64, Q),
    9 query offsets per key (int64, G + 1), 10 segments (int64, G * R * 2: key
    g's rows in run r are [segs[2(gR + r)], segs[2(gR + r) + 1])), 11 scratch
    capacity in rows (>= the rows a key's segments hold, over all runs); then
    `RUN_WORDS` a run; then the widths (ns); then 4 words an output column
    (window-major). `scratch` addresses `query_scratch_bytes(capacity)` bytes.
    """
    var c = read_query_call(d)
    var at = QUERY_WORDS
    var run_ts = List[I64P]()
    var run_v = List[Int]()
    var run_valid = List[Int]()
    var run_off = List[Int]()
    for _ in range(c.nruns):
        run_ts.append(i64p(Int(d[unsafe_offset=at])))
        run_v.append(Int(d[unsafe_offset=at + 1]))
        run_valid.append(Int(d[unsafe_offset=at + 2]))
        run_off.append(Int(d[unsafe_offset=at + 3]))
        at += RUN_WORDS
    var widths = d.unsafe_offset(at)
    at += c.nwin
    var widest = 0
    for w in range(c.nwin):
        widest = max(widest, Int(widths[unsafe_offset=w]))
    var base = (scratch + 63) // 64 * 64
    var mts = i64p(base)
    var mv = f64p(base + 8 * max(c.capacity, 1))
    var slides = List[Sliding]()
    for w in range(c.nwin):
        var cols = List[Column]()
        for k in range(c.naggs):
            var b = at + 4 * (w * c.naggs + k)
            cols.append(
                Column(
                    Int(d[unsafe_offset=b]),
                    Int(d[unsafe_offset=b + 1]),
                    Int(d[unsafe_offset=b + 2]),
                    Int(d[unsafe_offset=b + 3]),
                )
            )
        clear_validity(cols, c.nq)
        slides.append(Sliding(mv, c.capacity, cols^))
    var lo_r = List[Int](length=c.nruns, fill=0)
    var hi_r = List[Int](length=c.nruns, fill=0)
    for g in range(c.ngroups):
        var q0 = Int(c.qoff[unsafe_offset=g])
        var q1 = Int(c.qoff[unsafe_offset=g + 1])
        if q0 >= q1:
            continue
        var reach = frame_lower(Int(c.qts[unsafe_offset=q0]), widest, c.hop)
        var last_t = Int(c.qts[unsafe_offset=q1 - 1])
        var total = 0
        for r in range(c.nruns):
            var s = 2 * (g * c.nruns + r)
            var a = Int(c.segs[unsafe_offset=s])
            var b = Int(c.segs[unsafe_offset=s + 1])
            var ts = run_ts[r]
            lo_r[r] = first_at_or_after(ts, a, b, reach)
            hi_r[r] = (
                first_at_or_after(ts, lo_r[r], b, last_t + 1) if last_t < Int(Int64.MAX) else b
            )
            total += hi_r[r] - lo_r[r]
        if total > c.capacity:
            raise Error("ValueError: internal: rolling_query scratch too small")
        # k-way merge by ts; ties go to the earlier run (arrival order)
        for m in range(total):
            var best = -1
            var best_t = 0
            for r in range(c.nruns):
                if lo_r[r] < hi_r[r]:
                    var t = Int(run_ts[r][unsafe_offset=lo_r[r]])
                    if best < 0 or t < best_t:
                        best = r
                        best_t = t
            var p = lo_r[best]
            mts[unsafe_offset=m] = Int64(best_t)
            mv[unsafe_offset=m] = load_valid(
                run_v[best], c.dtype, run_valid[best], run_off[best], p
            )
            lo_r[best] = p + 1
        for w in range(c.nwin):
            var width = Int(widths[unsafe_offset=w])
            # this window's frames start no earlier than its first query's
            var start = first_at_or_after(
                mts, 0, total, frame_lower(Int(c.qts[unsafe_offset=q0]), width, c.hop)
            )
            slides[w].reset(start)
            var lo = start
            var hi = start
            for q in range(q0, q1):
                var t = Int(c.qts[unsafe_offset=q])
                var lower = frame_lower(t, width, c.hop)
                while hi < total and Int(mts[unsafe_offset=hi]) <= t:
                    hi += 1
                while lo < hi and Int(mts[unsafe_offset=lo]) < lower:
                    lo += 1
                slides[w].move_to(lo, hi)
                slides[w].emit(Int(c.qout[unsafe_offset=q]))
    return c.nq
