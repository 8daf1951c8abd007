"""Keyed input in ts order, count/sum/mean/min/max: rows in input order.

One pass per window reads the inputs and writes every output row in order;
only the per-key state (64 bytes a key) and a ring of the recent rows are
touched at random. As ts is sorted, a row is in the frame of row i exactly
when its index is >= g(i), the first row with ts >= the frame's low end (a
second pointer over ts): the ring records no ts. A ring record (32 bytes,
row & mask) holds the row's float64 value and int32 links: the key's next
non-null row (rows leave in order along it) and the min and max monotonic
deques' previous/next elements, so a key's frame needs no slots of its own.
A key is trimmed lazily when one of its rows arrives; every row it may then
read is at or after g(g(i)) (see `inorder_span`), so a ring of at least
i + run - g(g(i)) rows (power of two) never hands out a record still needed.
A part [r0, r1) warms up from g(r0) and emits from r0 on.
"""

from std.utils.numerics import isnan
from std.sys.intrinsics import prefetch, PrefetchOptions
from featureflow_kernels.abi import (
    F64P,
    HEADER,
    I32P,
    I64P,
    Inputs,
    f64p,
    read_columns,
    read_inputs,
)
from featureflow_kernels.buffers import load_valid, put, store_bits
from featureflow_kernels.agg.deletable import (
    SumState,
    Sums,
    sum_add,
    sum_clear,
    sum_emit,
    sum_remove,
    sum_start,
)
from featureflow_kernels.agg.outputs import Outs, outs_for
from featureflow_kernels.rolling._frames import first_at_or_after, frame_lower, part_rows
from featureflow_kernels.rolling._region import PF


comptime SPAN_BLOCK = 1024  # rows per block of `inorder_span`'s bound
comptime IREC = 8  # int32 words per ring record (`Ring`)
comptime ISTATE = 16  # int32 words per key (`InorderKey`)


@fieldwise_init
struct InorderKey(SumState):
    """A key's `ISTATE` int32 words at `s` (a multiple of ISTATE) of the state
    array `w`; `f` is the same array as float64 (both loop-invariant, as in
    `sessions/_state.SessionKey`). Row numbers are those of the pass (the ring
    holds row & mask); the deletable sum is on the contract (`SumState`), the
    min/max deques are linked through the ring records."""

    var w: I32P
    var f: F64P
    var s: Int

    comptime LO = 0  # the key's oldest row in the frame
    comptime TAIL = 1  # its newest non-null row (-1: none)
    comptime COUNT = 2
    comptime MIN_HEAD = 3  # the min deque's front row
    comptime MAX_HEAD = 4  # the max deque's front row
    # float64 words of the record (int32 words 6..13)
    comptime SUM = 3
    comptime SUM_C = 4
    comptime MIN = 5  # the value at the min deque's front
    comptime MAX = 6  # the value at the max deque's front

    @always_inline
    def lo(self) -> Int:
        return Int(self.w[unsafe_offset=self.s + Self.LO])

    @always_inline
    def set_lo(self, q: Int):
        self.w[unsafe_offset=self.s + Self.LO] = Int32(q)

    @always_inline
    def tail(self) -> Int:
        return Int(self.w[unsafe_offset=self.s + Self.TAIL])

    @always_inline
    def set_tail(self, q: Int):
        self.w[unsafe_offset=self.s + Self.TAIL] = Int32(q)

    @always_inline
    def count(self) -> Int64:
        return Int64(self.w[unsafe_offset=self.s + Self.COUNT])

    @always_inline
    def set_count(mut self, n: Int64):
        self.w[unsafe_offset=self.s + Self.COUNT] = Int32(n)

    @always_inline
    def sum(self) -> Float64:
        return self.f[unsafe_offset=self.s // 2 + Self.SUM]

    @always_inline
    def set_sum(mut self, v: Float64):
        self.f[unsafe_offset=self.s // 2 + Self.SUM] = v

    @always_inline
    def sum_c(self) -> Float64:
        return self.f[unsafe_offset=self.s // 2 + Self.SUM_C]

    @always_inline
    def set_sum_c(mut self, v: Float64):
        self.f[unsafe_offset=self.s // 2 + Self.SUM_C] = v

    @always_inline
    def min_head(self) -> Int:
        return Int(self.w[unsafe_offset=self.s + Self.MIN_HEAD])

    @always_inline
    def set_min_head(self, q: Int):
        self.w[unsafe_offset=self.s + Self.MIN_HEAD] = Int32(q)

    @always_inline
    def max_head(self) -> Int:
        return Int(self.w[unsafe_offset=self.s + Self.MAX_HEAD])

    @always_inline
    def set_max_head(self, q: Int):
        self.w[unsafe_offset=self.s + Self.MAX_HEAD] = Int32(q)

    @always_inline
    def min(self) -> Float64:
        return self.f[unsafe_offset=self.s // 2 + Self.MIN]

    @always_inline
    def set_min(self, v: Float64):
        self.f[unsafe_offset=self.s // 2 + Self.MIN] = v

    @always_inline
    def max(self) -> Float64:
        return self.f[unsafe_offset=self.s // 2 + Self.MAX]

    @always_inline
    def set_max(self, v: Float64):
        self.f[unsafe_offset=self.s // 2 + Self.MAX] = v


@fieldwise_init
struct InorderKeys(TrivialRegisterPassable):
    """The key states of a pass: `ISTATE` int32 words a key from `w`."""

    var w: I32P
    var f: F64P

    @always_inline
    def key(self, c: Int) -> InorderKey:
        return InorderKey(self.w, self.f, c * ISTATE)


@fieldwise_init
struct Ring(TrivialRegisterPassable):
    """The ring of recent rows: row q's `IREC` int32 words at IREC * (q & mask):
    its float64 value (words 0-1), the key's next non-null row, and its
    neighbours in the key's min and max deques (-1: none)."""

    var w: I32P
    var f: F64P
    var mask: Int

    comptime NEXT = 2
    comptime MIN_PREV = 3
    comptime MIN_NEXT = 4
    comptime MAX_PREV = 5
    comptime MAX_NEXT = 6

    @always_inline
    def record(self, q: Int) -> I32P:
        """Row q's record (to prefetch)."""
        return self.w.unsafe_offset(IREC * (q & self.mask))

    @always_inline
    def value(self, q: Int) -> Float64:
        return self.f[unsafe_offset=IREC * (q & self.mask) // 2]

    @always_inline
    def set_value(self, q: Int, x: Float64):
        self.f[unsafe_offset=IREC * (q & self.mask) // 2] = x

    @always_inline
    def link(self, q: Int, word: Int) -> Int:
        """Word `word` (NEXT, MIN_PREV, ...) of row q's record: a row number."""
        return Int(self.w[unsafe_offset=IREC * (q & self.mask) + word])

    @always_inline
    def set_link(self, q: Int, word: Int, to: Int):
        self.w[unsafe_offset=IREC * (q & self.mask) + word] = Int32(to)


def gallop(ts: I64P, a: Int, b: Int, t: Int) -> Int:
    """`first_at_or_after` for an answer expected near a: exponential steps from a."""
    var step = 1
    while a + step < b and Int(ts[unsafe_offset=a + step - 1]) < t:
        step *= 2
    return first_at_or_after(ts, a + step // 2, min(a + step, b), t)


def inorder_span(ts: I64P, n: Int, width: Int, hop: Int, limit: Int) -> Int:
    """An upper bound of the ring rows a pass needs, max over runs [p, e) of
    e - g(g(p)), exceeding the exact value by less than SPAN_BLOCK rows: per block
    of SPAN_BLOCK rows starting at a, the block's last run end minus g(g(a)) (g
    is monotone), by binary search. Stops early with a value > `limit` once the
    bound exceeds it."""
    var span = 0
    var a = 0
    var ga = 0
    var gga = 0
    while a < n:
        var z = min(n, a + SPAN_BLOCK) - 1
        var e = z + 1
        while e < n and ts[unsafe_offset=e] == ts[unsafe_offset=z]:
            e += 1
        ga = gallop(ts, ga, a + 1, frame_lower(Int(ts[unsafe_offset=a]), width, hop))
        gga = gallop(ts, gga, ga + 1, frame_lower(Int(ts[unsafe_offset=ga]), width, hop))
        span = max(span, e - gga)
        if span > limit:
            return span
        a += SPAN_BLOCK
    return span


def inorder_window[
    SUM: Bool, MINMAX: Bool
](
    ts: I64P,
    inp: Inputs,
    codes: I32P,
    g: Int,
    n: Int,
    r0: Int,
    r1: Int,
    width: Int,
    hop: Int,
    o: Outs,
    valid: List[Int],
    scratch: Int,
    ring_rows: Int,
):
    """One window's count/sum/mean/min/max for rows [r0, r1) (see the section comment)."""
    var need_min = o.min != 0
    var need_max = o.max != 0
    var st = I32P(unsafe_from_address=scratch)
    var keys = InorderKeys(st, f64p(scratch))
    var rp = I32P(unsafe_from_address=scratch + 4 * ISTATE * g)
    var ring = Ring(rp, f64p(Int(rp)), ring_rows - 1)
    for k in range(g):
        var ks = keys.key(k)
        ks.set_tail(-1)  # no row
        sum_clear(ks)
    var w0 = first_at_or_after(ts, 0, r0, frame_lower(Int(ts[unsafe_offset=r0]), width, hop))
    var end = r1
    while end < n and ts[unsafe_offset=end] == ts[unsafe_offset=r1 - 1]:
        end += 1
    var gl = w0  # first row in the current frame
    var vbytes = (n + 7) // 8
    var bits: UInt64 = 0
    var p = w0
    while p < end:
        if p + PF < end:
            prefetch[PrefetchOptions().for_write()](
                st.unsafe_offset(Int(codes[unsafe_offset=p + PF]) * ISTATE)
            )
            var ahead = keys.key(Int(codes[unsafe_offset=p + PF // 2]))
            var tl = ahead.tail()
            if tl >= 0:
                prefetch[PrefetchOptions().for_write()](ring.record(tl))
                prefetch[PrefetchOptions().for_write()](ring.record(ahead.lo()))
                comptime if MINMAX:
                    prefetch[PrefetchOptions().for_write()](ring.record(ahead.min_head()))
                    prefetch[PrefetchOptions().for_write()](ring.record(ahead.max_head()))
        var t = ts[unsafe_offset=p]
        var e = p + 1
        while e < end and ts[unsafe_offset=e] == t:
            e += 1
        var lower = Int64(frame_lower(Int(t), width, hop))
        while ts[unsafe_offset=gl] < lower:
            gl += 1
        # trim each key of the run to the frame, then let the run's rows enter
        for q in range(p, e):
            var ks = keys.key(Int(codes[unsafe_offset=q]))
            var tail = ks.tail()
            if tail < gl:  # every row of the key left (or it has none)
                if tail >= 0:
                    ks.set_tail(-1)
                    sum_clear(ks)
            else:
                var lo = ks.lo()
                if lo < gl:
                    var acc = Sums.of(ks)  # the leaving rows' updates in registers
                    while lo < gl:
                        sum_remove[SUM](acc, ring.value(lo))
                        lo = ring.link(lo, Ring.NEXT)
                    ks.set_lo(lo)
                    acc.store[SUM](ks)
                    comptime if MINMAX:
                        if need_min:
                            var h = ks.min_head()
                            if h < lo:
                                while h < lo:
                                    h = ring.link(h, Ring.MIN_NEXT)
                                ks.set_min_head(h)
                                ks.set_min(ring.value(h))
                        if need_max:
                            var h = ks.max_head()
                            if h < lo:
                                while h < lo:
                                    h = ring.link(h, Ring.MAX_NEXT)
                                ks.set_max_head(h)
                                ks.set_max(ring.value(h))
            var x = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, q)
            if isnan(x):
                continue
            ring.set_value(q, x)
            ring.set_link(q, Ring.NEXT, -1)
            tail = ks.tail()
            ks.set_tail(q)
            if tail < 0:
                ks.set_lo(q)
                sum_start(ks, x)
                comptime if MINMAX:
                    ring.set_link(q, Ring.MIN_PREV, -1)
                    ring.set_link(q, Ring.MAX_PREV, -1)
                    ks.set_min_head(q)
                    ks.set_max_head(q)
                    ks.set_min(x)
                    ks.set_max(x)
                continue
            ring.set_link(tail, Ring.NEXT, q)
            sum_add[SUM](ks, x)
            comptime if MINMAX:
                if need_min:
                    var head = ks.min_head()
                    var b = tail
                    while b >= head and ring.value(b) >= x:
                        b = ring.link(b, Ring.MIN_PREV)
                    ring.set_link(q, Ring.MIN_PREV, b)
                    if b < head:
                        ks.set_min_head(q)
                        ks.set_min(x)
                    else:
                        ring.set_link(b, Ring.MIN_NEXT, q)
                if need_max:
                    var head = ks.max_head()
                    var b = tail
                    while b >= head and ring.value(b) <= x:
                        b = ring.link(b, Ring.MAX_PREV)
                    ring.set_link(q, Ring.MAX_PREV, b)
                    if b < head:
                        ks.set_max_head(q)
                        ks.set_max(x)
                    else:
                        ring.set_link(b, Ring.MAX_NEXT, q)
        for q in range(max(p, r0), min(e, r1)):
            var ks = keys.key(Int(codes[unsafe_offset=q]))
            var count = Int(ks.count())
            var has = count > 0
            sum_emit[SUM](ks, count, o, q)
            comptime if MINMAX:
                if need_min:
                    put(o.min, o.min_dt, q, ks.min() if has else 0.0)
                if need_max:
                    put(o.max, o.max_dt, q, ks.max() if has else 0.0)
            if has:
                bits |= UInt64(1) << UInt64(q & 63)
            if (q & 63) == 63 or q == r1 - 1:
                for j in range(len(valid)):
                    store_bits(valid[j], q >> 6, bits, vbytes)
                bits = 0
        p = e


def inorder_scratch_bytes(ngroups: Int, ring_rows: Int) -> Int:
    """Scratch of one part of `rolling_inorder_part`: the key states, the ring
    and 128 bytes of slack (the part rounds its start up to 64 bytes)."""
    return 4 * ISTATE * ngroups + 4 * IREC * ring_rows + 128


def rolling_inorder_span(d: I64P, window: Int, limit: Int) -> Int:
    """Ring rows (`inorder_span`) window number `window` of the call needs, or
    any value > `limit` when it needs more."""
    var inp = read_inputs(d)
    var width = Int(d[unsafe_offset=HEADER + 5 + window])
    var hop = Int(d[unsafe_offset=HEADER + 1])
    return inorder_span(inp.ts, inp.n, width, hop, limit)


def rolling_inorder_part(d: I64P, part: Int, parts: Int, w: Int, scratch: Int, rr: Int) -> Int:
    """Window `w` for rows of part `part` of `parts` (cut at multiples of 64
    rows); `scratch` addresses `inorder_scratch_bytes` bytes
    (64-byte aligned) of this part; `rr`, the ring rows, is a power of two >= the span."""
    var inp = read_inputs(d)
    var nwin = Int(d[unsafe_offset=HEADER])
    var hop = Int(d[unsafe_offset=HEADER + 1])
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var width = Int(d[unsafe_offset=HEADER + 5 + w])
    var cols = read_columns(d, HEADER + 5 + nwin, nwin * naggs)
    var n = inp.n
    var rows = part_rows(n, part, parts)
    var r0 = rows[0]
    var r1 = rows[1]
    if r0 >= r1:
        return 0
    var o = outs_for(cols, w * naggs, naggs, 0)
    var valid = List[Int]()
    for c in range(w * naggs, (w + 1) * naggs):
        if cols[c].valid != 0:
            valid.append(cols[c].valid)
    var codes = I32P(unsafe_from_address=inp.codes)
    var sc = (scratch + 63) // 64 * 64
    var g = inp.ngroups
    var need_sum = o.sum != 0 or o.mean != 0
    var need_minmax = o.min != 0 or o.max != 0
    if need_minmax:
        inorder_window[True, True](inp.ts, inp, codes, g, n, r0, r1, width, hop, o, valid, sc, rr)
    elif need_sum:
        inorder_window[True, False](inp.ts, inp, codes, g, n, r0, r1, width, hop, o, valid, sc, rr)
    else:
        inorder_window[False, False](inp.ts, inp, codes, g, n, r0, r1, width, hop, o, valid, sc, rr)
    return r1 - r0
