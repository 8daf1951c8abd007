"""Keyed input in ts order: per-key regions filled on arrival.

A counting pass over the part's key codes gives each key a slot range;
arriving rows are appended to their key's range as (ts, value) pairs, so a
key's frame is a contiguous run of slots next to the ones it touched last.
The key's frame is trimmed lazily, when one of its rows is emitted (rows
leave once ts < lower). Per row: the key's 64-byte record (`RegionKey`), the
slot line and the deque lines, all local to the key; inputs and outputs are
sequential. The count and sum (and var/std's shifted moments, `_stream.SqKey`)
are the contract's deletable states (agg/deletable.mojo); min/max are
monotonic deques of slots, first/last slot positions.
"""

from std.utils.numerics import isnan
from std.math import sqrt
from std.sys.intrinsics import prefetch, PrefetchOptions
from featureflow_kernels.abi import A_STD, A_VAR, Column, F64P, I32P, I64P, f64p, i64p
from featureflow_kernels.buffers import put, store_bits
from featureflow_kernels.agg.deletable import (
    SumState,
    moments_add,
    moments_remove,
    moments_variance,
    sum_add,
    sum_emit,
    sum_remove_or_clear,
)
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.rolling._frames import first_at_or_after, frame_lower
from featureflow_kernels.rolling._stream import SQ, SqKey


comptime PF = 32  # prefetch distance in rows
comptime KREC = 8  # int64 words per key (`RegionKey`)


@fieldwise_init
struct RegionKey(SumState):
    """A key's `KREC` int64 words at int64 word `r` (a multiple of KREC), read
    as int32 pairs (`w`) and float64 (`f`), the same loop-invariant array.
    Positions are slots of the part's slot array."""

    var w: I32P
    var f: F64P
    var r: Int

    # int32 words of the record
    comptime HI = 0  # the key's next free slot
    comptime LO = 1  # its oldest slot in the frame
    comptime COUNT = 2  # non-null rows in the frame
    comptime FIRST = 3  # no non-null slot of the frame before it
    comptime MIN_HEAD = 8  # the min deque's [head, tail) in `dqmin`
    comptime MIN_TAIL = 9
    comptime MAX_HEAD = 10
    comptime MAX_TAIL = 11
    comptime LAST = 12  # the newest non-null slot (-1: none)
    # float64 words
    comptime SUM = 2
    comptime SUM_C = 3

    @always_inline
    def word(self, k: Int) -> Int:
        return Int(self.w[unsafe_offset=2 * self.r + k])

    @always_inline
    def set_word(self, k: Int, v: Int):
        self.w[unsafe_offset=2 * self.r + k] = Int32(v)

    @always_inline
    def hi(self) -> Int:
        return self.word(Self.HI)

    @always_inline
    def lo(self) -> Int:
        return self.word(Self.LO)

    @always_inline
    def set_lo(self, s: Int):
        self.set_word(Self.LO, s)

    @always_inline
    def count(self) -> Int64:
        return Int64(self.w[unsafe_offset=2 * self.r + Self.COUNT])

    @always_inline
    def set_count(mut self, n: Int64):
        self.w[unsafe_offset=2 * self.r + Self.COUNT] = Int32(n)

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
    def open(self, at: Int):
        """The key's empty frame at slot `at` (count, sums and the unused words
        are 0 from the counting pass)."""
        self.set_word(Self.HI, at)
        self.set_word(Self.LO, at)
        self.set_word(Self.COUNT, 0)
        self.set_word(Self.FIRST, at)
        self.set_word(Self.MIN_HEAD, at)
        self.set_word(Self.MIN_TAIL, at)
        self.set_word(Self.MAX_HEAD, at)
        self.set_word(Self.MAX_TAIL, at)
        self.set_word(Self.LAST, -1)


@fieldwise_init
struct RegionKeys(TrivialRegisterPassable):
    """The key records of a part (`KREC` int64 words a key from `st`) and their
    var/std words (`SQ` float64 words a key from `sq`)."""

    var st: I64P
    var w: I32P
    var f: F64P
    var sq: F64P

    @always_inline
    def key(self, c: Int) -> RegionKey:
        return RegionKey(self.w, self.f, c * KREC)

    @always_inline
    def moments(self, c: Int) -> SqKey:
        return SqKey(self.sq, c * SQ)

    @always_inline
    def count_slot(self, c: Int):
        """The counting pass: key c takes one more slot (int64 word 0 of its
        record, before `RegionKey.open`)."""
        self.st[unsafe_offset=c * KREC] += 1

    @always_inline
    def slots_counted(self, c: Int) -> Int:
        return Int(self.st[unsafe_offset=c * KREC])


def region_window[
    SUM: Bool, MINMAX: Bool, EXTRA: Bool
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
    """One window's aggregates for rows [r0, r1) of keyed ts-ordered input."""
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
    var st = i64p(scratch)
    var sq = f64p(scratch + 8 * KREC * g)
    var keys = RegionKeys(st, I32P(unsafe_from_address=scratch), f64p(scratch), sq)
    var slot_ts = i64p(scratch + 8 * (KREC + SQ) * g)  # pairs: ts, value
    var slot_v = f64p(Int(slot_ts))
    var dqmin = I32P(unsafe_from_address=Int(slot_ts) + 16 * cap)
    var dqmax = dqmin.unsafe_offset(cap)
    # slot ranges: a counting pass over the part's keys
    for k in range(g * KREC):
        st[unsafe_offset=k] = 0
    for q in range(w0, end):
        keys.count_slot(Int(codes[unsafe_offset=q]))
    var at = 0
    for k in range(g):
        var c = keys.slots_counted(k)
        keys.key(k).open(at)
        at += c
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
    var p = w0
    while p < end:
        # latency, not bandwidth, bounds this loop: fetch the record of the key
        # PF rows ahead, and the slot lines of the key PF / 2 rows ahead
        if p + PF < end:
            prefetch[PrefetchOptions().for_write()](
                st.unsafe_offset(Int(codes[unsafe_offset=p + PF]) * KREC)
            )
            var ahead = keys.key(Int(codes[unsafe_offset=p + PF // 2]))
            var hh = ahead.hi()
            prefetch[PrefetchOptions().for_write()](slot_ts.unsafe_offset(2 * hh))
            prefetch[PrefetchOptions().for_read()](slot_ts.unsafe_offset(2 * ahead.lo()))
            comptime if MINMAX:
                prefetch[PrefetchOptions().for_write()](
                    dqmin.unsafe_offset(ahead.word(RegionKey.MIN_TAIL))
                )
                prefetch[PrefetchOptions().for_write()](
                    dqmax.unsafe_offset(ahead.word(RegionKey.MAX_TAIL))
                )
        var t = ts[unsafe_offset=p]
        var e = p + 1
        while e < end and ts[unsafe_offset=e] == t:
            e += 1
        # the run [p, e) enters its keys' slots
        for q in range(p, e):
            var c = Int(codes[unsafe_offset=q])
            var ks = keys.key(c)
            var v = sv[unsafe_offset=q]
            var h = ks.hi()
            ks.set_word(RegionKey.HI, h + 1)
            slot_ts[unsafe_offset=2 * h] = t
            slot_v[unsafe_offset=2 * h + 1] = v
            if isnan(v):
                continue
            sum_add[SUM](ks, v)
            comptime if MINMAX:
                if need_min:
                    var head = ks.word(RegionKey.MIN_HEAD)
                    var tail = ks.word(RegionKey.MIN_TAIL)
                    while (
                        tail > head
                        and slot_v[unsafe_offset=2 * Int(dqmin[unsafe_offset=tail - 1]) + 1] >= v
                    ):
                        tail -= 1
                    dqmin[unsafe_offset=tail] = Int32(h)
                    ks.set_word(RegionKey.MIN_TAIL, tail + 1)
                if need_max:
                    var head = ks.word(RegionKey.MAX_HEAD)
                    var tail = ks.word(RegionKey.MAX_TAIL)
                    while (
                        tail > head
                        and slot_v[unsafe_offset=2 * Int(dqmax[unsafe_offset=tail - 1]) + 1] <= v
                    ):
                        tail -= 1
                    dqmax[unsafe_offset=tail] = Int32(h)
                    ks.set_word(RegionKey.MAX_TAIL, tail + 1)
            comptime if EXTRA:
                if need_sq:
                    var m = keys.moments(c)
                    moments_add(m, v)
                ks.set_word(RegionKey.LAST, h)
        var lower = Int64(frame_lower(Int(t), width, hop))
        for q in range(max(p, r0), min(e, r1)):
            var c = Int(codes[unsafe_offset=q])
            var ks = keys.key(c)
            # the key's rows older than the frame leave, oldest first
            var lo = ks.lo()
            var lo0 = lo
            while slot_ts[unsafe_offset=2 * lo] < lower:
                var x = slot_v[unsafe_offset=2 * lo + 1]
                lo += 1
                if isnan(x):
                    continue
                if sum_remove_or_clear[SUM](ks, x):
                    # an empty frame: restart exactly instead of carrying noise
                    comptime if EXTRA:
                        if need_sq:
                            var m = keys.moments(c)
                            m.clear()
                    continue
                comptime if EXTRA:
                    if need_sq:
                        var m = keys.moments(c)
                        moments_remove(m, x)
            var count = Int(ks.count())
            var has = count > 0
            if lo != lo0:
                ks.set_lo(lo)
                comptime if MINMAX:
                    if need_min:
                        var head = ks.word(RegionKey.MIN_HEAD)
                        while (
                            head < ks.word(RegionKey.MIN_TAIL)
                            and Int(dqmin[unsafe_offset=head]) < lo
                        ):
                            head += 1
                        ks.set_word(RegionKey.MIN_HEAD, head)
                    if need_max:
                        var head = ks.word(RegionKey.MAX_HEAD)
                        while (
                            head < ks.word(RegionKey.MAX_TAIL)
                            and Int(dqmax[unsafe_offset=head]) < lo
                        ):
                            head += 1
                        ks.set_word(RegionKey.MAX_HEAD, head)
            sum_emit[SUM](ks, count, o, q)
            comptime if MINMAX:
                if need_min:
                    var rmin = 0.0
                    if has:
                        rmin = slot_v[
                            unsafe_offset=2 * Int(dqmin[unsafe_offset=ks.word(RegionKey.MIN_HEAD)])
                            + 1
                        ]
                    put(o.min, o.min_dt, q, rmin)
                if need_max:
                    var rmax = 0.0
                    if has:
                        rmax = slot_v[
                            unsafe_offset=2 * Int(dqmax[unsafe_offset=ks.word(RegionKey.MAX_HEAD)])
                            + 1
                        ]
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
                        var f = max(ks.word(RegionKey.FIRST), lo)
                        while isnan(slot_v[unsafe_offset=2 * f + 1]):
                            f += 1
                        ks.set_word(RegionKey.FIRST, f)
                        rfirst = slot_v[unsafe_offset=2 * f + 1]
                    put(o.first, o.first_dt, q, rfirst)
                if need_last:
                    var rlast = 0.0
                    if has:
                        rlast = slot_v[unsafe_offset=2 * ks.word(RegionKey.LAST) + 1]
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
