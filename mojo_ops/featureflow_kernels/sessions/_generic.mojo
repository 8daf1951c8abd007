"""Sessions frame by frame with `Sliding`: the path for count_distinct.
"""

from featureflow_kernels.abi import HEADER, I32P, I64P, i64p, read_columns, read_inputs
from featureflow_kernels.buffers import clear_validity
from featureflow_kernels.order import sort_inputs
from featureflow_kernels.agg.sliding import Sliding


def sessions_generic(d: I64P) raises -> Int:
    """Descriptor: header, gap (ns; 0 with per-row gaps), per-row gap addr
    (int64 ns, 0: none), naggs, out key codes (int32), out session starts,
    out session ends (int64 ns), then naggs columns (capacity n).
    Spark's session_window: a key's rows in ts order; a row joins the open
    session when ts <= its end (the max of ts + gap over its rows), else it
    opens a new one. Rows with a per-row gap must have gap > 0 (the caller
    drops the others). Returns the number of sessions."""
    var inp = read_inputs(d)
    var gap = Int(d[unsafe_offset=HEADER])
    var gap_addr = Int(d[unsafe_offset=HEADER + 1])
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var out_code = I32P(unsafe_from_address=Int(d[unsafe_offset=HEADER + 3]))
    var out_start = i64p(Int(d[unsafe_offset=HEADER + 4]))
    var out_end = i64p(Int(d[unsafe_offset=HEADER + 5]))
    var cols = read_columns(d, HEADER + 6, naggs)
    var n = inp.n
    if n == 0:
        return 0
    var s = sort_inputs(inp)
    var sts = s.sts
    var perm = s.order.perm
    clear_validity(cols, n)
    var sl = Sliding(s.svals, n, cols^)
    var gaps = i64p(gap_addr if gap_addr != 0 else Int(d[unsafe_offset=1]))
    var m = 0
    for g in range(s.order.ngroups):
        var a = Int(s.order.starts[unsafe_offset=g])
        var b = Int(s.order.starts[unsafe_offset=g + 1])
        if a == b:
            continue
        sl.reset(a)
        var p = a
        while p < b:
            var first = p
            var t0 = Int(sts[unsafe_offset=p])
            var end = t0 + (
                gap if gap_addr == 0 else Int(gaps[unsafe_offset=Int(perm[unsafe_offset=p])])
            )
            p += 1
            while p < b and Int(sts[unsafe_offset=p]) <= end:
                var row_gap = gap if gap_addr == 0 else Int(
                    gaps[unsafe_offset=Int(perm[unsafe_offset=p])]
                )
                end = max(end, Int(sts[unsafe_offset=p]) + row_gap)
                p += 1
            sl.move_to(first, p)
            sl.emit(m)
            out_code[unsafe_offset=m] = Int32(g)
            out_start[unsafe_offset=m] = Int64(t0)
            out_end[unsafe_offset=m] = Int64(end)
            m += 1
    return m
