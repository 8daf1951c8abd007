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

With frame states (`rolling/_resume`: the caller passes those an earlier call
wrote, and asks for new ones) a key's window whose state is valid resumes it
instead: only the rows that left its frame since (from the state's low end)
and the rows after its t_last are merged, so the cost is O(rows entering and
leaving + queries). A window that cannot resume (no state, a query at or
before t_last, its min or max leaving) takes the walk above. Every key and
window then writes its final frame's state, clipped to the call's `clip`.
"""

from featureflow_kernels.abi import Column, F64P, I64P, f64p, i64p
from featureflow_kernels.buffers import clear_validity, load_valid
from featureflow_kernels.agg.sliding import Sliding
from featureflow_kernels.rolling._frames import first_at_or_after, frame_lower
from featureflow_kernels.rolling._resume import (
    FRAME_WORDS,
    FrameState,
    clear_rows,
    resumable,
    resume_window,
    write_sliding_deques,
)


comptime QUERY_WORDS = 18
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
    var frames_in: Int
    var frames_out: Int
    var clip: Int
    var new_run: Int
    var frames_rows: I64P
    var frames_out_rows: I64P


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
        Int(d[unsafe_offset=12]),
        Int(d[unsafe_offset=13]),
        Int(d[unsafe_offset=14]),
        Int(d[unsafe_offset=15]),
        i64p(Int(d[unsafe_offset=16])),
        i64p(Int(d[unsafe_offset=17])),
    )


def query_scratch_bytes(capacity: Int) -> Int:
    """Scratch of `rolling_query`: merged ts and values of `capacity` rows."""
    return 16 * max(capacity, 1) + 64


struct QueryRuns(Movable):
    """The runs of a `rolling_query` call and a key's segment in each."""

    var ts: List[I64P]
    var values: List[Int]
    var valid: List[Int]
    var offset: List[Int]
    var dtype: Int
    var segs: I64P
    var lo: List[Int]
    var hi: List[Int]

    def __init__(out self, d: I64P, c: QueryCall):
        self.ts = List[I64P]()
        self.values = List[Int]()
        self.valid = List[Int]()
        self.offset = List[Int]()
        var at = QUERY_WORDS
        for _ in range(c.nruns):
            self.ts.append(i64p(Int(d[unsafe_offset=at])))
            self.values.append(Int(d[unsafe_offset=at + 1]))
            self.valid.append(Int(d[unsafe_offset=at + 2]))
            self.offset.append(Int(d[unsafe_offset=at + 3]))
            at += RUN_WORDS
        self.dtype = c.dtype
        self.segs = c.segs
        self.lo = List[Int](length=c.nruns, fill=0)
        self.hi = List[Int](length=c.nruns, fill=0)

    def first_ts(self, g: Int, r: Int) -> Int:
        """Key g's earliest ts in run r (int64 max: none)."""
        var s = 2 * (g * len(self.ts) + r)
        var a = Int(self.segs[unsafe_offset=s])
        if a >= Int(self.segs[unsafe_offset=s + 1]):
            return Int(Int64.MAX)
        return Int(self.ts[r][unsafe_offset=a])

    def last_ts(self, g: Int) -> Int:
        """Key g's latest ts over the runs (int64 min: none)."""
        var latest = Int(Int64.MIN)
        for r in range(len(self.ts)):
            var s = 2 * (g * len(self.ts) + r)
            var b = Int(self.segs[unsafe_offset=s + 1])
            if b > Int(self.segs[unsafe_offset=s]):
                latest = max(latest, Int(self.ts[r][unsafe_offset=b - 1]))
        return latest

    def merge(
        mut self, g: Int, first_t: Int, last_t: Int, mts: I64P, mv: F64P, at: Int, capacity: Int,
        r0: Int = 0, r1: Int = -1,
    ) raises -> Int:  # fmt: skip
        """Key g's rows with ts in [first_t, last_t] of runs [r0, r1) (r1 < 0: every run
        from r0), merged by ts (ties: the earlier run first, which is arrival order) into
        mts/mv from position `at`, values as float64 with NaN for null; returns the
        position after them."""
        var nruns = len(self.ts)
        var total = at
        for r in range(nruns):
            if r < r0 or (r1 >= 0 and r >= r1):
                self.lo[r] = 0
                self.hi[r] = 0
                continue
            var s = 2 * (g * nruns + r)
            var a = Int(self.segs[unsafe_offset=s])
            var b = Int(self.segs[unsafe_offset=s + 1])
            self.lo[r] = first_at_or_after(self.ts[r], a, b, first_t)
            self.hi[r] = (
                first_at_or_after(self.ts[r], self.lo[r], b, last_t + 1) if last_t
                < Int(Int64.MAX) else b
            )
            total += self.hi[r] - self.lo[r]
        if total > capacity:
            raise Error("ValueError: internal: rolling_query scratch too small")
        for m in range(at, total):
            var best = -1
            var best_t = 0
            for r in range(nruns):
                if self.lo[r] < self.hi[r]:
                    var t = Int(self.ts[r][unsafe_offset=self.lo[r]])
                    if best < 0 or t < best_t:
                        best = r
                        best_t = t
            var p = self.lo[best]
            mts[unsafe_offset=m] = Int64(best_t)
            mv[unsafe_offset=m] = load_valid(
                self.values[best], self.dtype, self.valid[best], self.offset[best], p
            )
            self.lo[best] = p + 1
        return total


def resume(
    mut runs: QueryRuns, c: QueryCall, g: Int, s: Sliding, mts: I64P, mv: F64P,
    q0: Int, q1: Int, width: Int, fin: Int, fin_at: Int, fout: Int, fout_at: Int,
) raises -> Bool:  # fmt: skip
    """Key g's window w from its frame state (`rolling/_resume`; words `fin_at`.. of
    `fin`): the outputs of its queries q0..q1 and, with `fout`, its new state (words
    `fout_at`..). False: the window is to walk."""
    var first_q = Int(c.qts[unsafe_offset=q0])
    var last_t = Int(c.qts[unsafe_offset=q1 - 1])
    if runs.last_ts(g) > last_t:
        return False  # rows after the last query: no state could hold them
    var t_last = FrameState.t_last(fin, fin_at)
    var low = FrameState.low(fin, fin_at)
    var st = FrameState.load(fin, fin_at)
    var deques = fin  # the state's deque entries, while they describe its rows
    var t0 = t_last
    var lower0 = low
    var first_new = runs.first_ts(g, c.new_run) if c.new_run >= 0 else Int(Int64.MAX)
    if first_q <= t_last or first_new <= t_last:
        # out of order: move the state back to t0, before every new row and query
        if c.new_run < 0:
            return False
        t0 = min(first_q, first_new) - 1
        deques = 0
        lower0 = frame_lower(t0, width, c.hop)
        if lower0 < FrameState.clip(fin, fin_at):
            return False  # rows before the state's clip may have left the runs
        if t0 < low:
            st = FrameState.empty()  # every row the state holds is after t0
        else:  # the old rows after t0 leave
            var n_after = runs.merge(g, t0 + 1, t_last, mts, mv, 0, c.capacity, 0, c.new_run)
            for p in range(n_after):
                if not st.remove(s, mv[unsafe_offset=p]):
                    return False
        # the rows of [lower0, t0] the state lacks enter: old ones before low, new ones
        var n_old = runs.merge(
            g, lower0, min(low, t0 + 1) - 1, mts, mv, 0, c.capacity, 0, c.new_run
        )
        var n_in = runs.merge(g, lower0, t0, mts, mv, n_old, c.capacity, c.new_run, c.new_run + 1)
        for p in range(n_in):
            st.add(s, mv[unsafe_offset=p])
    var keep_from = max(frame_lower(last_t, width, c.hop), c.clip)
    # the rows that leave by keep_from, then the rows after t0
    var n_leaving = runs.merge(g, lower0, min(keep_from, t0 + 1) - 1, mts, mv, 0, c.capacity)
    var n = runs.merge(g, t0 + 1, last_t, mts, mv, n_leaving, c.capacity)
    if not resume_window(
        s, mts, mv, n_leaving, n, st, c.qts, c.qout, q0, q1, width, c.hop, keep_from,
        deques, fin_at, fout, fout_at,
    ):  # fmt: skip
        return False
    if fout != 0:
        st.write(fout, fout_at, last_t, keep_from, c.clip)
    return True


def rolling_query(d: I64P, scratch: Int) raises -> Int:
    """Every window's aggregates at every query; returns the number of queries.

    Descriptor words: 0 runs R, 1 keys G, 2 queries Q, 3 windows, 4 hop (0:
    RANGE frames), 5 aggregates per window, 6 value dtype (all runs), 7 query
    times (int64 ns, Q, sorted by key then t), 8 output row per query (int64, Q),
    9 query offsets per key (int64, G + 1), 10 segments (int64, G * R * 2: key
    g's rows in run r are [segs[2(gR + r)], segs[2(gR + r) + 1])), 11 scratch
    capacity in rows (>= the rows a key's segments hold, over all runs), 12 frame
    states to resume (int64, rows * windows * `FRAME_WORDS`, row-major; 0: none),
    13 frame states to write (int64, G * windows * `FRAME_WORDS`, key-major; 0:
    none), 14 clip (ns: the states written hold no row before it), 15 the run
    holding the rows added since the states to resume were written (-1: none; the
    others held the rest), 16 each key's row of the states to resume (int64, G; -1:
    none; read only with word 12 set: the held states are read where they lie), 17
    each key's row of the states to write (int64, G; 0: key g's in row g). Word 17
    may make the states written the states read: a key's state is read whole before
    its row is written (its held row, or one no other key reads), and a key whose
    window keeps no state gets a cleared one there; then `RUN_WORDS` a run; then the
    widths (ns); then 4 words an output column (window-major). `scratch` addresses
    `query_scratch_bytes(capacity)` bytes.
    """
    var c = read_query_call(d)
    var runs = QueryRuns(d, c)
    var at = QUERY_WORDS + RUN_WORDS * c.nruns
    var widths = d.unsafe_offset(at)
    at += c.nwin
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
    var fin = c.frames_in
    var fout = c.frames_out
    var out_rows = Int(c.frames_out_rows) != 0
    var can_resume = c.frames_in != 0 and resumable(slides[0].cols)
    var walk = List[Bool](length=c.nwin, fill=True)
    for g in range(c.ngroups):
        var q0 = Int(c.qoff[unsafe_offset=g])
        var q1 = Int(c.qoff[unsafe_offset=g + 1])
        if q0 >= q1:  # none: every key of a plan has a query
            continue
        var first_q = Int(c.qts[unsafe_offset=q0])
        var last_t = Int(c.qts[unsafe_offset=q1 - 1])
        var orow = Int(c.frames_out_rows[unsafe_offset=g]) if out_rows else g
        var widest = -1
        for w in range(c.nwin):
            var width = Int(widths[unsafe_offset=w])
            var fat = (orow * c.nwin + w) * FRAME_WORDS
            walk[w] = True
            var held = Int(c.frames_rows[unsafe_offset=g]) if can_resume else -1
            var fin_at = (held * c.nwin + w) * FRAME_WORDS
            if held >= 0 and FrameState.is_valid(fin, fin_at):
                if resume(runs, c, g, slides[w], mts, mv, q0, q1, width, fin, fin_at, fout, fat):
                    walk[w] = False
                    continue
                clear_rows(slides[w].cols, c.qout, q0, q1)
            widest = max(widest, width)
        if widest < 0:
            continue
        var total = runs.merge(
            g, frame_lower(first_q, widest, c.hop), last_t, mts, mv, 0, c.capacity
        )
        for w in range(c.nwin):
            if not walk[w]:
                continue
            var width = Int(widths[unsafe_offset=w])
            # this window's frames start no earlier than its first query's
            var start = first_at_or_after(mts, 0, total, frame_lower(first_q, width, c.hop))
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
            if fout == 0:
                continue
            var fat = (orow * c.nwin + w) * FRAME_WORDS
            if runs.last_ts(g) <= last_t:
                var keep_from = max(frame_lower(last_t, width, c.hop), c.clip)
                slides[w].move_to(first_at_or_after(mts, lo, hi, keep_from), hi)
                FrameState.of_sliding(slides[w]).write(fout, fat, last_t, keep_from, c.clip)
                write_sliding_deques(slides[w], mts, fout, fat)
            else:  # rows after the last query: no state (the row may hold an old one)
                i64p(fout)[unsafe_offset=fat] = 0
    return c.nq
