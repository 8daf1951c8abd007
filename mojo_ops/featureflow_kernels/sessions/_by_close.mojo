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
from featureflow_kernels.abi import I32P, I64P, Inputs, U8P
from featureflow_kernels.buffers import dtype_width, load_valid
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.rolling._region import PF
from featureflow_kernels.sessions._state import SREC, SessionKey, SessionKeys


comptime NO_END = Int64.MIN  # a key state's end when it has no open session


@always_inline
def close_session(
    ks: SessionKey,
    c: Int,
    j: Int,
    o: Outs,
    out_code: I32P,
    out_start: I64P,
    out_end: I64P,
    lev: U8P,
):
    """Write key c's open session as output j, and count it."""
    out_code[unsafe_offset=j] = Int32(c)
    out_start[unsafe_offset=j] = ks.head()
    out_end[unsafe_offset=j] = ks.end()
    ks.emit(o, j, lev)
    ks.set_closed(ks.closed() + 1)


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
    holds 8 * SREC bytes a key (`SessionKey`: head the open session's start,
    end NO_END when none is open, word 7 the sessions closed), `perm` 4 bytes and `tmp` 8 bytes a
    session. A row opens a session past the open one's end or, with a max length
    (`max_len` > 0, ns), when ts - start > max_len. Returns the number of sessions."""
    if max_len != 0:
        return by_close[True](
            inp, gap, max_len, o, out_code, out_start, out_end, st, lev, perm, tmp
        )
    return by_close[False](inp, gap, max_len, o, out_code, out_start, out_end, st, lev, perm, tmp)


def by_close[
    CAPPED: Bool
](
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
    """`sessions_by_close`, compiled for one of capped (`max_len` > 0) or not:
    the uncapped loop keeps no max length in a register."""
    var n = inp.n
    var g = inp.ngroups
    var ts = inp.ts
    var codes = I32P(unsafe_from_address=inp.codes)
    var keys = SessionKeys.of(st)
    for k in range(g):
        keys.key(k).set_end(NO_END)
        keys.key(k).set_closed(0)
    var m = 0
    for i in range(n):
        if i + PF < n:
            prefetch[PrefetchOptions().for_write()](
                st.unsafe_offset(Int(codes[unsafe_offset=i + PF]) * SREC)
            )
        var c = Int(codes[unsafe_offset=i])
        var ks = keys.key(c)
        var t = ts[unsafe_offset=i]
        var end = ks.end()
        var too_long = False
        comptime if CAPPED:
            too_long = t - ks.head() > Int64(max_len)
        if end == NO_END or t > end or too_long:
            if end != NO_END:
                close_session(ks, c, m, o, out_code, out_start, out_end, lev)
                m += 1
            ks.set_head(t)
            ks.open()
        ks.set_end(t + Int64(gap))
        var v = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i)
        if isnan(v):
            continue
        ks.add(v)
    for k in range(g):
        if keys.key(k).end() != NO_END:
            close_session(keys.key(k), k, m, o, out_code, out_start, out_end, lev)
            m += 1
    # key order: each key's first output position (head), then each session's
    var at = 0
    for k in range(g):
        var c = keys.key(k).closed()
        keys.key(k).set_head(Int64(at))
        at += Int(c)
    for j in range(m):
        var ks = keys.key(Int(out_code[unsafe_offset=j]))
        var p = ks.head()
        perm[unsafe_offset=j] = Int32(p)
        ks.set_head(p + 1)
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
