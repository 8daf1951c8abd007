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
    HEADER,
    I32P,
    I64P,
    Inputs,
    f64p,
    i64p,
    read_columns,
    read_inputs,
)
from featureflow_kernels.buffers import load_valid, put, store_bits
from featureflow_kernels.agg.sums import two_sum
from featureflow_kernels.agg.outputs import Outs, outs_for
from featureflow_kernels.rolling._frames import first_at_or_after, frame_lower, part_rows
from featureflow_kernels.rolling._region import PF


comptime SPAN_BLOCK = 1024  # rows per block of `inorder_span`'s bound
comptime IREC = 8  # int32 words per ring record: value (2), next, min prev, min next,
# max prev, max next, -
comptime ISTATE = 16  # int32 words per key: lo, tail, count, min head, max head, -,
# then float64 words 3..6: sum, sum compensation, min, max


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
    var sf = f64p(scratch)
    var ring = I32P(unsafe_from_address=scratch + 4 * ISTATE * g)
    var rf = f64p(Int(ring))
    var mask = ring_rows - 1
    for k in range(g):
        st[unsafe_offset=k * ISTATE + 1] = -1  # tail: no row
        st[unsafe_offset=k * ISTATE + 2] = 0
        sf[unsafe_offset=k * (ISTATE // 2) + 3] = 0.0
        sf[unsafe_offset=k * (ISTATE // 2) + 4] = 0.0
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
            var s2 = Int(codes[unsafe_offset=p + PF // 2]) * ISTATE
            var tl = Int(st[unsafe_offset=s2 + 1])
            if tl >= 0:
                prefetch[PrefetchOptions().for_write()](ring.unsafe_offset(IREC * (tl & mask)))
                prefetch[PrefetchOptions().for_write()](
                    ring.unsafe_offset(IREC * (Int(st[unsafe_offset=s2]) & mask))
                )
                comptime if MINMAX:
                    prefetch[PrefetchOptions().for_write()](
                        ring.unsafe_offset(IREC * (Int(st[unsafe_offset=s2 + 3]) & mask))
                    )
                    prefetch[PrefetchOptions().for_write()](
                        ring.unsafe_offset(IREC * (Int(st[unsafe_offset=s2 + 4]) & mask))
                    )
        var t = ts[unsafe_offset=p]
        var e = p + 1
        while e < end and ts[unsafe_offset=e] == t:
            e += 1
        var lower = Int64(frame_lower(Int(t), width, hop))
        while ts[unsafe_offset=gl] < lower:
            gl += 1
        # trim each key of the run to the frame, then let the run's rows enter
        for q in range(p, e):
            var s = Int(codes[unsafe_offset=q]) * ISTATE
            var f = s // 2
            var tail = Int(st[unsafe_offset=s + 1])
            if tail < gl:  # every row of the key left (or it has none)
                if tail >= 0:
                    st[unsafe_offset=s + 1] = -1
                    st[unsafe_offset=s + 2] = 0
                    sf[unsafe_offset=f + 3] = 0.0
                    sf[unsafe_offset=f + 4] = 0.0
            else:
                var lo = Int(st[unsafe_offset=s])
                if lo < gl:
                    var cnt = Int(st[unsafe_offset=s + 2])
                    var sm = sf[unsafe_offset=f + 3]
                    var sc = sf[unsafe_offset=f + 4]
                    while lo < gl:
                        var rr = IREC * (lo & mask)
                        comptime if SUM:
                            two_sum(sm, sc, -rf[unsafe_offset=rr // 2])
                        cnt -= 1
                        lo = Int(ring[unsafe_offset=rr + 2])
                    st[unsafe_offset=s] = Int32(lo)
                    st[unsafe_offset=s + 2] = Int32(cnt)
                    comptime if SUM:
                        sf[unsafe_offset=f + 3] = sm
                        sf[unsafe_offset=f + 4] = sc
                    comptime if MINMAX:
                        if need_min:
                            var h = Int(st[unsafe_offset=s + 3])
                            if h < lo:
                                while h < lo:
                                    h = Int(ring[unsafe_offset=IREC * (h & mask) + 4])
                                st[unsafe_offset=s + 3] = Int32(h)
                                sf[unsafe_offset=f + 5] = rf[unsafe_offset=IREC * (h & mask) // 2]
                        if need_max:
                            var h = Int(st[unsafe_offset=s + 4])
                            if h < lo:
                                while h < lo:
                                    h = Int(ring[unsafe_offset=IREC * (h & mask) + 6])
                                st[unsafe_offset=s + 4] = Int32(h)
                                sf[unsafe_offset=f + 6] = rf[unsafe_offset=IREC * (h & mask) // 2]
            var x = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, q)
            if isnan(x):
                continue
            var rq = IREC * (q & mask)
            rf[unsafe_offset=rq // 2] = x
            ring[unsafe_offset=rq + 2] = -1
            tail = Int(st[unsafe_offset=s + 1])
            st[unsafe_offset=s + 1] = Int32(q)
            if tail < 0:
                st[unsafe_offset=s] = Int32(q)
                st[unsafe_offset=s + 2] = 1
                sf[unsafe_offset=f + 3] = x
                sf[unsafe_offset=f + 4] = 0.0
                comptime if MINMAX:
                    ring[unsafe_offset=rq + 3] = -1
                    ring[unsafe_offset=rq + 5] = -1
                    st[unsafe_offset=s + 3] = Int32(q)
                    st[unsafe_offset=s + 4] = Int32(q)
                    sf[unsafe_offset=f + 5] = x
                    sf[unsafe_offset=f + 6] = x
                continue
            ring[unsafe_offset=IREC * (tail & mask) + 2] = Int32(q)
            st[unsafe_offset=s + 2] += 1
            comptime if SUM:
                var sm = sf[unsafe_offset=f + 3]
                var sc = sf[unsafe_offset=f + 4]
                two_sum(sm, sc, x)
                sf[unsafe_offset=f + 3] = sm
                sf[unsafe_offset=f + 4] = sc
            comptime if MINMAX:
                if need_min:
                    var head = Int(st[unsafe_offset=s + 3])
                    var b = tail
                    while b >= head and rf[unsafe_offset=IREC * (b & mask) // 2] >= x:
                        b = Int(ring[unsafe_offset=IREC * (b & mask) + 3])
                    ring[unsafe_offset=rq + 3] = Int32(b)
                    if b < head:
                        st[unsafe_offset=s + 3] = Int32(q)
                        sf[unsafe_offset=f + 5] = x
                    else:
                        ring[unsafe_offset=IREC * (b & mask) + 4] = Int32(q)
                if need_max:
                    var head = Int(st[unsafe_offset=s + 4])
                    var b = tail
                    while b >= head and rf[unsafe_offset=IREC * (b & mask) // 2] <= x:
                        b = Int(ring[unsafe_offset=IREC * (b & mask) + 5])
                    ring[unsafe_offset=rq + 5] = Int32(b)
                    if b < head:
                        st[unsafe_offset=s + 4] = Int32(q)
                        sf[unsafe_offset=f + 6] = x
                    else:
                        ring[unsafe_offset=IREC * (b & mask) + 6] = Int32(q)
        for q in range(max(p, r0), min(e, r1)):
            var s = Int(codes[unsafe_offset=q]) * ISTATE
            var f = s // 2
            var count = Int(st[unsafe_offset=s + 2])
            var has = count > 0
            if o.count != 0:
                i64p(o.count)[unsafe_offset=q] = Int64(count)
            comptime if SUM:
                var rsum = 0.0
                if has:
                    rsum = sf[unsafe_offset=f + 3] + sf[unsafe_offset=f + 4]
                if o.sum != 0:
                    f64p(o.sum)[unsafe_offset=q] = rsum
                if o.mean != 0:
                    f64p(o.mean)[unsafe_offset=q] = rsum / Float64(count) if has else 0.0
            comptime if MINMAX:
                if need_min:
                    put(o.min, o.min_dt, q, sf[unsafe_offset=f + 5] if has else 0.0)
                if need_max:
                    put(o.max, o.max_dt, q, sf[unsafe_offset=f + 6] if has else 0.0)
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
