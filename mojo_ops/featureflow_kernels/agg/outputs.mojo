"""The output columns of one window (`Outs`, by aggregate) and validity
packing from level bytes (`pack_levels`).
"""

from std.memory import bitcast
from featureflow_kernels.abi import (
    A_COUNT,
    A_FIRST,
    A_LAST,
    A_MAX,
    A_MEAN,
    A_MIN,
    A_STD,
    A_SUM,
    A_VAR,
    Column,
    U8P,
)


@fieldwise_init
struct Outs(Copyable, Movable):
    """One window's output addresses by aggregate (0: not requested) and dtypes."""

    var count: Int
    var sum: Int
    var mean: Int
    var min: Int
    var min_dt: Int
    var max: Int
    var max_dt: Int
    var std: Int
    var var_: Int
    var first: Int
    var first_dt: Int
    var last: Int
    var last_dt: Int
    var lev: Int


def outs_for(cols: List[Column], c0: Int, naggs: Int, lev: Int) -> Outs:
    var o = Outs(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, lev)
    for c in range(c0, c0 + naggs):
        var agg = cols[c].agg
        var data = cols[c].data
        var dt = cols[c].dtype
        if agg == A_COUNT:
            o.count = data
        elif agg == A_SUM:
            o.sum = data
        elif agg == A_MEAN:
            o.mean = data
        elif agg == A_MIN:
            o.min = data
            o.min_dt = dt
        elif agg == A_MAX:
            o.max = data
            o.max_dt = dt
        elif agg == A_STD:
            o.std = data
        elif agg == A_VAR:
            o.var_ = data
        elif agg == A_FIRST:
            o.first = data
            o.first_dt = dt
        elif agg == A_LAST:
            o.last = data
            o.last_dt = dt
    return o^


def pack_levels(lev: U8P, n: Int, need_two: Bool, dst: U8P):
    """Validity bits from level bytes (0, 1, 2; padded with 0 to a multiple of 8):
    bit i = level_i >= 1 (>= 2 for std/var), LSB first, 8 rows per step."""
    for b in range((n + 7) // 8):
        var x = bitcast[DType.uint64, 1](lev.unsafe_load[width=8](8 * b))
        var m = (x >> 1) if need_two else (x | (x >> 1))
        m = m & 0x0101010101010101
        dst[unsafe_offset=b] = UInt8((m * 0x0102040810204080) >> 56)
