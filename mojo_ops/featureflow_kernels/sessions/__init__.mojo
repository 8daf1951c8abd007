"""Session windows (Spark's session_window): the entry point and its scratch.

Keyed input in ts order with a fixed gap and no std/var/count_distinct
takes an in-order pass without a grouping copy (`_in_order` with
first/last, `_by_close` without); count_distinct goes frame by frame
(`_generic`); everything else groups the rows by key (`order.group_rows`)
and aggregates each session over its contiguous rows here. The stream job's
session view resumes kept session states instead (`_resume`, their bookkeeping in
`_records`).
"""

from std.utils.numerics import isnan
from std.math import sqrt
from featureflow_kernels.abi import (
    A_STD,
    A_VAR,
    HEADER,
    I32P,
    I64P,
    f64p,
    i64p,
    read_columns,
    read_inputs,
    u8p,
)
from featureflow_kernels.buffers import Bump, put
from featureflow_kernels.order import group_rows
from featureflow_kernels.agg.outputs import outs_for, pack_levels
from featureflow_kernels.agg.contract import Running
from featureflow_kernels.agg.sums import two_sum
from featureflow_kernels.support import sessions_in_order_supported, stream_supported
from featureflow_kernels.sessions._generic import joins, sessions_generic
from featureflow_kernels.sessions._in_order import sessions_in_order
from featureflow_kernels.sessions._state import SREC
from featureflow_kernels.sessions._by_close import sessions_by_close
from featureflow_kernels.sessions._resume import R_COL, R_HEAD, resume_sessions
from featureflow_kernels.sessions._records import record_segments, splice_records


def sessions_in_order_scratch_bytes(n: Int, ngroups: Int) -> Int:
    """Scratch of `sessions_in_order` and `sessions_by_close` (the caller
    asks for it through the bindings): 64 bytes a key, 13 a row (level bytes; the close-order pass's
    permutation and scratch column, of which it touches one per session)."""
    return 8 * SREC * ngroups + (n + 7) // 8 * 8 + 12 * n + 64 * 6


def sessions_scratch_bytes(n: Int, ngroups: Int) -> Int:
    """Scratch the caller must pass to `sessions`."""
    return 8 * (2 * ngroups + 2) + 8 * 3 * n + (n + 7) // 8 * 8 + 64 * 8


def sessions(d: I64P) raises -> Int:
    """Descriptor: header, gap (ns; 0 with per-row gaps), per-row gap addr
    (int64 ns, 0: none), max length (ns; 0: none), naggs, out key codes (int32),
    out session starts, out session ends (int64 ns), then naggs columns
    (capacity n), then the scratch addr and bytes (`sessions_in_order_scratch_bytes`
    suffices for keyed input in ts order with a fixed gap and no
    std/var/count_distinct; otherwise it returns -1 unless it has
    `sessions_scratch_bytes`). Spark's session_window with a length cap: a key's
    rows in ts order; a row joins the open session when ts <= its end (the max of
    ts + gap over its rows) and, with a max length, ts - start <= max length
    (`joins`); else it opens a new one. Rows with a per-row gap must have
    gap > 0 (the caller drops the others). Returns the number of sessions.

    Sessions are disjoint, so each is aggregated directly over its contiguous
    rows (var/std two-pass around the compensated mean); outputs are written
    in order. count_distinct takes the frame-by-frame path."""
    var inp = read_inputs(d)
    var gap = Int(d[unsafe_offset=HEADER])
    var gap_addr = Int(d[unsafe_offset=HEADER + 1])
    var max_len = Int(d[unsafe_offset=HEADER + 2])
    var naggs = Int(d[unsafe_offset=HEADER + 3])
    var out_code = I32P(unsafe_from_address=Int(d[unsafe_offset=HEADER + 4]))
    var out_start = i64p(Int(d[unsafe_offset=HEADER + 5]))
    var out_end = i64p(Int(d[unsafe_offset=HEADER + 6]))
    var cols = read_columns(d, HEADER + 7, naggs)
    var n = inp.n
    if n == 0:
        return 0
    if not stream_supported(cols):
        return sessions_generic(d)
    var g = inp.ngroups if inp.codes != 0 else 1
    var scratch_addr = Int(d[unsafe_offset=HEADER + 7 + 4 * naggs])
    var scratch_size = Int(d[unsafe_offset=HEADER + 8 + 4 * naggs])
    var bump = Bump(scratch_addr, scratch_size)
    var fits = scratch_size >= sessions_in_order_scratch_bytes(n, g)
    if inp.codes != 0 and gap_addr == 0 and fits and sessions_in_order_supported(cols):
        var in_order = True
        for i in range(1, n):
            if inp.ts[unsafe_offset=i] < inp.ts[unsafe_offset=i - 1]:
                in_order = False
                break
        if in_order:
            var st = i64p(bump.take(8 * SREC * g))
            var lev = u8p(bump.take((n + 7) // 8 * 8))
            var o = outs_for(cols, 0, naggs, Int(lev))
            var m: Int
            if o.first == 0 and o.last == 0:
                var perm = I32P(unsafe_from_address=bump.take(4 * n))
                var tmp = bump.take(8 * n)
                m = sessions_by_close(
                    inp, gap, max_len, o, out_code, out_start, out_end, st, lev, perm, tmp
                )
            else:
                m = sessions_in_order(inp, gap, max_len, o, out_code, out_start, out_end, st, lev)
            for i in range(m, (m + 7) // 8 * 8):
                lev[unsafe_offset=i] = 0
            for ref c in cols:
                if c.valid != 0:
                    pack_levels(lev, m, False, u8p(c.valid))
            return m
    if scratch_size < sessions_scratch_bytes(n, g):
        return -1  # the caller passes `sessions_scratch_bytes` and calls again
    var gr = group_rows(inp, bump, gap_addr != 0)
    var npad = (n + 7) // 8 * 8
    var lev = u8p(bump.take(npad))
    var o = outs_for(cols, 0, naggs, Int(lev))
    var need_sq = o.std != 0 or o.var_ != 0
    var sts = gr.sts
    var sv = gr.sv
    var gaps = i64p(gap_addr if gap_addr != 0 else Int(inp.ts))
    var m = 0
    for k in range(g):
        var a = Int(gr.starts[unsafe_offset=k])
        var b = Int(gr.starts[unsafe_offset=k + 1])
        var p = a
        while p < b:
            var first = p
            var t0 = Int(sts[unsafe_offset=p])
            var row = Int(gr.perm[unsafe_offset=p]) if gr.has_perm else p
            var end = t0 + (gap if gap_addr == 0 else Int(gaps[unsafe_offset=row]))
            p += 1
            while p < b and joins(Int(sts[unsafe_offset=p]), t0, end, max_len):
                if gap_addr == 0:
                    end = max(end, Int(sts[unsafe_offset=p]) + gap)
                else:
                    row = Int(gr.perm[unsafe_offset=p]) if gr.has_perm else p
                    end = max(end, Int(sts[unsafe_offset=p]) + Int(gaps[unsafe_offset=row]))
                p += 1
            # aggregate the session's rows [first, p)
            var r = Running.empty()
            var fv = 0.0
            var lv = 0.0
            for q in range(first, p):
                var v = sv[unsafe_offset=q]
                if isnan(v):
                    continue
                if r.count() == 0:
                    fv = v
                lv = v
                r.add(v)
            var count = Int(r.count())
            var mean = r.total() / Float64(count) if count > 0 else 0.0
            var var_ = 0.0
            if need_sq and count > 1:
                var m2 = 0.0
                var m2c = 0.0
                for q in range(first, p):
                    var v = sv[unsafe_offset=q]
                    if not isnan(v):
                        var dv = v - mean
                        two_sum(m2, m2c, dv * dv)
                var_ = (m2 + m2c) / Float64(count - 1)
            out_code[unsafe_offset=m] = Int32(k)
            out_start[unsafe_offset=m] = Int64(t0)
            out_end[unsafe_offset=m] = Int64(end)
            r.emit(o, m, lev)
            if o.var_ != 0:
                f64p(o.var_)[unsafe_offset=m] = var_
            if o.std != 0:
                f64p(o.std)[unsafe_offset=m] = sqrt(var_)
            if o.first != 0:
                put(o.first, o.first_dt, m, fv)
            if o.last != 0:
                put(o.last, o.last_dt, m, lv)
            m += 1
    for i in range(m, (m + 7) // 8 * 8):
        lev[unsafe_offset=i] = 0
    for ref c in cols:
        if c.valid != 0:
            pack_levels(lev, m, c.agg == A_STD or c.agg == A_VAR, u8p(c.valid))
    return m
