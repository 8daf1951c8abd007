"""Keyed sessions over input in ts order with a fixed gap (count, sum, mean, min,
max, first, last): no grouping copy of the rows. As each key's rows arrive in
ts order, a row opens a session exactly when it is the key's first or its ts
is past the key's current end (the end is always the last row's ts + gap).
A row also opens one when it would make the session longer than the max
length (ts - start > max length, when one is given). Pass 1 counts each key's
sessions (24 bytes of state a key: count, end, start), a prefix over the keys gives each key its first output slot (codes are in key order), and
pass 2 aggregates each key's open session in its 64-byte state, writing it to
its slot when the next one opens (or at the end). Both passes read the
inputs sequentially; only the key states are touched at random (prefetched).
"""

from std.utils.numerics import isnan
from std.sys.intrinsics import prefetch, PrefetchOptions
from featureflow_kernels.abi import I32P, I64P, Inputs, U8P, f64p, i64p
from featureflow_kernels.buffers import load_valid, put
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.agg.sums import two_sum
from featureflow_kernels.rolling._region import PF


comptime SREC = 8  # int64 words per key: slot (-1 - first slot before any row),
# end, count, sum, sum compensation, min, max, last


@always_inline
def flush_session(st: I64P, s: Int, o: Outs, out_end: I64P, lev: U8P):
    """Write key state `s`'s open session to its slot."""
    var sf = f64p(Int(st))
    var j = Int(st[unsafe_offset=s])
    var count = Int(st[unsafe_offset=s + 2])
    var has = count > 0
    var total = sf[unsafe_offset=s + 3] + sf[unsafe_offset=s + 4]
    out_end[unsafe_offset=j] = st[unsafe_offset=s + 1]
    if o.count != 0:
        i64p(o.count)[unsafe_offset=j] = Int64(count)
    if o.sum != 0:
        f64p(o.sum)[unsafe_offset=j] = total if has else 0.0
    if o.mean != 0:
        f64p(o.mean)[unsafe_offset=j] = total / Float64(count) if has else 0.0
    if o.min != 0:
        put(o.min, o.min_dt, j, sf[unsafe_offset=s + 5] if has else 0.0)
    if o.max != 0:
        put(o.max, o.max_dt, j, sf[unsafe_offset=s + 6] if has else 0.0)
    if o.last != 0:
        put(o.last, o.last_dt, j, sf[unsafe_offset=s + 7] if has else 0.0)
    if o.first != 0 and not has:
        put(o.first, o.first_dt, j, 0.0)
    lev[unsafe_offset=j] = UInt8(min(count, 2))


def sessions_in_order(
    inp: Inputs,
    gap: Int,
    max_len: Int,
    o: Outs,
    out_code: I32P,
    out_start: I64P,
    out_end: I64P,
    st: I64P,
    lev: U8P,
) -> Int:
    """Keyed ts-ordered sessions (see the section comment); `st` holds 8 * SREC
    bytes a key. A row opens a session past the open one's end or, with a max
    length (`max_len` > 0, ns), when ts - start > max_len: pass 1 keeps the open
    session's start in word 2, pass 2 reads it from `out_start`. Returns the
    number of sessions."""
    var n = inp.n
    var g = inp.ngroups
    var ts = inp.ts
    var codes = I32P(unsafe_from_address=inp.codes)
    var sf = f64p(Int(st))
    for k in range(g):
        st[unsafe_offset=k * SREC] = 0
    for i in range(n):
        if i + PF < n:
            prefetch[PrefetchOptions().for_write()](
                st.unsafe_offset(Int(codes[unsafe_offset=i + PF]) * SREC)
            )
        var s = Int(codes[unsafe_offset=i]) * SREC
        var t = ts[unsafe_offset=i]
        if (
            st[unsafe_offset=s] == 0
            or t > st[unsafe_offset=s + 1]
            or (max_len != 0 and t - st[unsafe_offset=s + 2] > Int64(max_len))
        ):
            st[unsafe_offset=s] += 1
            st[unsafe_offset=s + 2] = t
        st[unsafe_offset=s + 1] = t + Int64(gap)
    var m = 0
    for k in range(g):
        var c = Int(st[unsafe_offset=k * SREC])
        st[unsafe_offset=k * SREC] = Int64(-1 - m)
        m += c
    for i in range(n):
        if i + PF < n:
            prefetch[PrefetchOptions().for_write()](
                st.unsafe_offset(Int(codes[unsafe_offset=i + PF]) * SREC)
            )
        var c = Int(codes[unsafe_offset=i])
        var s = c * SREC
        var t = ts[unsafe_offset=i]
        var j = Int(st[unsafe_offset=s])
        if (
            j < 0
            or t > st[unsafe_offset=s + 1]
            or (max_len != 0 and t - out_start[unsafe_offset=j] > Int64(max_len))
        ):
            if j < 0:
                j = -1 - j
            else:
                flush_session(st, s, o, out_end, lev)
                j += 1
            st[unsafe_offset=s] = Int64(j)
            st[unsafe_offset=s + 2] = 0
            sf[unsafe_offset=s + 3] = 0.0
            sf[unsafe_offset=s + 4] = 0.0
            out_code[unsafe_offset=j] = Int32(c)
            out_start[unsafe_offset=j] = t
        st[unsafe_offset=s + 1] = t + Int64(gap)
        var v = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i)
        if isnan(v):
            continue
        var count = Int(st[unsafe_offset=s + 2])
        if count == 0:
            sf[unsafe_offset=s + 5] = v
            sf[unsafe_offset=s + 6] = v
            if o.first != 0:
                put(o.first, o.first_dt, j, v)
        else:
            sf[unsafe_offset=s + 5] = min(sf[unsafe_offset=s + 5], v)
            sf[unsafe_offset=s + 6] = max(sf[unsafe_offset=s + 6], v)
        sf[unsafe_offset=s + 7] = v
        st[unsafe_offset=s + 2] = Int64(count + 1)
        var sm = sf[unsafe_offset=s + 3]
        var sc = sf[unsafe_offset=s + 4]
        two_sum(sm, sc, v)
        sf[unsafe_offset=s + 3] = sm
        sf[unsafe_offset=s + 4] = sc
    for k in range(g):
        if st[unsafe_offset=k * SREC] >= 0:
            flush_session(st, k * SREC, o, out_end, lev)
    return m
