"""Rolling over rows grouped by key: contiguous window passes (the path for
input not in ts order).

1. one read of the inputs scatters every row into its key's slot range
   (counting sort): sorted ts, float64 values (NaN = null) and the input row
   (perm); keys whose rows were not in ts order are then merge-sorted. Input
   already in ts order without keys is used in place (no copy, no perm).
2. per window and key, one pass over the contiguous rows: runs of equal ts
   share a frame, the frame's low end moves forward (two pointers); count,
   sum and var/std's shifted moments are the contract's deletable states in
   registers (agg/deletable.mojo: `Sums`, `Moments`), min/max come from
   monotonic deques, first/last from row positions. The pass is specialised at
   compile time on the aggregate families it needs.
3. results go straight to the caller's output rows (perm[q]); validity is
   written as one level byte min(count, 2) per row and packed into the
   bitmaps word-wise at the end, never bit by bit.
Scratch memory comes from the caller (one buffer from the Arrow pool, whose
pages are reused by the next call instead of being faulted in again).
"""

from std.utils.numerics import isnan
from std.math import sqrt
from featureflow_kernels.abi import (
    A_COUNT,
    A_MAX,
    A_MEAN,
    A_MIN,
    A_STD,
    A_SUM,
    A_VAR,
    Column,
    F64P,
    HEADER,
    I64P,
    U8P,
    f64p,
    i64p,
    read_columns,
    read_inputs,
    u8p,
)
from featureflow_kernels.buffers import Bump, floor_div, put
from featureflow_kernels.order import group_rows
from featureflow_kernels.agg.deletable import (
    Moments,
    Sums,
    moments_add,
    moments_remove,
    moments_variance,
    sum_add,
    sum_remove_or_clear,
    sum_total,
)
from featureflow_kernels.agg.outputs import Outs, outs_for, pack_levels
from featureflow_kernels.support import stream_supported
from featureflow_kernels.rolling._generic import rolling_generic


def window_pass[
    SUM: Bool, MINMAX: Bool, EXTRA: Bool
](
    sts: I64P,
    sv: F64P,
    a: Int,
    b: Int,
    width: Int,
    hop: Int,
    perm: I64P,
    has_perm: Bool,
    o: Outs,
    dqmin: I64P,
    dqmax: I64P,
    emit_from: Int,
):
    """Rolling aggregates of the rows [a, b) of one key (ts-sorted, contiguous);
    rows before `emit_from` only build up the state (a part's warm-up)."""
    var need_min = o.min != 0
    var need_max = o.max != 0
    var need_sq = o.std != 0 or o.var_ != 0
    var need_first = o.first != 0
    var need_last = o.last != 0
    var lo = a
    var p = a
    var acc = Sums.empty()  # the frame's count and sum, on the contract
    var mom = Moments.empty()  # var/std's shifted moments
    var qmin_h = 0
    var qmin_t = 0
    var qmax_h = 0
    var qmax_t = 0
    var first = a
    var last = a - 1
    while p < b:
        var t = Int(sts[unsafe_offset=p])
        var e = p + 1
        while e < b and Int(sts[unsafe_offset=e]) == t:
            e += 1
        # the run [p, e) enters
        for q in range(p, e):
            var v = sv[unsafe_offset=q]
            if isnan(v):
                continue
            sum_add[SUM](acc, v)
            comptime if MINMAX:
                if need_min:
                    while (
                        qmin_t > qmin_h
                        and sv[unsafe_offset=Int(dqmin[unsafe_offset=qmin_t - 1])] >= v
                    ):
                        qmin_t -= 1
                    dqmin[unsafe_offset=qmin_t] = Int64(q)
                    qmin_t += 1
                if need_max:
                    while (
                        qmax_t > qmax_h
                        and sv[unsafe_offset=Int(dqmax[unsafe_offset=qmax_t - 1])] <= v
                    ):
                        qmax_t -= 1
                    dqmax[unsafe_offset=qmax_t] = Int64(q)
                    qmax_t += 1
            comptime if EXTRA:
                if need_sq:
                    moments_add(mom, v)
                last = q
        # rows older than the frame leave
        var lower = t - width
        if hop > 0:
            lower = floor_div(lower, hop) * hop
        var lo0 = lo
        while Int(sts[unsafe_offset=lo]) < lower:
            var x = sv[unsafe_offset=lo]
            lo += 1
            if isnan(x):
                continue
            if sum_remove_or_clear[SUM](acc, x):
                # an empty frame: restart the sums exactly instead of carrying noise
                mom.clear()
            else:
                comptime if EXTRA:
                    if need_sq:
                        moments_remove(mom, x)
        comptime if MINMAX:
            if lo != lo0:
                while qmin_h < qmin_t and Int(dqmin[unsafe_offset=qmin_h]) < lo:
                    qmin_h += 1
                while qmax_h < qmax_t and Int(dqmax[unsafe_offset=qmax_h]) < lo:
                    qmax_h += 1
        comptime if EXTRA:
            if need_first:
                if first < lo:
                    first = lo
                while first < e and isnan(sv[unsafe_offset=first]):
                    first += 1
        # the frame's results, for every row of the run
        var count = Int(acc.count())
        var has = count > 0
        var rsum = 0.0
        var rmean = 0.0
        var rmin = 0.0
        var rmax = 0.0
        var rvar = 0.0
        var rstd = 0.0
        var rfirst = 0.0
        var rlast = 0.0
        if has:
            comptime if SUM:
                rsum = sum_total(acc)
                rmean = rsum / Float64(count)
            comptime if MINMAX:
                if need_min:
                    rmin = sv[unsafe_offset=Int(dqmin[unsafe_offset=qmin_h])]
                if need_max:
                    rmax = sv[unsafe_offset=Int(dqmax[unsafe_offset=qmax_h])]
            comptime if EXTRA:
                if need_sq and count > 1:
                    rvar = moments_variance(mom, count)
                    rstd = sqrt(rvar)
                if need_first:
                    rfirst = sv[unsafe_offset=first]
                if need_last and last >= lo:
                    rlast = sv[unsafe_offset=last]
        var level = UInt8(min(count, 2))
        for q in range(max(p, emit_from), e):
            var r = Int(perm[unsafe_offset=q]) if has_perm else q
            if o.count != 0:
                i64p(o.count)[unsafe_offset=r] = Int64(count)
            comptime if SUM:
                if o.sum != 0:
                    f64p(o.sum)[unsafe_offset=r] = rsum
                if o.mean != 0:
                    f64p(o.mean)[unsafe_offset=r] = rmean
            comptime if MINMAX:
                if need_min:
                    put(o.min, o.min_dt, r, rmin)
                if need_max:
                    put(o.max, o.max_dt, r, rmax)
            comptime if EXTRA:
                if o.var_ != 0:
                    f64p(o.var_)[unsafe_offset=r] = rvar
                if o.std != 0:
                    f64p(o.std)[unsafe_offset=r] = rstd
                if need_first:
                    put(o.first, o.first_dt, r, rfirst)
                if need_last:
                    put(o.last, o.last_dt, r, rlast)
            if o.lev != 0:
                u8p(o.lev)[unsafe_offset=r] = level
        p = e


def run_window(
    sum_: Bool,
    minmax: Bool,
    extra: Bool,
    sts: I64P,
    sv: F64P,
    a: Int,
    b: Int,
    width: Int,
    hop: Int,
    perm: I64P,
    has_perm: Bool,
    o: Outs,
    dqmin: I64P,
    dqmax: I64P,
    emit_from: Int,
):
    """Dispatch to the window_pass specialised for the needed aggregate families."""
    if sum_:
        if minmax:
            if extra:
                window_pass[True, True, True](
                    sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from
                )
            else:
                window_pass[True, True, False](
                    sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from
                )
        elif extra:
            window_pass[True, False, True](
                sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from
            )
        else:
            window_pass[True, False, False](
                sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from
            )
    elif minmax:
        if extra:
            window_pass[False, True, True](
                sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from
            )
        else:
            window_pass[False, True, False](
                sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from
            )
    elif extra:
        window_pass[False, False, True](
            sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from
        )
    else:
        window_pass[False, False, False](
            sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from
        )


comptime META = 16  # int64 words at the start of the scratch: the prepared layout


def rolling_scratch_bytes(n: Int, ngroups: Int, nwin: Int) -> Int:
    """Scratch the caller must pass to `rolling_prepare`."""
    var npad = (n + 7) // 8 * 8
    return 8 * META + 8 * (2 * ngroups + 2) + 8 * 3 * n + npad * nwin + 64 * 8


def deque_bytes(maxrun: Int) -> Int:
    """Deques each part of `rolling_part` needs: 16 bytes a row of the longest
    key (`rolling_prepare`'s answer)."""
    return 16 * max(maxrun, 1)


@fieldwise_init
struct Plan(Movable):
    """A prepared rolling call: descriptor fields plus the layout in the scratch."""

    var n: Int
    var g: Int
    var nwin: Int
    var hop: Int
    var naggs: Int
    var widths: I64P
    var cols: List[Column]
    var starts: I64P
    var perm: I64P
    var sts: I64P
    var sv: F64P
    var has_perm: Bool
    var maxrun: Int
    var lev: U8P
    var npad: Int
    var need_sum: Bool
    var need_minmax: Bool
    var need_extra: Bool
    var need_lev: Bool


def read_plan(d: I64P) -> Plan:
    """The plan `rolling_prepare` recorded (META words at the scratch start)."""
    var n = Int(d[unsafe_offset=0])
    var nwin = Int(d[unsafe_offset=HEADER])
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var m = i64p(Int(d[unsafe_offset=HEADER + 3]))
    var cols = read_columns(d, HEADER + 5 + nwin, nwin * naggs)
    var need_sum = False
    var need_minmax = False
    var need_extra = False
    var need_lev = False
    for ref c in cols:
        if c.agg == A_SUM or c.agg == A_MEAN:
            need_sum = True
        elif c.agg == A_MIN or c.agg == A_MAX:
            need_minmax = True
        elif c.agg != A_COUNT:
            need_extra = True
        if c.valid != 0:
            need_lev = True
    return Plan(
        n,
        Int(m[unsafe_offset=0]),
        nwin,
        Int(d[unsafe_offset=HEADER + 1]),
        naggs,
        d.unsafe_offset(HEADER + 5),
        cols^,
        i64p(Int(m[unsafe_offset=1])),
        i64p(Int(m[unsafe_offset=2])),
        i64p(Int(m[unsafe_offset=3])),
        f64p(Int(m[unsafe_offset=4])),
        m[unsafe_offset=5] != 0,
        Int(m[unsafe_offset=6]),
        u8p(Int(m[unsafe_offset=7])),
        (n + 7) // 8 * 8,
        need_sum,
        need_minmax,
        need_extra,
        need_lev,
    )


def rolling_prepare(d: I64P) raises -> Int:
    """Descriptor: header (see read_inputs), then nwin, hop (0: RANGE frame),
    naggs, scratch addr, scratch bytes, nwin window lengths (ns), then
    nwin * naggs columns (window-major). Frame of a row at time t: rows of its
    key with lower <= ts <= t, where lower = t - W, or
    floor((t - W) / hop) * hop with a hop.

    Groups the rows (see the section comment) into the scratch and records the
    layout there; `rolling_part` then computes the windows of its share of the
    keys (of the rows, unkeyed) and `rolling_finish` packs the validity.
    Returns the longest key's row count (each part needs 16 bytes per row of
    it for deques), or -1 when count_distinct made it compute everything here
    on the frame-by-frame path."""
    var inp = read_inputs(d)
    var nwin = Int(d[unsafe_offset=HEADER])
    var hop = Int(d[unsafe_offset=HEADER + 1])
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var scratch_addr = Int(d[unsafe_offset=HEADER + 3])
    var scratch_size = Int(d[unsafe_offset=HEADER + 4])
    var wat = HEADER + 5
    var n = inp.n
    if n == 0:
        return 0
    var cols = read_columns(d, wat + nwin, nwin * naggs)
    if not stream_supported(cols):
        _ = rolling_generic(inp, nwin, hop, naggs, d.unsafe_offset(wat), cols)
        return -1
    var keyed = inp.codes != 0
    var g = inp.ngroups if keyed else 1
    if scratch_size < rolling_scratch_bytes(n, g, nwin):
        raise Error("ValueError: internal: kernel scratch buffer too small")
    var bump = Bump(scratch_addr, scratch_size)
    var meta = i64p(bump.take(8 * META))
    var gr = group_rows(inp, bump)
    var starts = gr.starts
    var perm = gr.perm
    var sts = gr.sts
    var sv = gr.sv
    var has_perm = gr.has_perm
    var maxrun = gr.maxrun
    var npad = (n + 7) // 8 * 8
    var lev = u8p(bump.take(npad * nwin))
    for w in range(nwin):
        for i in range(n, npad):
            lev[unsafe_offset=w * npad + i] = 0
    meta[unsafe_offset=0] = Int64(g)
    meta[unsafe_offset=1] = Int64(Int(starts))
    meta[unsafe_offset=2] = Int64(Int(perm))
    meta[unsafe_offset=3] = Int64(Int(sts))
    meta[unsafe_offset=4] = Int64(Int(sv))
    meta[unsafe_offset=5] = Int64(1 if has_perm else 0)
    meta[unsafe_offset=6] = Int64(maxrun)
    meta[unsafe_offset=7] = Int64(Int(lev))
    return maxrun


def run_part(pl: Plan, part: Int, parts: Int, dq: I64P):
    """Windows of part `part` of `parts`: keyed, a contiguous range of keys
    holding about n / parts rows; unkeyed, a range of rows (cut between runs
    of equal ts), whose windows are warmed up from the first row they need."""
    var dqmin = dq
    var dqmax = dq.unsafe_offset(max(pl.maxrun, 1))
    var k0 = 0
    var k1 = pl.g
    var r0 = 0
    var r1 = pl.n
    if parts > 1:
        if pl.g > 1:
            # keys [k0, k1): those whose first row falls in this part's share
            k0 = pl.g
            k1 = pl.g
            var lo_row = pl.n * part // parts
            var hi_row = pl.n * (part + 1) // parts
            for k in range(pl.g):
                var a = Int(pl.starts[unsafe_offset=k])
                if a >= lo_row and k0 == pl.g:
                    k0 = k
                if a >= hi_row:
                    k1 = k
                    break
            if part == parts - 1:
                k1 = pl.g
            if k1 < k0:
                k1 = k0
        else:
            r0 = pl.n * part // parts
            r1 = pl.n * (part + 1) // parts
            # cut between runs of equal ts
            while r0 > 0 and r0 < pl.n and pl.sts[unsafe_offset=r0] == pl.sts[unsafe_offset=r0 - 1]:
                r0 += 1
            while r1 > 0 and r1 < pl.n and pl.sts[unsafe_offset=r1] == pl.sts[unsafe_offset=r1 - 1]:
                r1 += 1
    for w in range(pl.nwin):
        var width = Int(pl.widths[unsafe_offset=w])
        var lev = Int(pl.lev.unsafe_offset(w * pl.npad)) if pl.need_lev else 0
        var o = outs_for(pl.cols, w * pl.naggs, pl.naggs, lev)
        if o.count != 0:
            # with a count column, levels and means are derived from it in order
            # afterwards (rolling_finish): two fewer scattered writes per row
            o.lev = 0
            if o.sum != 0:
                o.mean = 0
        if pl.g > 1 or parts == 1:
            for k in range(k0, k1):
                var a = Int(pl.starts[unsafe_offset=k])
                var b = Int(pl.starts[unsafe_offset=k + 1])
                if a < b:
                    run_window(
                        pl.need_sum,
                        pl.need_minmax,
                        pl.need_extra,
                        pl.sts,
                        pl.sv,
                        a,
                        b,
                        width,
                        pl.hop,
                        pl.perm,
                        pl.has_perm,
                        o,
                        dqmin,
                        dqmax,
                        a,
                    )
        elif r0 < r1:
            # warm up from the first row in the frame of row r0
            var t = Int(pl.sts[unsafe_offset=r0])
            var lower = t - width
            if pl.hop > 0:
                lower = floor_div(lower, pl.hop) * pl.hop
            var lo = 0
            var hi = r0
            while lo < hi:
                var mid = (lo + hi) // 2
                if Int(pl.sts[unsafe_offset=mid]) < lower:
                    lo = mid + 1
                else:
                    hi = mid
            run_window(
                pl.need_sum,
                pl.need_minmax,
                pl.need_extra,
                pl.sts,
                pl.sv,
                lo,
                r1,
                width,
                pl.hop,
                pl.perm,
                pl.has_perm,
                o,
                dqmin,
                dqmax,
                r0,
            )


def rolling_part(d: I64P, part: Int, parts: Int, dq: I64P) raises:
    """Compute part `part` of `parts` of a prepared call (see rolling_prepare);
    `dq` addresses 16 * max(maxrun, 1) bytes of deques. Touches no Python
    object: the binding releases the GIL around it."""
    run_part(read_plan(d), part, parts, dq)


def rolling_finish(d: I64P) raises -> Int:
    """Pack the validity bitmaps of a prepared call from its level bytes."""
    var pl = read_plan(d)
    for w in range(pl.nwin):
        var o = outs_for(pl.cols, w * pl.naggs, pl.naggs, 0)
        if o.count == 0:
            continue
        var cnt = i64p(o.count)
        if pl.need_lev:
            var lev = pl.lev.unsafe_offset(w * pl.npad)
            for i in range(pl.n):
                lev[unsafe_offset=i] = UInt8(min(Int(cnt[unsafe_offset=i]), 2))
        if o.sum != 0 and o.mean != 0:
            var sm = f64p(o.sum)
            var mean = f64p(o.mean)
            for i in range(pl.n):
                var c = Int(cnt[unsafe_offset=i])
                mean[unsafe_offset=i] = sm[unsafe_offset=i] / Float64(c) if c > 0 else 0.0
    for c in range(len(pl.cols)):
        if pl.cols[c].valid != 0:
            var w = c // pl.naggs
            var two = pl.cols[c].agg == A_STD or pl.cols[c].agg == A_VAR
            pack_levels(pl.lev.unsafe_offset(w * pl.npad), pl.n, two, u8p(pl.cols[c].valid))
    return pl.n
