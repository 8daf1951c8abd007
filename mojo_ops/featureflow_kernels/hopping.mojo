"""Hopping windows (Spark's window()): [start, start + size) with start a
multiple of step, one output row per (key, window) holding a row, computed
frame by frame with `Sliding` over the rows sorted by key then ts.
"""

from featureflow_kernels.abi import HEADER, I32P, I64P, i64p, read_columns, read_inputs
from featureflow_kernels.buffers import clear_validity, floor_div
from featureflow_kernels.order import sort_inputs
from featureflow_kernels.agg.sliding import Sliding


def hopping(d: I64P) raises -> Int:
    """Descriptor: header, size, step, naggs, count_only, capacity, out key
    codes (int32), out window starts, out window ends (int64 ns), then naggs
    columns. Windows are [start, start + size) with start a multiple of step
    (Spark's window()); one output row per (key, window) holding a row, in key
    then start order. Returns the number of windows; with count_only nothing
    is written (the caller sizes the outputs with it)."""
    var inp = read_inputs(d)
    var size = Int(d[unsafe_offset=HEADER])
    var step = Int(d[unsafe_offset=HEADER + 1])
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var count_only = d[unsafe_offset=HEADER + 3] != 0
    var capacity = Int(d[unsafe_offset=HEADER + 4])
    var out_code = I32P(unsafe_from_address=Int(d[unsafe_offset=HEADER + 5]))
    var out_start = i64p(Int(d[unsafe_offset=HEADER + 6]))
    var out_end = i64p(Int(d[unsafe_offset=HEADER + 7]))
    var cols = read_columns(d, HEADER + 8, naggs)
    if inp.n == 0:
        return 0
    var s = sort_inputs(inp)
    var sts = s.sts
    if not count_only:
        clear_validity(cols, capacity)
    var sl = Sliding(s.svals, inp.n, cols^)
    var m = 0
    for g in range(s.order.ngroups):
        var a = Int(s.order.starts[unsafe_offset=g])
        var b = Int(s.order.starts[unsafe_offset=g + 1])
        if a == b:
            continue
        sl.reset(a)
        var lo = a
        var hi = a
        # first start whose window [start, start + size) holds sts[a]
        var start = floor_div(Int(sts[unsafe_offset=a]) - size, step) * step + step
        while lo < b:
            while lo < b and Int(sts[unsafe_offset=lo]) < start:
                lo += 1
            if lo == b:
                break
            if hi < lo:
                hi = lo
            while hi < b and Int(sts[unsafe_offset=hi]) < start + size:
                hi += 1
            if hi > lo:
                if not count_only:
                    if m >= capacity:
                        raise Error("ValueError: hopping: output capacity exceeded")
                    sl.move_to(lo, hi)
                    sl.emit(m)
                    out_code[unsafe_offset=m] = Int32(g)
                    out_start[unsafe_offset=m] = Int64(start)
                    out_end[unsafe_offset=m] = Int64(start + size)
                m += 1
                start += step
            else:
                # empty window: jump to the first start that holds sts[lo]
                var t = Int(sts[unsafe_offset=lo])
                start = max(start + step, floor_div(t - size, step) * step + step)
    return m
