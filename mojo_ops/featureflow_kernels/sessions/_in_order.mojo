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
from featureflow_kernels.abi import I32P, I64P, Inputs, U8P
from featureflow_kernels.buffers import load_valid, put
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.rolling._region import PF
from featureflow_kernels.sessions._state import SREC, SessionKey, SessionKeys


@always_inline
def flush_session(ks: SessionKey, o: Outs, out_end: I64P, lev: U8P):
    """Write the key's open session to its slot."""
    var j = Int(ks.head())
    var has = ks.count() > 0
    out_end[unsafe_offset=j] = ks.end()
    ks.emit(o, j, lev)
    if o.last != 0:
        put(o.last, o.last_dt, j, ks.last() if has else 0.0)
    if o.first != 0 and not has:
        put(o.first, o.first_dt, j, 0.0)


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
    bytes a key (`SessionKey`). A row opens a session past the open one's end or, with a max
    length (`max_len` > 0, ns), when ts - start > max_len: pass 1 keeps the open
    session's start in word 2, pass 2 reads it from `out_start`. Returns the
    number of sessions."""
    var n = inp.n
    var g = inp.ngroups
    var ts = inp.ts
    var codes = I32P(unsafe_from_address=inp.codes)
    var keys = SessionKeys.of(st)
    for k in range(g):
        keys.key(k).set_head(0)
    for i in range(n):
        if i + PF < n:
            prefetch[PrefetchOptions().for_write()](
                st.unsafe_offset(Int(codes[unsafe_offset=i + PF]) * SREC)
            )
        var ks = keys.key(Int(codes[unsafe_offset=i]))
        var t = ts[unsafe_offset=i]
        if (
            ks.head() == 0
            or t > ks.end()
            or (max_len != 0 and t - ks.counted_start() > Int64(max_len))
        ):
            ks.set_head(ks.head() + 1)
            ks.set_counted_start(t)
        ks.set_end(t + Int64(gap))
    var m = 0
    for k in range(g):
        var c = Int(keys.key(k).head())
        keys.key(k).set_head(Int64(-1 - m))
        m += c
    for i in range(n):
        if i + PF < n:
            prefetch[PrefetchOptions().for_write()](
                st.unsafe_offset(Int(codes[unsafe_offset=i + PF]) * SREC)
            )
        var c = Int(codes[unsafe_offset=i])
        var ks = keys.key(c)
        var t = ts[unsafe_offset=i]
        var j = Int(ks.head())
        if (
            j < 0
            or t > ks.end()
            or (max_len != 0 and t - out_start[unsafe_offset=j] > Int64(max_len))
        ):
            if j < 0:
                j = -1 - j
            else:
                flush_session(ks, o, out_end, lev)
                j += 1
            ks.set_head(Int64(j))
            ks.open()
            out_code[unsafe_offset=j] = Int32(c)
            out_start[unsafe_offset=j] = t
        ks.set_end(t + Int64(gap))
        var v = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i)
        if isnan(v):
            continue
        if ks.count() == 0 and o.first != 0:
            put(o.first, o.first_dt, j, v)
        ks.set_last(v)
        ks.add(v)
    for k in range(g):
        if keys.key(k).head() >= 0:
            flush_session(keys.key(k), o, out_end, lev)
    return m
