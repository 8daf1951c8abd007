"""Sessions frame by frame with `Sliding`: the path for count_distinct.
"""

from featureflow_kernels.abi import HEADER, I32P, I64P, i64p, read_columns, read_inputs
from featureflow_kernels.buffers import clear_validity
from featureflow_kernels.order import sort_inputs
from featureflow_kernels.agg.sliding import Sliding


@always_inline
def joins(t: Int, start: Int, end: Int, max_len: Int) -> Bool:
    """Whether a row at `t` joins the open session that started at `start` and
    ends at `end` (inclusive; ns): t <= end and, with a max length (`max_len` > 0),
    t - start <= max_len. A session is never longer than `max_len`: the row that
    would make it longer (t - start > max_len, strictly) opens the next one."""
    return t <= end and (max_len == 0 or t - start <= max_len)


def sessions_generic(d: I64P) raises -> Int:
    """Descriptor: header, gap (ns; 0 with per-row gaps), per-row gap addr
    (int64 ns, 0: none), max length (ns; 0: none), naggs, out key codes (int32),
    out session starts, out session ends (int64 ns), then naggs columns
    (capacity n). Spark's session_window with a length cap: a key's rows in ts
    order; a row joins the open session when `joins` (ts <= its end, the max of
    ts + gap over its rows, and ts - start <= max length), else it opens a new one. Rows with a per-row gap must have gap > 0 (the caller
    drops the others). Returns the number of sessions."""
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
            while p < b and joins(Int(sts[unsafe_offset=p]), t0, end, max_len):
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
