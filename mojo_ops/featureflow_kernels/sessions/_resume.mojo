"""Sessions resumed from kept states: the stream job's session view, batch after batch.

The stream job keeps each entity's open sessions as records (`SessionRecord`:
start, last row's time, rows, and per value column the count, compensated sum,
min and max of its values) instead of summing their events again every
micro-batch. `resume_sessions` continues them: per work key, from an initial
record (a session's state over the key's rows before some time X, or none),
it takes the key's rows at or after X in time order — the kept rows the
caller read back from its state (`state` rows) merged with the batch's new
rows (`new` rows; on equal times the kept ones first, as they arrived first) —
and applies Spark's session rule with the length cap (`_generic.joins`): a
row past the session's end (last + gap) or more than the max length after its
start opens the next session. Every session from the initial one on is
written out, in key then start order.

The aggregates are `Running`'s (agg/contract.mojo) split the way
`featureflow.ops._nonfinite` calls the session kernel when values hold ±inf:
count, min and max over the non-NaN values (infinities included), the
compensated sum over the finite ones, with its own count for the mean. The
additions are the ones `sessions` makes, in the same order (rows in time
order, ties in arrival order), so a resumed session's words are the bits a
pass over all its rows gives.

Checkpoints: before the first row of a new time (strictly later than the row
before it) once `every` rows went by since the last checkpoint, the state of
the open session is written out as a checkpoint at that time X: the session
over exactly the key's rows with time < X. A later call may resume from it
when every new row of the key is at or after X (an out-of-order row then
costs the rows after the checkpoint, not the whole session).
"""

from std.utils.numerics import isinf, isnan
from featureflow_kernels.abi import F64P, I64P, f64p, i64p
from featureflow_kernels.agg.sums import two_sum


comptime R_KEY = 0
"""Record word: the key (the caller's tables) or the work key's index (outputs)."""
comptime R_START = 1
"""Record word: the session's first row's time (ns)."""
comptime R_LAST = 2
"""Record word: the session's last row's time (ns) before the record's point."""
comptime R_ROWS = 3
"""Record word: the session's rows (null and NaN values included); 0: no session."""
comptime R_AT = 4
"""Record word: a checkpoint's time X (its rows are those with time < X); a
session's rows since its key's last checkpoint."""
comptime R_HEAD = 5
"""Words before the per-column words."""
comptime R_COL = 6
"""Words a value column: count (non-NaN), finite count, sum, sum compensation,
min, max (the last four float64)."""
comptime C_COUNT = 0
comptime C_FINITE = 1
comptime C_SUM = 2
comptime C_SUM_C = 3
comptime C_MIN = 4
comptime C_MAX = 5

comptime RESUME_WORDS = 19
"""Call words before the per-column words (see `resume_sessions`)."""


@always_inline
def record_words(ncols: Int) -> Int:
    """int64 words of one record with `ncols` value columns."""
    return R_HEAD + R_COL * ncols


@fieldwise_init
struct SessionRecord(TrivialRegisterPassable):
    """A record's words at `w` (int64) / `f` (the same memory as float64)."""

    var w: I64P
    var f: F64P
    var ncols: Int

    @always_inline
    @staticmethod
    def at(base: I64P, row: Int, ncols: Int) -> Self:
        var p = base.unsafe_offset(row * record_words(ncols))
        return Self(p, F64P(unsafe_from_address=Int(p)), ncols)

    @always_inline
    def word(self, i: Int) -> Int64:
        return self.w[unsafe_offset=i]

    @always_inline
    def set_word(self, i: Int, v: Int64):
        self.w[unsafe_offset=i] = v

    @always_inline
    def copy_to(self, other: Self):
        for i in range(record_words(self.ncols)):
            other.w[unsafe_offset=i] = self.w[unsafe_offset=i]

    def open(self, t: Int64):
        """An empty session starting at `t` (no rows yet)."""
        self.w[unsafe_offset=R_START] = t
        self.w[unsafe_offset=R_LAST] = t
        self.w[unsafe_offset=R_ROWS] = 0
        for c in range(self.ncols):
            var b = R_HEAD + R_COL * c
            self.w[unsafe_offset=b + C_COUNT] = 0
            self.w[unsafe_offset=b + C_FINITE] = 0
            self.f[unsafe_offset=b + C_SUM] = 0.0
            self.f[unsafe_offset=b + C_SUM_C] = 0.0
            self.f[unsafe_offset=b + C_MIN] = 0.0
            self.f[unsafe_offset=b + C_MAX] = 0.0

    @always_inline
    def add(self, c: Int, v: Float64):
        """Column c takes value v (NaN: skipped; ±inf: counted, min/max, not summed)."""
        if isnan(v):
            return
        var b = R_HEAD + R_COL * c
        var n = self.w[unsafe_offset=b + C_COUNT]
        if n == 0:
            self.f[unsafe_offset=b + C_MIN] = v
            self.f[unsafe_offset=b + C_MAX] = v
        else:
            self.f[unsafe_offset=b + C_MIN] = min(self.f[unsafe_offset=b + C_MIN], v)
            self.f[unsafe_offset=b + C_MAX] = max(self.f[unsafe_offset=b + C_MAX], v)
        self.w[unsafe_offset=b + C_COUNT] = n + 1
        if isinf(v):
            return
        self.w[unsafe_offset=b + C_FINITE] += 1
        var sm = self.f[unsafe_offset=b + C_SUM]
        var sc = self.f[unsafe_offset=b + C_SUM_C]
        two_sum(sm, sc, v)
        self.f[unsafe_offset=b + C_SUM] = sm
        self.f[unsafe_offset=b + C_SUM_C] = sc


def resume_sessions(d: I64P) -> Int:
    """Descriptor words: 0 work keys K, 1 value columns C, 2 gap (ns), 3 max length
    (ns; 0: none), 4 checkpoint spacing `every` (rows; 0: no checkpoints), 5 records
    addr and 6 index addr (int64, K) of the initial records: key k starts from record
    `index[k]` when it is >= 0, from record -2 - `index[k]` of the extra records
    (7: their addr) when it is <= -2, from none when -1; 8 kept rows' ts addr
    (int64), 9 their offsets addr (K + 1: key k's rows are [off[k], off[k+1])),
    10 new rows' ts addr, 11 their offsets addr (K + 1), 12 sessions out addr,
    13 its capacity (records), 14 checkpoints out addr, 15 its capacity, 16 latest
    out addr (K records: each key's last session, zero rows when it has none), 17
    keys addr (int64, K: the latest records' key word), 18 counts out addr (2 words:
    sessions, checkpoints written); then 2 words a column: the kept rows' values
    (float64, NaN for null), the new rows' values. Each key's kept rows and new rows
    are sorted by time (ties in arrival order). The sessions and checkpoints carry
    the work key's index as key word. Returns the sessions written, or -1 when an
    output's capacity is too small (nothing is then valid)."""
    var nkeys = Int(d[unsafe_offset=0])
    var ncols = Int(d[unsafe_offset=1])
    var gap = d[unsafe_offset=2]
    var max_len = d[unsafe_offset=3]
    var every = d[unsafe_offset=4]
    var init = i64p(Int(d[unsafe_offset=5]))
    var init_at = i64p(Int(d[unsafe_offset=6]))
    var extra = i64p(Int(d[unsafe_offset=7]))
    var kts = i64p(Int(d[unsafe_offset=8]))
    var koff = i64p(Int(d[unsafe_offset=9]))
    var nts = i64p(Int(d[unsafe_offset=10]))
    var noff = i64p(Int(d[unsafe_offset=11]))
    var out = i64p(Int(d[unsafe_offset=12]))
    var out_cap = Int(d[unsafe_offset=13])
    var cps = i64p(Int(d[unsafe_offset=14]))
    var cps_cap = Int(d[unsafe_offset=15])
    var latest = i64p(Int(d[unsafe_offset=16]))
    var keys = i64p(Int(d[unsafe_offset=17]))
    var counts = i64p(Int(d[unsafe_offset=18]))
    var kvals = List[F64P]()
    var nvals = List[F64P]()
    for c in range(ncols):
        kvals.append(f64p(Int(d[unsafe_offset=RESUME_WORDS + 2 * c])))
        nvals.append(f64p(Int(d[unsafe_offset=RESUME_WORDS + 2 * c + 1])))
    var m = 0
    var nc = 0
    for k in range(nkeys):
        var i = Int(koff[unsafe_offset=k])
        var ie = Int(koff[unsafe_offset=k + 1])
        var j = Int(noff[unsafe_offset=k])
        var je = Int(noff[unsafe_offset=k + 1])
        if m >= out_cap:
            return -1
        # the open session lives in its output slot until the next one opens
        var s = SessionRecord.at(out, m, ncols)
        var at = Int(init_at[unsafe_offset=k])
        if at >= 0:
            SessionRecord.at(init, at, ncols).copy_to(s)
        elif at <= -2:
            SessionRecord.at(extra, -2 - at, ncols).copy_to(s)
        else:
            s.set_word(R_ROWS, 0)
        s.set_word(R_KEY, Int64(k))
        var since = s.word(R_AT) if s.word(R_ROWS) > 0 else 0
        var prev = s.word(R_LAST)
        while i < ie or j < je:
            var from_new = i >= ie or (j < je and nts[unsafe_offset=j] < kts[unsafe_offset=i])
            var t = nts[unsafe_offset=j] if from_new else kts[unsafe_offset=i]
            var rows = s.word(R_ROWS)
            if rows > 0 and every > 0 and since >= every and t > prev:
                if nc >= cps_cap:
                    return -1
                var cp = SessionRecord.at(cps, nc, ncols)
                s.copy_to(cp)
                cp.set_word(R_AT, t)
                nc += 1
                since = 0
            var past_end = t > s.word(R_LAST) + gap
            var too_long = max_len > 0 and t - s.word(R_START) > max_len
            if rows == 0 or past_end or too_long:
                if rows > 0:
                    s.set_word(R_AT, since)
                    m += 1
                    if m >= out_cap:
                        return -1
                    s = SessionRecord.at(out, m, ncols)
                    s.set_word(R_KEY, Int64(k))
                s.open(t)
            s.set_word(R_LAST, t)
            s.set_word(R_ROWS, s.word(R_ROWS) + 1)
            for c in range(ncols):
                var v = nvals[c][unsafe_offset=j] if from_new else kvals[c][unsafe_offset=i]
                s.add(c, v)
            if from_new:
                j += 1
            else:
                i += 1
            since += 1
            prev = t
        var last = SessionRecord.at(latest, k, ncols)
        if s.word(R_ROWS) > 0:
            s.set_word(R_AT, since)
            s.copy_to(last)
            m += 1
        else:
            last.open(0)
        last.set_word(R_KEY, keys[unsafe_offset=k])
    counts[unsafe_offset=0] = Int64(m)
    counts[unsafe_offset=1] = Int64(nc)
    return m
