"""Keyed input in ts order: per-key regions filled on arrival.

A counting pass over the part's key codes gives each key a slot range;
arriving rows are appended to their key's range as (ts, value) pairs, so a
key's frame is a contiguous run of slots next to the ones it touched last.
The key's frame is trimmed lazily, when one of its rows is emitted (rows
leave once ts < lower). Per row: the key's 64-byte record, the slot line and
the deque lines, all local to the key; inputs and outputs are sequential.
"""

from std.utils.numerics import isnan
from std.math import sqrt
from std.sys.intrinsics import prefetch, PrefetchOptions
from featureflow_kernels.abi import A_STD, A_VAR, Column, F64P, I32P, I64P, f64p, i64p
from featureflow_kernels.buffers import put, store_bits
from featureflow_kernels.agg.sums import add_square, sample_variance, two_sum
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.rolling._frames import first_at_or_after, frame_lower
from featureflow_kernels.rolling._stream import SQ


comptime PF = 32  # prefetch distance in rows
comptime KREC = 8  # int64 words per key: (hi, lo), (count, first), sum, sum_c,
# (min head, min tail), (max head, max tail), (last, -), -; positions are slots


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
    var sf = f64p(scratch)
    var si = I32P(unsafe_from_address=scratch)
    var sq = f64p(scratch + 8 * KREC * g)
    var slot_ts = i64p(scratch + 8 * (KREC + SQ) * g)  # pairs: ts, value
    var slot_v = f64p(Int(slot_ts))
    var dqmin = I32P(unsafe_from_address=Int(slot_ts) + 16 * cap)
    var dqmax = dqmin.unsafe_offset(cap)
    # slot ranges: a counting pass over the part's keys
    for k in range(g * KREC):
        st[unsafe_offset=k] = 0
    for q in range(w0, end):
        st[unsafe_offset=Int(codes[unsafe_offset=q]) * KREC] += 1
    var at = 0
    for k in range(g):
        var r = k * KREC
        var c = Int(st[unsafe_offset=r])
        si[unsafe_offset=2 * r] = Int32(at)  # hi
        si[unsafe_offset=2 * r + 1] = Int32(at)  # lo
        si[unsafe_offset=2 * (r + 1)] = 0  # count
        si[unsafe_offset=2 * (r + 1) + 1] = Int32(at)  # first
        si[unsafe_offset=2 * (r + 4)] = Int32(at)
        si[unsafe_offset=2 * (r + 4) + 1] = Int32(at)
        si[unsafe_offset=2 * (r + 5)] = Int32(at)
        si[unsafe_offset=2 * (r + 5) + 1] = Int32(at)
        si[unsafe_offset=2 * (r + 6)] = -1  # last
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
            var rr = Int(codes[unsafe_offset=p + PF // 2]) * KREC
            var hh = Int(si[unsafe_offset=2 * rr])
            prefetch[PrefetchOptions().for_write()](slot_ts.unsafe_offset(2 * hh))
            prefetch[PrefetchOptions().for_read()](
                slot_ts.unsafe_offset(2 * Int(si[unsafe_offset=2 * rr + 1]))
            )
            comptime if MINMAX:
                prefetch[PrefetchOptions().for_write()](
                    dqmin.unsafe_offset(Int(si[unsafe_offset=2 * (rr + 4) + 1]))
                )
                prefetch[PrefetchOptions().for_write()](
                    dqmax.unsafe_offset(Int(si[unsafe_offset=2 * (rr + 5) + 1]))
                )
        var t = ts[unsafe_offset=p]
        var e = p + 1
        while e < end and ts[unsafe_offset=e] == t:
            e += 1
        # the run [p, e) enters its keys' slots
        for q in range(p, e):
            var r = Int(codes[unsafe_offset=q]) * KREC
            var v = sv[unsafe_offset=q]
            var h = Int(si[unsafe_offset=2 * r])
            si[unsafe_offset=2 * r] = Int32(h + 1)
            slot_ts[unsafe_offset=2 * h] = t
            slot_v[unsafe_offset=2 * h + 1] = v
            if isnan(v):
                continue
            si[unsafe_offset=2 * (r + 1)] += 1
            comptime if SUM:
                var s = sf[unsafe_offset=r + 2]
                var sc = sf[unsafe_offset=r + 3]
                two_sum(s, sc, v)
                sf[unsafe_offset=r + 2] = s
                sf[unsafe_offset=r + 3] = sc
            comptime if MINMAX:
                if need_min:
                    var head = Int(si[unsafe_offset=2 * (r + 4)])
                    var tail = Int(si[unsafe_offset=2 * (r + 4) + 1])
                    while (
                        tail > head
                        and slot_v[unsafe_offset=2 * Int(dqmin[unsafe_offset=tail - 1]) + 1] >= v
                    ):
                        tail -= 1
                    dqmin[unsafe_offset=tail] = Int32(h)
                    si[unsafe_offset=2 * (r + 4) + 1] = Int32(tail + 1)
                if need_max:
                    var head = Int(si[unsafe_offset=2 * (r + 5)])
                    var tail = Int(si[unsafe_offset=2 * (r + 5) + 1])
                    while (
                        tail > head
                        and slot_v[unsafe_offset=2 * Int(dqmax[unsafe_offset=tail - 1]) + 1] <= v
                    ):
                        tail -= 1
                    dqmax[unsafe_offset=tail] = Int32(h)
                    si[unsafe_offset=2 * (r + 5) + 1] = Int32(tail + 1)
            comptime if EXTRA:
                if need_sq:
                    var k = (r // KREC) * SQ
                    if sq[unsafe_offset=k + 5] == 0.0:
                        # shifting by a value of the data keeps s2 - s1^2/n free of
                        # catastrophic cancellation when values share a large offset
                        sq[unsafe_offset=k + 4] = v
                        sq[unsafe_offset=k + 5] = 1.0
                    var d = v - sq[unsafe_offset=k + 4]
                    var s1 = sq[unsafe_offset=k]
                    var s1c = sq[unsafe_offset=k + 1]
                    var s2 = sq[unsafe_offset=k + 2]
                    var s2c = sq[unsafe_offset=k + 3]
                    two_sum(s1, s1c, d)
                    add_square(s2, s2c, d, 1.0)
                    sq[unsafe_offset=k] = s1
                    sq[unsafe_offset=k + 1] = s1c
                    sq[unsafe_offset=k + 2] = s2
                    sq[unsafe_offset=k + 3] = s2c
                si[unsafe_offset=2 * (r + 6)] = Int32(h)  # last
        var lower = Int64(frame_lower(Int(t), width, hop))
        for q in range(max(p, r0), min(e, r1)):
            var r = Int(codes[unsafe_offset=q]) * KREC
            # the key's rows older than the frame leave, oldest first
            var lo = Int(si[unsafe_offset=2 * r + 1])
            var lo0 = lo
            while slot_ts[unsafe_offset=2 * lo] < lower:
                var x = slot_v[unsafe_offset=2 * lo + 1]
                lo += 1
                if isnan(x):
                    continue
                var cnt = si[unsafe_offset=2 * (r + 1)] - 1
                si[unsafe_offset=2 * (r + 1)] = cnt
                if cnt == 0:
                    # an empty frame: restart exactly instead of carrying noise
                    sf[unsafe_offset=r + 2] = 0.0
                    sf[unsafe_offset=r + 3] = 0.0
                    comptime if EXTRA:
                        if need_sq:
                            var k = (r // KREC) * SQ
                            for j in range(SQ):
                                sq[unsafe_offset=k + j] = 0.0
                    continue
                comptime if SUM:
                    var s = sf[unsafe_offset=r + 2]
                    var sc = sf[unsafe_offset=r + 3]
                    two_sum(s, sc, -x)
                    sf[unsafe_offset=r + 2] = s
                    sf[unsafe_offset=r + 3] = sc
                comptime if EXTRA:
                    if need_sq:
                        var k = (r // KREC) * SQ
                        var d = x - sq[unsafe_offset=k + 4]
                        var s1 = sq[unsafe_offset=k]
                        var s1c = sq[unsafe_offset=k + 1]
                        var s2 = sq[unsafe_offset=k + 2]
                        var s2c = sq[unsafe_offset=k + 3]
                        two_sum(s1, s1c, -d)
                        add_square(s2, s2c, d, -1.0)
                        sq[unsafe_offset=k] = s1
                        sq[unsafe_offset=k + 1] = s1c
                        sq[unsafe_offset=k + 2] = s2
                        sq[unsafe_offset=k + 3] = s2c
            var count = Int(si[unsafe_offset=2 * (r + 1)])
            var has = count > 0
            if lo != lo0:
                si[unsafe_offset=2 * r + 1] = Int32(lo)
                comptime if MINMAX:
                    if need_min:
                        var head = Int(si[unsafe_offset=2 * (r + 4)])
                        while (
                            head < Int(si[unsafe_offset=2 * (r + 4) + 1])
                            and Int(dqmin[unsafe_offset=head]) < lo
                        ):
                            head += 1
                        si[unsafe_offset=2 * (r + 4)] = Int32(head)
                    if need_max:
                        var head = Int(si[unsafe_offset=2 * (r + 5)])
                        while (
                            head < Int(si[unsafe_offset=2 * (r + 5) + 1])
                            and Int(dqmax[unsafe_offset=head]) < lo
                        ):
                            head += 1
                        si[unsafe_offset=2 * (r + 5)] = Int32(head)
            if o.count != 0:
                i64p(o.count)[unsafe_offset=q] = Int64(count)
            comptime if SUM:
                var rsum = 0.0
                if has:
                    rsum = sf[unsafe_offset=r + 2] + sf[unsafe_offset=r + 3]
                if o.sum != 0:
                    f64p(o.sum)[unsafe_offset=q] = rsum
                if o.mean != 0:
                    f64p(o.mean)[unsafe_offset=q] = rsum / Float64(count) if has else 0.0
            comptime if MINMAX:
                if need_min:
                    var rmin = 0.0
                    if has:
                        rmin = slot_v[
                            unsafe_offset=2
                            * Int(dqmin[unsafe_offset=Int(si[unsafe_offset=2 * (r + 4)])])
                            + 1
                        ]
                    put(o.min, o.min_dt, q, rmin)
                if need_max:
                    var rmax = 0.0
                    if has:
                        rmax = slot_v[
                            unsafe_offset=2
                            * Int(dqmax[unsafe_offset=Int(si[unsafe_offset=2 * (r + 5)])])
                            + 1
                        ]
                    put(o.max, o.max_dt, q, rmax)
            comptime if EXTRA:
                if need_sq:
                    var rvar = 0.0
                    if count > 1:
                        var k = (r // KREC) * SQ
                        rvar = sample_variance(
                            sq[unsafe_offset=k],
                            sq[unsafe_offset=k + 1],
                            sq[unsafe_offset=k + 2],
                            sq[unsafe_offset=k + 3],
                            count,
                        )
                    if o.var_ != 0:
                        f64p(o.var_)[unsafe_offset=q] = rvar
                    if o.std != 0:
                        f64p(o.std)[unsafe_offset=q] = sqrt(rvar)
                if need_first:
                    var rfirst = 0.0
                    if has:
                        var f = max(Int(si[unsafe_offset=2 * (r + 1) + 1]), lo)
                        while isnan(slot_v[unsafe_offset=2 * f + 1]):
                            f += 1
                        si[unsafe_offset=2 * (r + 1) + 1] = Int32(f)
                        rfirst = slot_v[unsafe_offset=2 * f + 1]
                    put(o.first, o.first_dt, q, rfirst)
                if need_last:
                    var rlast = 0.0
                    if has:
                        rlast = slot_v[unsafe_offset=2 * Int(si[unsafe_offset=2 * (r + 6)]) + 1]
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
