"""Keyed sessions over input in ts order without first/last, written as they
close.

Without first/last, the sessions are not counted ahead: one pass writes each
session to the outputs when it closes (sequentially, in close order, which is
start order within a key), counting each key's sessions; then the outputs are
put in key order by a counting sort of the sessions alone (about one row in
eight on the benchmark), one column at a time through a scratch column.
"""

from std.utils.numerics import isnan
from std.sys.intrinsics import prefetch, PrefetchOptions
from featureflow_kernels.abi import I32P, I64P, Inputs, U8P, f64p, i64p
from featureflow_kernels.buffers import dtype_width, load_valid, put
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.agg.sums import two_sum
from featureflow_kernels.rolling._region import PF
from featureflow_kernels.sessions._in_order import SREC


comptime NO_END = Int64.MIN  # a key state's end when it has no open session


@always_inline
def close_session(
    st: I64P,
    s: Int,
    c: Int,
    j: Int,
    o: Outs,
    out_code: I32P,
    out_start: I64P,
    out_end: I64P,
    lev: U8P,
):
    """Write key c's open session (state at word s) as output j, and count it."""
    var sf = f64p(Int(st))
    var count = Int(st[unsafe_offset=s + 2])
    var has = count > 0
    var total = sf[unsafe_offset=s + 3] + sf[unsafe_offset=s + 4]
    out_code[unsafe_offset=j] = Int32(c)
    out_start[unsafe_offset=j] = st[unsafe_offset=s]
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
    lev[unsafe_offset=j] = UInt8(min(count, 2))
    st[unsafe_offset=s + 7] += 1


def permute_column(addr: Int, width: Int, perm: I32P, m: Int, tmp: Int):
    """Move element j of the column at addr (width 1, 4 or 8 bytes) to perm[j],
    through the scratch column at tmp."""
    if width == 8:
        permute_as[DType.int64](addr, perm, m, tmp)
    elif width == 4:
        permute_as[DType.int32](addr, perm, m, tmp)
    else:
        permute_as[DType.uint8](addr, perm, m, tmp)


def permute_as[dt: DType](addr: Int, perm: I32P, m: Int, tmp: Int):
    var col = Pointer[Scalar[dt], MutUntrackedOrigin](unsafe_from_address=addr)
    var aside = Pointer[Scalar[dt], MutUntrackedOrigin](unsafe_from_address=tmp)
    for j in range(m):
        aside[unsafe_offset=Int(perm[unsafe_offset=j])] = col[unsafe_offset=j]
    for j in range(m):
        col[unsafe_offset=j] = aside[unsafe_offset=j]


def sessions_by_close(
    inp: Inputs,
    gap: Int,
    max_len: Int,
    o: Outs,
    out_code: I32P,
    out_start: I64P,
    out_end: I64P,
    st: I64P,
    lev: U8P,
    perm: I32P,
    tmp: Int,
) -> Int:
    """Keyed ts-ordered sessions without first/last (see the comment above); `st`
    holds 8 * SREC bytes a key (start, end (NO_END: none open), count, sum, sum
    compensation, min, max, sessions closed), `perm` 4 bytes and `tmp` 8 bytes a
    session. A row opens a session past the open one's end or, with a max length
    (`max_len` > 0, ns), when ts - start > max_len. Returns the number of sessions."""
    var n = inp.n
    var g = inp.ngroups
    var ts = inp.ts
    var codes = I32P(unsafe_from_address=inp.codes)
    var sf = f64p(Int(st))
    for k in range(g):
        st[unsafe_offset=k * SREC + 1] = NO_END
        st[unsafe_offset=k * SREC + 7] = 0
    var m = 0
    for i in range(n):
        if i + PF < n:
            prefetch[PrefetchOptions().for_write()](
                st.unsafe_offset(Int(codes[unsafe_offset=i + PF]) * SREC)
            )
        var c = Int(codes[unsafe_offset=i])
        var s = c * SREC
        var t = ts[unsafe_offset=i]
        var end = st[unsafe_offset=s + 1]
        var too_long = max_len != 0 and t - st[unsafe_offset=s] > Int64(max_len)
        if end == NO_END or t > end or too_long:
            if end != NO_END:
                close_session(st, s, c, m, o, out_code, out_start, out_end, lev)
                m += 1
            st[unsafe_offset=s] = t
            st[unsafe_offset=s + 2] = 0
            sf[unsafe_offset=s + 3] = 0.0
            sf[unsafe_offset=s + 4] = 0.0
        st[unsafe_offset=s + 1] = t + Int64(gap)
        var v = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i)
        if isnan(v):
            continue
        var count = Int(st[unsafe_offset=s + 2])
        if count == 0:
            sf[unsafe_offset=s + 5] = v
            sf[unsafe_offset=s + 6] = v
        else:
            sf[unsafe_offset=s + 5] = min(sf[unsafe_offset=s + 5], v)
            sf[unsafe_offset=s + 6] = max(sf[unsafe_offset=s + 6], v)
        st[unsafe_offset=s + 2] = Int64(count + 1)
        var sm = sf[unsafe_offset=s + 3]
        var sc = sf[unsafe_offset=s + 4]
        two_sum(sm, sc, v)
        sf[unsafe_offset=s + 3] = sm
        sf[unsafe_offset=s + 4] = sc
    for k in range(g):
        if st[unsafe_offset=k * SREC + 1] != NO_END:
            close_session(st, k * SREC, k, m, o, out_code, out_start, out_end, lev)
            m += 1
    # key order: each key's first output position (word 0), then each session's
    var at = 0
    for k in range(g):
        var c = Int(st[unsafe_offset=k * SREC + 7])
        st[unsafe_offset=k * SREC] = Int64(at)
        at += c
    for j in range(m):
        var s = Int(out_code[unsafe_offset=j]) * SREC
        var p = st[unsafe_offset=s]
        perm[unsafe_offset=j] = Int32(p)
        st[unsafe_offset=s] = p + 1
    permute_column(Int(out_code), 4, perm, m, tmp)
    permute_column(Int(out_start), 8, perm, m, tmp)
    permute_column(Int(out_end), 8, perm, m, tmp)
    permute_column(Int(lev), 1, perm, m, tmp)
    for col in [o.count, o.sum, o.mean]:
        if col != 0:
            permute_column(col, 8, perm, m, tmp)
    if o.min != 0:
        permute_column(o.min, dtype_width(o.min_dt), perm, m, tmp)
    if o.max != 0:
        permute_column(o.max, dtype_width(o.max_dt), perm, m, tmp)
    return m
