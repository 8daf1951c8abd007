"""`Sliding`: every aggregate over frames whose bounds never decrease (rows
enter at hi and leave at lo), with a counting hash map for count_distinct.
The frame-by-frame path: hopping, count_distinct, sessions with count_distinct.
"""

from std.utils.numerics import isnan
from std.math import sqrt
from std.collections import Dict
from featureflow_kernels.abi import (
    A_COUNT,
    A_DISTINCT,
    A_FIRST,
    A_LAST,
    A_MAX,
    A_MEAN,
    A_MIN,
    A_STD,
    A_SUM,
    A_VAR,
    Column,
    F64P,
    I64P,
)
from featureflow_kernels.buffers import alloc_i64, set_valid, store
from featureflow_kernels.agg.contract import FrameAggregator
from featureflow_kernels.agg.deletable import (
    Moments,
    Sums,
    frame_add,
    frame_remove,
    moments_variance,
    sum_clear,
    sum_total,
)


struct Sliding(FrameAggregator, Movable):
    """Aggregates of svals[lo:hi) for frames whose bounds never decrease."""

    var svals: F64P
    var cols: List[Column]
    var need_sum: Bool
    var need_sq: Bool
    var need_min: Bool
    var need_max: Bool
    var need_first: Bool
    var need_last: Bool
    var need_distinct: Bool
    var lo: Int
    var hi: Int
    # the deletable half of the contract (agg/deletable): the count and the
    # compensated sum, the shifted moments of var/std
    var sums: Sums
    var moments: Moments
    var qmin: I64P
    var qmin_h: Int
    var qmin_t: Int
    var qmax: I64P
    var qmax_h: Int
    var qmax_t: Int
    var first: Int
    var last: Int
    var distinct: Dict[Int, Int]

    def __init__(
        out self,
        svals: F64P,
        n: Int,
        var cols: List[Column],
    ):
        self.svals = svals
        self.need_sum = False
        self.need_sq = False
        self.need_min = False
        self.need_max = False
        self.need_first = False
        self.need_last = False
        self.need_distinct = False
        for c in cols:
            if c.agg == A_SUM or c.agg == A_MEAN:
                self.need_sum = True
            elif c.agg == A_STD or c.agg == A_VAR:
                self.need_sq = True
            elif c.agg == A_MIN:
                self.need_min = True
            elif c.agg == A_MAX:
                self.need_max = True
            elif c.agg == A_FIRST:
                self.need_first = True
            elif c.agg == A_LAST:
                self.need_last = True
            elif c.agg == A_DISTINCT:
                self.need_distinct = True
        self.cols = cols^
        var qn = max(n, 1) if self.need_min else 1
        self.qmin = alloc_i64(qn)
        qn = max(n, 1) if self.need_max else 1
        self.qmax = alloc_i64(qn)
        self.distinct = Dict[Int, Int]()
        self.lo = 0
        self.hi = 0
        self.sums = Sums.empty()
        self.moments = Moments.empty()
        self.qmin_h = 0
        self.qmin_t = 0
        self.qmax_h = 0
        self.qmax_t = 0
        self.first = 0
        self.last = -1

    def __deinit__(deinit self):
        self.qmin.unsafe_free()
        self.qmax.unsafe_free()

    @always_inline
    def count(self) -> Int:
        """The frame's non-null (not NaN) rows."""
        return Int(self.sums.n)

    def reset(mut self, start: Int):
        """Start a new key whose rows begin at sorted position `start`."""
        self.lo = start
        self.hi = start
        sum_clear(self.sums)
        self.moments.clear()
        self.qmin_h = 0
        self.qmin_t = 0
        self.qmax_h = 0
        self.qmax_t = 0
        self.first = start
        self.last = start - 1
        if self.need_distinct:
            self.distinct.clear()

    def add(mut self, p: Int):
        var v = self.svals[unsafe_offset=p]
        if isnan(v):
            return
        frame_add(self.sums, self.moments, v, self.need_sum, self.need_sq)
        if self.need_min:
            while (
                self.qmin_t > self.qmin_h
                and self.svals[unsafe_offset=Int(self.qmin[unsafe_offset=self.qmin_t - 1])] >= v
            ):
                self.qmin_t -= 1
            self.qmin[unsafe_offset=self.qmin_t] = Int64(p)
            self.qmin_t += 1
        if self.need_max:
            while (
                self.qmax_t > self.qmax_h
                and self.svals[unsafe_offset=Int(self.qmax[unsafe_offset=self.qmax_t - 1])] <= v
            ):
                self.qmax_t -= 1
            self.qmax[unsafe_offset=self.qmax_t] = Int64(p)
            self.qmax_t += 1
        if self.need_last:
            self.last = p
        if self.need_distinct:
            var k = Int(bitcast_key(v))
            var c = self.distinct.get(k, 0)
            self.distinct[k] = c + 1

    def remove(mut self, p: Int):
        var v = self.svals[unsafe_offset=p]
        if isnan(v):
            return
        frame_remove(self.sums, self.moments, v, self.need_sum, self.need_sq)
        if self.need_distinct:
            var k = Int(bitcast_key(v))
            var c = self.distinct.get(k, 0)
            if c <= 1:
                _ = self.distinct.pop(k, 0)
            else:
                self.distinct[k] = c - 1

    def move_to(mut self, lo: Int, hi: Int):
        """Move the frame to [lo, hi); requires lo >= self.lo, hi >= self.hi."""
        while self.hi < hi:
            self.add(self.hi)
            self.hi += 1
        while self.lo < lo:
            self.remove(self.lo)
            self.lo += 1
        if self.need_min:
            while self.qmin_h < self.qmin_t and Int(self.qmin[unsafe_offset=self.qmin_h]) < lo:
                self.qmin_h += 1
        if self.need_max:
            while self.qmax_h < self.qmax_t and Int(self.qmax[unsafe_offset=self.qmax_h]) < lo:
                self.qmax_h += 1
        if self.need_first:
            if self.first < lo:
                self.first = lo
            while self.first < hi and isnan(self.svals[unsafe_offset=self.first]):
                self.first += 1

    def emit(self, row: Int):
        """Write the current frame's aggregates to output row `row`."""
        for ref c in self.cols:
            var has = True
            var v: Float64 = 0.0
            if c.agg == A_COUNT:
                v = Float64(self.count())
            elif c.agg == A_SUM:
                has = self.count() > 0
                v = sum_total(self.sums)
            elif c.agg == A_MEAN:
                has = self.count() > 0
                v = sum_total(self.sums) / Float64(self.count()) if has else 0.0
            elif c.agg == A_MIN:
                has = self.qmin_t > self.qmin_h
                if has:
                    v = self.svals[unsafe_offset=Int(self.qmin[unsafe_offset=self.qmin_h])]
            elif c.agg == A_MAX:
                has = self.qmax_t > self.qmax_h
                if has:
                    v = self.svals[unsafe_offset=Int(self.qmax[unsafe_offset=self.qmax_h])]
            elif c.agg == A_STD or c.agg == A_VAR:
                has = self.count() > 1
                if has:
                    v = moments_variance(self.moments, self.count())
                    if c.agg == A_STD:
                        v = sqrt(v)
            elif c.agg == A_FIRST:
                has = self.first < self.hi
                if has:
                    v = self.svals[unsafe_offset=self.first]
            elif c.agg == A_LAST:
                has = self.last >= self.lo
                if has:
                    v = self.svals[unsafe_offset=self.last]
            else:
                v = Float64(len(self.distinct))
            if has:
                store(c.data, c.dtype, row, v)
                if c.valid != 0:
                    set_valid(c.valid, row)
            else:
                store(c.data, c.dtype, row, 0.0)


@always_inline
def bitcast_key(v: Float64) -> UInt64:
    # -0.0 and 0.0 are the same value
    var x = v + 0.0
    return SIMD[DType.float64, 1](x).to_bits[DType.uint64]()
