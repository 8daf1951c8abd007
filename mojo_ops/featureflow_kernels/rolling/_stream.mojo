"""Rolling over input in ts order, one streaming pass per window
(`stream_window`; `stream_dispatch` sends unkeyed calls here).

Input already in ts order (as a stream delivers it) is read in place. Rows
enter their key's state in input order and leave it in input order too: a
second pointer `lo` trails the newest row by the window, and rows leave when
ts < lower (the frame's low end, non-decreasing in t). So the inputs are read
twice sequentially, every output is written sequentially, and only the
per-key state (64 bytes a key, `StreamKey`, +64 for var/std, `SqKey`) is
touched at random: the contract's deletable count, sum and shifted moments
(agg/deletable.mojo).
min/max are monotonic deques and `first` a FIFO of non-null rows, linked
through int32 arrays indexed by row (relative to the pass's first row).
A run of rows with an equal ts enters before any of it is emitted (RANGE
CURRENT ROW includes peers). A part [r0, r1) (r0 a multiple of 64, so
validity words are never shared) starts at the first row in the frame of
row r0 and emits from r0 on; rows of a run continuing past r1 enter only.
"""

from std.utils.numerics import isnan
from std.math import sqrt
from featureflow_kernels.abi import A_STD, A_VAR, Column, F64P, I32P, I64P, f64p, i64p
from featureflow_kernels.buffers import put, store_bits
from featureflow_kernels.agg.deletable import (
    MomentsState,
    SumState,
    moments_add,
    moments_remove,
    moments_variance,
    sum_add,
    sum_clear,
    sum_emit,
    sum_remove_or_clear,
)
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.rolling._frames import first_at_or_after, frame_lower


comptime REC = 8  # int64 words per key in the main state record (`StreamKey`)
comptime SQ = 8  # float64 words per key for var/std (`SqKey`)


@fieldwise_init
struct StreamKey(SumState):
    """A key's `REC` int64 words at word `r` (a multiple of REC; 0 unkeyed) of
    the state array `st`, also read as float64 (`f`) and int32 pairs (`w`): the
    contract's deletable count and sum (`SumState`), then the ends of the min
    and max deques and of the first FIFO (link indexes: rows relative to the
    pass's first row; -1: none)."""

    var st: I64P
    var f: F64P
    var w: I32P
    var r: Int

    comptime COUNT = 0  # int64
    comptime SUM = 1  # float64
    comptime SUM_C = 2
    comptime LINKS = 3  # int64 words 3..5: the int32 pairs below
    # int32 words
    comptime MIN_FRONT = 6
    comptime MIN_BACK = 7
    comptime MAX_FRONT = 8
    comptime MAX_BACK = 9
    comptime FIRST = 10
    comptime LAST = 11

    @always_inline
    def count(self) -> Int64:
        return self.st[unsafe_offset=self.r + Self.COUNT]

    @always_inline
    def set_count(mut self, n: Int64):
        self.st[unsafe_offset=self.r + Self.COUNT] = n

    @always_inline
    def sum(self) -> Float64:
        return self.f[unsafe_offset=self.r + Self.SUM]

    @always_inline
    def set_sum(mut self, v: Float64):
        self.f[unsafe_offset=self.r + Self.SUM] = v

    @always_inline
    def sum_c(self) -> Float64:
        return self.f[unsafe_offset=self.r + Self.SUM_C]

    @always_inline
    def set_sum_c(mut self, v: Float64):
        self.f[unsafe_offset=self.r + Self.SUM_C] = v

    @always_inline
    def link(self, k: Int) -> Int32:
        """int32 word k (MIN_FRONT, ..., LAST): a link index."""
        return self.w[unsafe_offset=2 * self.r + k]

    @always_inline
    def set_link(self, k: Int, i: Int32):
        self.w[unsafe_offset=2 * self.r + k] = i

    @always_inline
    def clear_links(self):
        """Every deque and FIFO empty (-1), as three int64 stores."""
        self.st[unsafe_offset=self.r + Self.LINKS] = -1
        self.st[unsafe_offset=self.r + Self.LINKS + 1] = -1
        self.st[unsafe_offset=self.r + Self.LINKS + 2] = -1


@fieldwise_init
struct StreamKeys(TrivialRegisterPassable):
    """The key states of a pass (`REC` int64 words a key from `st`) and their
    var/std words (`SQ` float64 words a key from `sq`)."""

    var st: I64P
    var f: F64P
    var w: I32P
    var sq: F64P

    @always_inline
    def key(self, c: Int) -> StreamKey:
        return StreamKey(self.st, self.f, self.w, c * REC)

    @always_inline
    def moments(self, c: Int) -> SqKey:
        return SqKey(self.sq, c * SQ)


@fieldwise_init
struct SqKey(MomentsState):
    """A key's `SQ` float64 words for var/std at `k` (a multiple of SQ) of `sq`
    (`_stream`, `_region`): the contract's shifted moments (`MomentsState`)."""

    var sq: F64P
    var k: Int

    comptime S1 = 0
    comptime S1_C = 1
    comptime S2 = 2
    comptime S2_C = 3
    comptime SHIFT = 4
    comptime SHIFT_SET = 5  # 1.0 once the shift is set, else 0.0
    # words 6, 7: unused (0)

    @always_inline
    def s1(self) -> Float64:
        return self.sq[unsafe_offset=self.k + Self.S1]

    @always_inline
    def s1_c(self) -> Float64:
        return self.sq[unsafe_offset=self.k + Self.S1_C]

    @always_inline
    def s2(self) -> Float64:
        return self.sq[unsafe_offset=self.k + Self.S2]

    @always_inline
    def s2_c(self) -> Float64:
        return self.sq[unsafe_offset=self.k + Self.S2_C]

    @always_inline
    def set_sums(mut self, s1: Float64, s1_c: Float64, s2: Float64, s2_c: Float64):
        self.sq[unsafe_offset=self.k + Self.S1] = s1
        self.sq[unsafe_offset=self.k + Self.S1_C] = s1_c
        self.sq[unsafe_offset=self.k + Self.S2] = s2
        self.sq[unsafe_offset=self.k + Self.S2_C] = s2_c

    @always_inline
    def shift_set(self) -> Bool:
        return self.sq[unsafe_offset=self.k + Self.SHIFT_SET] != 0.0

    @always_inline
    def shift(self) -> Float64:
        return self.sq[unsafe_offset=self.k + Self.SHIFT]

    @always_inline
    def set_shift(mut self, v: Float64):
        self.sq[unsafe_offset=self.k + Self.SHIFT] = v
        self.sq[unsafe_offset=self.k + Self.SHIFT_SET] = 1.0

    @always_inline
    def clear(mut self):
        """All `SQ` words 0: the sums exactly 0, the shift unset."""
        for j in range(SQ):
            self.sq[unsafe_offset=self.k + j] = 0.0


def stream_scratch_bytes(n: Int, ngroups: Int) -> Int:
    """Scratch each part of `rolling_stream_part` needs:
    128 bytes of state a key, 24 bytes a row (keyed: slots and deques; unkeyed:
    links)."""
    return 8 * (REC + SQ) * ngroups + 24 * n + 64 * 4


def stream_window[
    KEYED: Bool, SUM: Bool, MINMAX: Bool, EXTRA: Bool
](
    ts: I64P,
    sv: F64P,
    codes: I32P,
    g: Int,
    n: Int,
    r0: Int,
    r1: Int,
    width: Int,
    hop: Int,
    o: Outs,
    cols: List[Column],
    c0: Int,
    naggs: Int,
    scratch: Int,
):
    """One window's aggregates for rows [r0, r1) of ts-ordered input (see above)."""
    var need_min = o.min != 0
    var need_max = o.max != 0
    var need_sq = o.std != 0 or o.var_ != 0
    var need_first = o.first != 0
    var need_last = o.last != 0
    var w0 = first_at_or_after(ts, 0, r0, frame_lower(Int(ts[unsafe_offset=r0]), width, hop))
    var end = r1
    while end < n and ts[unsafe_offset=end] == ts[unsafe_offset=r1 - 1]:
        end += 1
    var cap = end - w0
    var sq = f64p(scratch + 8 * REC * g)
    var keys = StreamKeys(i64p(scratch), f64p(scratch), I32P(unsafe_from_address=scratch), sq)
    var minprev = I32P(unsafe_from_address=scratch + 8 * (REC + SQ) * g)
    var minnext = minprev.unsafe_offset(cap)
    var maxprev = minprev.unsafe_offset(2 * cap)
    var maxnext = minprev.unsafe_offset(3 * cap)
    var nextrow = minprev.unsafe_offset(4 * cap)
    var base = sv.unsafe_offset(w0)  # values by link index
    for k in range(g):
        var ks = keys.key(k)
        sum_clear(ks)
        ks.clear_links()
    comptime if EXTRA:
        if need_sq:
            for k in range(g * SQ):
                sq[unsafe_offset=k] = 0.0
    var nvalid = List[Int]()
    var nvalid_two = List[Bool]()
    for c in range(c0, c0 + naggs):
        if cols[c].valid != 0:
            nvalid.append(cols[c].valid)
            nvalid_two.append(cols[c].agg == A_STD or cols[c].agg == A_VAR)
    var vbytes = (n + 7) // 8
    var bits1: UInt64 = 0
    var bits2: UInt64 = 0
    var lo = w0
    var p = w0
    while p < end:
        var t = ts[unsafe_offset=p]
        var e = p + 1
        while e < end and ts[unsafe_offset=e] == t:
            e += 1
        # the run [p, e) enters
        for q in range(p, e):
            var v = sv[unsafe_offset=q]
            if isnan(v):
                continue
            var c = 0
            comptime if KEYED:
                c = Int(codes[unsafe_offset=q])
            var ks = keys.key(c)
            var qi = Int32(q - w0)
            sum_add[SUM](ks, v)
            comptime if MINMAX:
                if need_min:
                    var b = ks.link(StreamKey.MIN_BACK)
                    while b >= 0 and base[unsafe_offset=Int(b)] >= v:
                        b = minprev[unsafe_offset=Int(b)]
                    minprev[unsafe_offset=Int(qi)] = b
                    if b < 0:
                        ks.set_link(StreamKey.MIN_FRONT, qi)
                    else:
                        minnext[unsafe_offset=Int(b)] = qi
                    ks.set_link(StreamKey.MIN_BACK, qi)
                if need_max:
                    var b = ks.link(StreamKey.MAX_BACK)
                    while b >= 0 and base[unsafe_offset=Int(b)] <= v:
                        b = maxprev[unsafe_offset=Int(b)]
                    maxprev[unsafe_offset=Int(qi)] = b
                    if b < 0:
                        ks.set_link(StreamKey.MAX_FRONT, qi)
                    else:
                        maxnext[unsafe_offset=Int(b)] = qi
                    ks.set_link(StreamKey.MAX_BACK, qi)
            comptime if EXTRA:
                if need_sq:
                    var m = keys.moments(c)
                    moments_add(m, v)
                if need_first:
                    var last = ks.link(StreamKey.LAST)
                    if last < 0:
                        ks.set_link(StreamKey.FIRST, qi)
                    else:
                        nextrow[unsafe_offset=Int(last)] = qi
                ks.set_link(StreamKey.LAST, qi)
        # rows older than the frame leave, oldest first
        var lower = Int64(frame_lower(Int(t), width, hop))
        while ts[unsafe_offset=lo] < lower:
            var x = sv[unsafe_offset=lo]
            var li = Int32(lo - w0)
            lo += 1
            if isnan(x):
                continue
            var c = 0
            comptime if KEYED:
                c = Int(codes[unsafe_offset=lo - 1])
            var ks = keys.key(c)
            if sum_remove_or_clear[SUM](ks, x):
                # an empty frame: restart exactly instead of carrying noise
                ks.clear_links()
                comptime if EXTRA:
                    if need_sq:
                        var m = keys.moments(c)
                        m.clear()
                continue
            comptime if MINMAX:
                # a deque's back is the key's newest row: never the leaving one here
                # (the new front's back link is cut so pops stop at the front)
                if need_min and ks.link(StreamKey.MIN_FRONT) == li:
                    var f = minnext[unsafe_offset=Int(li)]
                    ks.set_link(StreamKey.MIN_FRONT, f)
                    minprev[unsafe_offset=Int(f)] = -1
                if need_max and ks.link(StreamKey.MAX_FRONT) == li:
                    var f = maxnext[unsafe_offset=Int(li)]
                    ks.set_link(StreamKey.MAX_FRONT, f)
                    maxprev[unsafe_offset=Int(f)] = -1
            comptime if EXTRA:
                if need_sq:
                    var m = keys.moments(c)
                    moments_remove(m, x)
                if need_first:  # the leaving row is the FIFO's front
                    ks.set_link(StreamKey.FIRST, nextrow[unsafe_offset=Int(li)])
        # the frame's results for the run's rows of this part
        for q in range(max(p, r0), min(e, r1)):
            var c = 0
            comptime if KEYED:
                c = Int(codes[unsafe_offset=q])
            var ks = keys.key(c)
            var count = Int(ks.count())
            var has = count > 0
            sum_emit[SUM](ks, count, o, q)
            comptime if MINMAX:
                if need_min:
                    var rmin = 0.0
                    if has:
                        rmin = base[unsafe_offset=Int(ks.link(StreamKey.MIN_FRONT))]
                    put(o.min, o.min_dt, q, rmin)
                if need_max:
                    var rmax = 0.0
                    if has:
                        rmax = base[unsafe_offset=Int(ks.link(StreamKey.MAX_FRONT))]
                    put(o.max, o.max_dt, q, rmax)
            comptime if EXTRA:
                if need_sq:
                    var rvar = 0.0
                    if count > 1:
                        rvar = moments_variance(keys.moments(c), count)
                    if o.var_ != 0:
                        f64p(o.var_)[unsafe_offset=q] = rvar
                    if o.std != 0:
                        f64p(o.std)[unsafe_offset=q] = sqrt(rvar)
                if need_first:
                    var rfirst = 0.0
                    if has:
                        rfirst = base[unsafe_offset=Int(ks.link(StreamKey.FIRST))]
                    put(o.first, o.first_dt, q, rfirst)
                if need_last:
                    var rlast = 0.0
                    if has:
                        rlast = base[unsafe_offset=Int(ks.link(StreamKey.LAST))]
                    put(o.last, o.last_dt, q, rlast)
            var bit = UInt64(1) << UInt64(q & 63)
            if has:
                bits1 |= bit
            if count > 1:
                bits2 |= bit
            if (q & 63) == 63 or q == r1 - 1:
                for j in range(len(nvalid)):
                    store_bits(nvalid[j], q >> 6, bits2 if nvalid_two[j] else bits1, vbytes)
                bits1 = 0
                bits2 = 0
        p = e
