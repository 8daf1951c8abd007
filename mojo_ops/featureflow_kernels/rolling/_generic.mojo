"""Rolling frame by frame with `Sliding` over rows sorted by key then ts: the
path for count_distinct.
"""

from featureflow_kernels.abi import Column, I64P, Inputs
from featureflow_kernels.buffers import clear_validity, floor_div
from featureflow_kernels.order import sort_inputs
from featureflow_kernels.agg.sliding import Sliding


def rolling_generic(
    inp: Inputs, nwin: Int, hop: Int, naggs: Int, widths: I64P, all_cols: List[Column]
) raises -> Int:
    """The frame-by-frame path, used for count_distinct (see `rolling`)."""
    var n = inp.n
    var s = sort_inputs(inp)
    var perm = s.order.perm
    var starts = s.order.starts
    var sts = s.sts
    for w in range(nwin):
        var width = Int(widths[unsafe_offset=w])
        var cols = List[Column]()
        for c in range(w * naggs, (w + 1) * naggs):
            cols.append(all_cols[c].copy())
        clear_validity(cols, n)
        var sl = Sliding(s.svals, n, cols^)
        for g in range(s.order.ngroups):
            var a = Int(starts[unsafe_offset=g])
            var b = Int(starts[unsafe_offset=g + 1])
            sl.reset(a)
            var lo = a
            var p = a
            while p < b:
                var t = Int(sts[unsafe_offset=p])
                # the run of rows sharing ts t all see the same frame
                var e = p + 1
                while e < b and Int(sts[unsafe_offset=e]) == t:
                    e += 1
                var lower = t - width
                if hop > 0:
                    lower = floor_div(lower, hop) * hop
                while lo < e and Int(sts[unsafe_offset=lo]) < lower:
                    lo += 1
                sl.move_to(lo, e)
                for q in range(p, e):
                    sl.emit(Int(perm[unsafe_offset=q]))
                p = e
    return n
