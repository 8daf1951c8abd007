# featureflow window kernels: rolling (RANGE and sawtooth), hopping and
# session aggregates over Arrow buffers passed by address.
#
# rolling and sessions (see their sections for details):
#   1. group (`group_rows`): one read of the inputs scatters ts, float64
#      values (NaN = null) and input row ids into each key's slot range (a
#      counting sort by dense key code); only keys whose rows were not in ts
#      order are then merge-sorted (stable: ties stay in input order).
#      Unkeyed input in ts order is read in place.
#   2. rolling: per window and key, one compile-time-specialised pass over the
#      contiguous rows (two pointers, compensated sums, monotonic deques),
#      results scattered once to the input rows; the keys (unkeyed: the rows)
#      are split into parts that run on two Python threads with the GIL
#      released. sessions: each session aggregated directly (disjoint frames).
#   3. validity is written as level bytes min(count, 2) and packed word-wise.
#   Scratch memory is allocated by the caller from the Arrow pool.
# hopping, and any call with count_distinct, use the frame-by-frame path:
# `order_rows` + `gather`, then `Sliding` (rows enter at hi and leave at lo,
# frames never move backwards) with a counting hash map for count_distinct.
#
# The Python side passes one int64 "descriptor" array (by address) that holds
# the sizes, buffer addresses and codes; its layout is documented at each
# entry point and mirrored in src/featureflow/ops/_native.py.

from std.os import abort
from std.python import Python, PythonObject
from std.python._cpython import GILReleased  # private: the only use is rolling_part
from std.python.bindings import PythonModuleBuilder
from std.collections import Dict
from std.utils.numerics import nan, isnan
from std.math import sqrt
from std.memory import alloc, bitcast

comptime I64P = Pointer[Int64, MutUntrackedOrigin]
comptime I32P = Pointer[Int32, MutUntrackedOrigin]
comptime F64P = Pointer[Float64, MutUntrackedOrigin]
comptime F32P = Pointer[Float32, MutUntrackedOrigin]
comptime U8P = Pointer[UInt8, MutUntrackedOrigin]

# value / output dtype codes (mirror _native.py)
comptime DT_F64 = 0
comptime DT_F32 = 1
comptime DT_I64 = 2
comptime DT_I32 = 3

# aggregate codes (mirror _native.py)
comptime A_COUNT = 0
comptime A_SUM = 1
comptime A_MEAN = 2
comptime A_MIN = 3
comptime A_MAX = 4
comptime A_STD = 5
comptime A_VAR = 6
comptime A_FIRST = 7
comptime A_LAST = 8
comptime A_DISTINCT = 9


@always_inline
def i64p(addr: Int) -> I64P:
    return I64P(unsafe_from_address=addr)


@always_inline
def f64p(addr: Int) -> F64P:
    return F64P(unsafe_from_address=addr)


@always_inline
def u8p(addr: Int) -> U8P:
    return U8P(unsafe_from_address=addr)


def alloc_i64(n: Int) -> I64P:
    """An uninitialised int64 buffer of max(n, 1) elements; free with unsafe_free."""
    return alloc[Int64](max(n, 1))


def alloc_f64(n: Int) -> F64P:
    return alloc[Float64](max(n, 1))


@always_inline
def floor_div(a: Int, b: Int) -> Int:
    """Floor division (Python semantics) for b > 0."""
    var q = a // b
    return q


# ---------------------------------------------------------------------------
# 1. order
# ---------------------------------------------------------------------------


@fieldwise_init
struct Order(Movable):
    """Rows in key/ts order: perm[unsafe_offset=p] is the input row at sorted position p;
    key g owns sorted positions [starts[unsafe_offset=g], starts[unsafe_offset=g + 1])."""

    var perm: I64P
    var starts: I64P
    var ngroups: Int

    def __deinit__(deinit self):
        self.perm.unsafe_free()
        self.starts.unsafe_free()


def merge_sort_by_ts(
    perm: I64P,
    scratch: I64P,
    a: Int,
    b: Int,
    ts: I64P,
):
    """Stable bottom-up merge sort of perm[unsafe_offset=a:b] by ts[perm[unsafe_offset=.]]."""
    var n = b - a
    # insertion sort runs of 32 first: cheap and cache friendly
    comptime RUN = 32
    var s = a
    while s < b:
        var e = min(s + RUN, b)
        for i in range(s + 1, e):
            var v = perm[unsafe_offset=i]
            var tv = ts[unsafe_offset=Int(v)]
            var j = i - 1
            while j >= s and ts[unsafe_offset=Int(perm[unsafe_offset=j])] > tv:
                perm[unsafe_offset=j + 1] = perm[unsafe_offset=j]
                j -= 1
            perm[unsafe_offset=j + 1] = v
        s = e
    var width = RUN
    var src = perm
    var dst = scratch
    var in_scratch = False
    while width < n:
        var lo = a
        while lo < b:
            var mid = min(lo + width, b)
            var hi = min(lo + 2 * width, b)
            var i = lo
            var j = mid
            var k = lo
            while i < mid and j < hi:
                if ts[unsafe_offset=Int(src[unsafe_offset=j])] < ts[unsafe_offset=Int(src[unsafe_offset=i])]:
                    dst[unsafe_offset=k] = src[unsafe_offset=j]
                    j += 1
                else:
                    dst[unsafe_offset=k] = src[unsafe_offset=i]
                    i += 1
                k += 1
            while i < mid:
                dst[unsafe_offset=k] = src[unsafe_offset=i]
                i += 1
                k += 1
            while j < hi:
                dst[unsafe_offset=k] = src[unsafe_offset=j]
                j += 1
                k += 1
            lo = hi
        var t = src
        src = dst
        dst = t
        in_scratch = not in_scratch
        width *= 2
    if in_scratch:
        for i in range(a, b):
            perm[unsafe_offset=i] = scratch[unsafe_offset=i]


def order_rows(n: Int, ts: I64P, codes_addr: Int, ngroups: Int) -> Order:
    """Stable counting sort by key code, then ts order inside each key."""
    var g = ngroups if codes_addr != 0 else 1
    var perm = alloc_i64(max(n, 1))
    var starts = alloc_i64(g + 1)
    if codes_addr == 0:
        for i in range(n):
            perm[unsafe_offset=i] = Int64(i)
        starts[unsafe_offset=0] = 0
        starts[unsafe_offset=1] = Int64(n)
    else:
        var codes = I32P(unsafe_from_address=codes_addr)
        for k in range(g + 1):
            starts[unsafe_offset=k] = 0
        for i in range(n):
            starts[unsafe_offset=Int(codes[unsafe_offset=i]) + 1] += 1
        for k in range(g):
            starts[unsafe_offset=k + 1] += starts[unsafe_offset=k]
        # starts[unsafe_offset=k] is now the first slot of key k; use a cursor copy
        var cursor = alloc_i64(max(g, 1))
        for k in range(g):
            cursor[unsafe_offset=k] = starts[unsafe_offset=k]
        for i in range(n):
            var c = Int(codes[unsafe_offset=i])
            perm[unsafe_offset=Int(cursor[unsafe_offset=c])] = Int64(i)
            cursor[unsafe_offset=c] += 1
        cursor.unsafe_free()
    # sort only the keys whose rows are not already in ts order
    var scratch = Optional[I64P](None)
    for k in range(g):
        var a = Int(starts[unsafe_offset=k])
        var b = Int(starts[unsafe_offset=k + 1])
        var sorted = True
        for p in range(a + 1, b):
            if ts[unsafe_offset=Int(perm[unsafe_offset=p])] < ts[unsafe_offset=Int(perm[unsafe_offset=p - 1])]:
                sorted = False
                break
        if not sorted:
            if not scratch:
                scratch = alloc_i64(max(n, 1))
            merge_sort_by_ts(perm, scratch.value(), a, b, ts)
    if scratch:
        scratch.value().unsafe_free()
    return Order(perm, starts, g)


# ---------------------------------------------------------------------------
# 2. gather
# ---------------------------------------------------------------------------


@always_inline
def load_value(vaddr: Int, dtype: Int, i: Int) -> Float64:
    if dtype == DT_F64:
        return F64P(unsafe_from_address=vaddr)[unsafe_offset=i]
    if dtype == DT_F32:
        return Float64(F32P(unsafe_from_address=vaddr)[unsafe_offset=i])
    if dtype == DT_I64:
        return Float64(I64P(unsafe_from_address=vaddr)[unsafe_offset=i])
    return Float64(I32P(unsafe_from_address=vaddr)[unsafe_offset=i])


def gather(
    n: Int,
    perm: I64P,
    ts: I64P,
    vaddr: Int,
    dtype: Int,
    valid_addr: Int,
    valid_off: Int,
    sts: I64P,
    svals: F64P,
):
    """Sorted ts and float64 values (null and NaN both become NaN)."""
    var nanv = nan[DType.float64]()
    for p in range(n):
        var i = Int(perm[unsafe_offset=p])
        sts[unsafe_offset=p] = ts[unsafe_offset=i]
    if vaddr == 0:
        for p in range(n):
            svals[unsafe_offset=p] = 0.0
        return
    for p in range(n):
        var i = Int(perm[unsafe_offset=p])
        var v = load_value(vaddr, dtype, i)
        if valid_addr != 0:
            var bit = valid_off + i
            var byte = U8P(unsafe_from_address=valid_addr)[unsafe_offset=bit >> 3]
            if ((byte >> UInt8(bit & 7)) & 1) == 0:
                v = nanv
        svals[unsafe_offset=p] = v


# ---------------------------------------------------------------------------
# 3./4. sliding aggregates over monotone frames
# ---------------------------------------------------------------------------


@always_inline
def store(addr: Int, dtype: Int, row: Int, v: Float64):
    if dtype == DT_F64:
        F64P(unsafe_from_address=addr)[unsafe_offset=row] = v
    elif dtype == DT_F32:
        F32P(unsafe_from_address=addr)[unsafe_offset=row] = Float32(v)
    elif dtype == DT_I64:
        I64P(unsafe_from_address=addr)[unsafe_offset=row] = Int64(v)
    else:
        I32P(unsafe_from_address=addr)[unsafe_offset=row] = Int32(v)


@always_inline
def set_valid(addr: Int, row: Int):
    var p = U8P(unsafe_from_address=addr)
    p[unsafe_offset=row >> 3] = p[unsafe_offset=row >> 3] | (UInt8(1) << UInt8(row & 7))


@fieldwise_init
struct Column(Copyable, Movable):
    var agg: Int
    var data: Int
    var valid: Int  # 0 when the column has no validity bitmap (count)
    var dtype: Int


struct Sliding(Movable):
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
    var count: Int
    # Neumaier-compensated sums; s1/s2 are of (x - shift) for var/std
    var sum: Float64
    var sum_c: Float64
    var shift: Float64
    var s1: Float64
    var s1_c: Float64
    var s2: Float64
    var s2_c: Float64
    var shift_set: Bool
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
        self.count = 0
        self.sum = 0.0
        self.sum_c = 0.0
        self.shift = 0.0
        self.s1 = 0.0
        self.s1_c = 0.0
        self.s2 = 0.0
        self.s2_c = 0.0
        self.shift_set = False
        self.qmin_h = 0
        self.qmin_t = 0
        self.qmax_h = 0
        self.qmax_t = 0
        self.first = 0
        self.last = -1

    def __deinit__(deinit self):
        self.qmin.unsafe_free()
        self.qmax.unsafe_free()

    def reset(mut self, start: Int):
        """Start a new key whose rows begin at sorted position `start`."""
        self.lo = start
        self.hi = start
        self.count = 0
        self.sum = 0.0
        self.sum_c = 0.0
        self.s1 = 0.0
        self.s1_c = 0.0
        self.s2 = 0.0
        self.s2_c = 0.0
        self.shift_set = False
        self.qmin_h = 0
        self.qmin_t = 0
        self.qmax_h = 0
        self.qmax_t = 0
        self.first = start
        self.last = start - 1
        if self.need_distinct:
            self.distinct.clear()

    @always_inline
    @staticmethod
    def kadd(mut s: Float64, mut c: Float64, x: Float64):
        """Neumaier compensated s += x (c carries the lost low bits)."""
        var t = s + x
        if abs(s) >= abs(x):
            c += (s - t) + x
        else:
            c += (x - t) + s
        s = t

    def add(mut self, p: Int):
        var v = self.svals[unsafe_offset=p]
        if isnan(v):
            return
        self.count += 1
        if self.need_sum:
            Self.kadd(self.sum, self.sum_c, v)
        if self.need_sq:
            if not self.shift_set:
                # shifting by a value of the data keeps s2 - s1^2/n free of
                # catastrophic cancellation when values share a large offset
                self.shift = v
                self.shift_set = True
            var d = v - self.shift
            Self.kadd(self.s1, self.s1_c, d)
            Self.kadd(self.s2, self.s2_c, d * d)
        if self.need_min:
            while self.qmin_t > self.qmin_h and self.svals[unsafe_offset=Int(self.qmin[unsafe_offset=self.qmin_t - 1])] >= v:
                self.qmin_t -= 1
            self.qmin[unsafe_offset=self.qmin_t] = Int64(p)
            self.qmin_t += 1
        if self.need_max:
            while self.qmax_t > self.qmax_h and self.svals[unsafe_offset=Int(self.qmax[unsafe_offset=self.qmax_t - 1])] <= v:
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
        self.count -= 1
        if self.count == 0:
            # an empty frame: restart sums exactly instead of carrying noise
            self.sum = 0.0
            self.sum_c = 0.0
            self.s1 = 0.0
            self.s1_c = 0.0
            self.s2 = 0.0
            self.s2_c = 0.0
            self.shift_set = False
        else:
            if self.need_sum:
                Self.kadd(self.sum, self.sum_c, -v)
            if self.need_sq:
                var d = v - self.shift
                Self.kadd(self.s1, self.s1_c, -d)
                Self.kadd(self.s2, self.s2_c, -(d * d))
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
                v = Float64(self.count)
            elif c.agg == A_SUM:
                has = self.count > 0
                v = self.sum + self.sum_c
            elif c.agg == A_MEAN:
                has = self.count > 0
                v = (self.sum + self.sum_c) / Float64(self.count) if has else 0.0
            elif c.agg == A_MIN:
                has = self.qmin_t > self.qmin_h
                if has:
                    v = self.svals[unsafe_offset=Int(self.qmin[unsafe_offset=self.qmin_h])]
            elif c.agg == A_MAX:
                has = self.qmax_t > self.qmax_h
                if has:
                    v = self.svals[unsafe_offset=Int(self.qmax[unsafe_offset=self.qmax_h])]
            elif c.agg == A_STD or c.agg == A_VAR:
                has = self.count > 1
                if has:
                    var nn = Float64(self.count)
                    var s1 = self.s1 + self.s1_c
                    var s2 = self.s2 + self.s2_c
                    v = (s2 - s1 * s1 / nn) / (nn - 1.0)
                    if v < 0.0:
                        v = 0.0
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


# ---------------------------------------------------------------------------
# descriptor helpers
# ---------------------------------------------------------------------------


@fieldwise_init
struct Inputs(Movable):
    var n: Int
    var ts: I64P
    var vaddr: Int
    var dtype: Int
    var valid_addr: Int
    var valid_off: Int
    var codes: Int
    var ngroups: Int


comptime HEADER = 8


def read_inputs(d: I64P) -> Inputs:
    """Descriptor words 0..7: n, ts addr, values addr (0: none), value dtype,
    values validity addr (0: none), validity bit offset, int32 key codes
    addr (0: unkeyed), number of keys."""
    return Inputs(
        Int(d[unsafe_offset=0]),
        I64P(unsafe_from_address=Int(d[unsafe_offset=1])),
        Int(d[unsafe_offset=2]),
        Int(d[unsafe_offset=3]),
        Int(d[unsafe_offset=4]),
        Int(d[unsafe_offset=5]),
        Int(d[unsafe_offset=6]),
        Int(d[unsafe_offset=7]),
    )


def read_columns(d: I64P, at: Int, count: Int) -> List[Column]:
    """`count` columns of 4 words each: agg code, data addr, validity addr, dtype."""
    var cols = List[Column]()
    for c in range(count):
        var b = at + 4 * c
        cols.append(
            Column(
                Int(d[unsafe_offset=b]),
                Int(d[unsafe_offset=b + 1]),
                Int(d[unsafe_offset=b + 2]),
                Int(d[unsafe_offset=b + 3]),
            )
        )
    return cols^


def clear_validity(cols: List[Column], rows: Int):
    for ref c in cols:
        if c.valid != 0:
            var p = U8P(unsafe_from_address=c.valid)
            for i in range((rows + 7) // 8):
                p[unsafe_offset=i] = 0


@fieldwise_init
struct Sorted(Movable):
    var order: Order
    var sts: I64P
    var svals: F64P

    def __deinit__(deinit self):
        self.sts.unsafe_free()
        self.svals.unsafe_free()


def sort_inputs(inp: Inputs) -> Sorted:
    var order = order_rows(inp.n, inp.ts, inp.codes, inp.ngroups)
    var sts = alloc_i64(max(inp.n, 1))
    var svals = alloc_f64(max(inp.n, 1))
    gather(
        inp.n, order.perm, inp.ts, inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, sts, svals
    )
    return Sorted(order^, sts, svals)


# ---------------------------------------------------------------------------
# rolling
# ---------------------------------------------------------------------------


def rolling_generic(
    inp: Inputs, nwin: Int, hop: Int, naggs: Int, widths: I64P, all_cols: List[Column]
) raises -> PythonObject:
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
    return PythonObject(n)


# ---------------------------------------------------------------------------
# rolling: grouped, contiguous window passes
# ---------------------------------------------------------------------------
#
# 1. one read of the inputs scatters every row into its key's slot range
#    (counting sort): sorted ts, float64 values (NaN = null) and the input row
#    (perm); keys whose rows were not in ts order are then merge-sorted. Input
#    already in ts order without keys is used in place (no copy, no perm).
# 2. per window and key, one pass over the contiguous rows: runs of equal ts
#    share a frame, the frame's low end moves forward (two pointers), sums are
#    Neumaier-compensated (var/std: of values shifted by one of the frame's
#    values), min/max come from monotonic deques. The pass is specialised at
#    compile time on the aggregate families it needs.
# 3. results go straight to the caller's output rows (perm[q]); validity is
#    written as one level byte min(count, 2) per row and packed into the
#    bitmaps word-wise at the end, never bit by bit.
# Scratch memory comes from the caller (one buffer from the Arrow pool, whose
# pages are reused by the next call instead of being faulted in again).


struct Bump(Movable):
    """Carves 64-byte-aligned pieces out of the caller's scratch buffer."""

    var at: Int
    var end: Int

    def __init__(out self, addr: Int, size: Int):
        self.at = addr
        self.end = addr + size

    def take(mut self, nbytes: Int) raises -> Int:
        var a = (self.at + 63) // 64 * 64
        if a + max(nbytes, 8) > self.end:
            raise Error("ValueError: internal: kernel scratch buffer too small")
        self.at = a + max(nbytes, 8)
        return a


@always_inline
def load_valid(vaddr: Int, dtype: Int, valid_addr: Int, valid_off: Int, i: Int) -> Float64:
    """Value i as float64, NaN when null."""
    var v = load_value(vaddr, dtype, i)
    if valid_addr != 0:
        var bit = valid_off + i
        if ((u8p(valid_addr)[unsafe_offset=bit >> 3] >> UInt8(bit & 7)) & 1) == 0:
            return nan[DType.float64]()
    return v


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


@always_inline
def put(addr: Int, dtype: Int, row: Int, v: Float64):
    if dtype == DT_F64:
        f64p(addr)[unsafe_offset=row] = v
    else:
        store(addr, dtype, row, v)


def window_pass[SUM: Bool, MINMAX: Bool, EXTRA: Bool](
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
    var count = 0
    var s = 0.0
    var sc = 0.0
    var shift = 0.0
    var shift_set = False
    var s1 = 0.0
    var s1c = 0.0
    var s2 = 0.0
    var s2c = 0.0
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
            count += 1
            comptime if SUM:
                Sliding.kadd(s, sc, v)
            comptime if MINMAX:
                if need_min:
                    while qmin_t > qmin_h and sv[unsafe_offset=Int(dqmin[unsafe_offset=qmin_t - 1])] >= v:
                        qmin_t -= 1
                    dqmin[unsafe_offset=qmin_t] = Int64(q)
                    qmin_t += 1
                if need_max:
                    while qmax_t > qmax_h and sv[unsafe_offset=Int(dqmax[unsafe_offset=qmax_t - 1])] <= v:
                        qmax_t -= 1
                    dqmax[unsafe_offset=qmax_t] = Int64(q)
                    qmax_t += 1
            comptime if EXTRA:
                if need_sq:
                    if not shift_set:
                        # shifting by a value of the data keeps s2 - s1^2/n free of
                        # catastrophic cancellation when values share a large offset
                        shift = v
                        shift_set = True
                    var d = v - shift
                    Sliding.kadd(s1, s1c, d)
                    Sliding.kadd(s2, s2c, d * d)
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
            count -= 1
            if count == 0:
                # an empty frame: restart the sums exactly instead of carrying noise
                s = 0.0
                sc = 0.0
                s1 = 0.0
                s1c = 0.0
                s2 = 0.0
                s2c = 0.0
                shift_set = False
            else:
                comptime if SUM:
                    Sliding.kadd(s, sc, -x)
                comptime if EXTRA:
                    if need_sq:
                        var d = x - shift
                        Sliding.kadd(s1, s1c, -d)
                        Sliding.kadd(s2, s2c, -(d * d))
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
                rsum = s + sc
                rmean = rsum / Float64(count)
            comptime if MINMAX:
                if need_min:
                    rmin = sv[unsafe_offset=Int(dqmin[unsafe_offset=qmin_h])]
                if need_max:
                    rmax = sv[unsafe_offset=Int(dqmax[unsafe_offset=qmax_h])]
            comptime if EXTRA:
                if need_sq and count > 1:
                    var nn = Float64(count)
                    var t1 = s1 + s1c
                    var t2 = s2 + s2c
                    rvar = (t2 - t1 * t1 / nn) / (nn - 1.0)
                    if rvar < 0.0:
                        rvar = 0.0
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
                window_pass[True, True, True](sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from)
            else:
                window_pass[True, True, False](sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from)
        elif extra:
            window_pass[True, False, True](sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from)
        else:
            window_pass[True, False, False](sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from)
    elif minmax:
        if extra:
            window_pass[False, True, True](sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from)
        else:
            window_pass[False, True, False](sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from)
    elif extra:
        window_pass[False, False, True](sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from)
    else:
        window_pass[False, False, False](sts, sv, a, b, width, hop, perm, has_perm, o, dqmin, dqmax, emit_from)


def pack_levels(lev: U8P, n: Int, need_two: Bool, dst: U8P):
    """Validity bits from level bytes (0, 1, 2; padded with 0 to a multiple of 8):
    bit i = level_i >= 1 (>= 2 for std/var), LSB first, 8 rows per step."""
    for b in range((n + 7) // 8):
        var x = bitcast[DType.uint64, 1](lev.unsafe_load[width=8](8 * b))
        var m = (x >> 1) if need_two else (x | (x >> 1))
        m = m & 0x0101010101010101
        dst[unsafe_offset=b] = UInt8((m * 0x0102040810204080) >> 56)


def stream_supported(cols: List[Column]) -> Bool:
    for ref c in cols:
        if c.agg == A_DISTINCT:
            return False
    return True


comptime META = 16  # int64 words at the start of the scratch: the prepared layout


def rolling_scratch_bytes(n: Int, ngroups: Int, nwin: Int) -> Int:
    """Scratch the caller must pass to `rolling_prepare` (mirrored in _native.py)."""
    var npad = (n + 7) // 8 * 8
    return 8 * META + 8 * (2 * ngroups + 2) + 8 * 3 * n + npad * nwin + 64 * 8


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


@fieldwise_init
struct Grouped(Movable):
    """Rows grouped by key in ts order (see `group_rows`); all in the scratch."""

    var starts: I64P
    var perm: I64P
    var sts: I64P
    var sv: F64P
    var has_perm: Bool
    var maxrun: Int


def group_rows(inp: Inputs, mut bump: Bump) raises -> Grouped:
    """Key k's rows at sorted positions [starts[k], starts[k + 1]) in ts order
    (ties in input order): their ts (sts), float64 values with NaN for null
    (sv) and input rows (perm). Unkeyed input in ts order is used in place
    (has_perm False: position = row; sv converted only when not float64
    without nulls). Needs 8 * (2 * keys + 2) + 24 * n bytes (+ alignment)."""
    var n = inp.n
    var keyed = inp.codes != 0
    var g = inp.ngroups if keyed else 1
    var ts = inp.ts
    var starts = i64p(bump.take(8 * (g + 1)))
    var sts = ts
    var sv = f64p(inp.vaddr)
    var perm = ts  # unused unless has_perm
    var has_perm = False
    if keyed:
        var codes = I32P(unsafe_from_address=inp.codes)
        var cursor = i64p(bump.take(8 * g))
        perm = i64p(bump.take(8 * n))
        sts = i64p(bump.take(8 * n))
        sv = f64p(bump.take(8 * n))
        has_perm = True
        for k in range(g + 1):
            starts[unsafe_offset=k] = 0
        for i in range(n):
            starts[unsafe_offset=Int(codes[unsafe_offset=i]) + 1] += 1
        for k in range(g):
            starts[unsafe_offset=k + 1] += starts[unsafe_offset=k]
            cursor[unsafe_offset=k] = starts[unsafe_offset=k]
        # one read of the inputs: every row to its key's next slot
        for i in range(n):
            var c = Int(codes[unsafe_offset=i])
            var p = Int(cursor[unsafe_offset=c])
            cursor[unsafe_offset=c] = Int64(p + 1)
            perm[unsafe_offset=p] = Int64(i)
            sts[unsafe_offset=p] = ts[unsafe_offset=i]
            sv[unsafe_offset=p] = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i)
    else:
        starts[unsafe_offset=0] = 0
        starts[unsafe_offset=1] = Int64(n)
        var in_order = True
        for i in range(1, n):
            if ts[unsafe_offset=i] < ts[unsafe_offset=i - 1]:
                in_order = False
                break
        if not in_order:
            perm = i64p(bump.take(8 * n))
            sts = i64p(bump.take(8 * n))
            has_perm = True
            for i in range(n):
                perm[unsafe_offset=i] = Int64(i)
                sts[unsafe_offset=i] = ts[unsafe_offset=i]
        if not in_order or inp.dtype != DT_F64 or inp.valid_addr != 0:
            sv = f64p(bump.take(8 * n))
            for i in range(n):
                sv[unsafe_offset=i] = load_valid(
                    inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i
                )
    # keys whose rows were not in ts order: stable sort, then gather them again
    var maxrun = 0
    if has_perm:
        var msort = Optional[I64P](None)
        for k in range(g):
            var a = Int(starts[unsafe_offset=k])
            var b = Int(starts[unsafe_offset=k + 1])
            maxrun = max(maxrun, b - a)
            var sorted = True
            for p in range(a + 1, b):
                if sts[unsafe_offset=p] < sts[unsafe_offset=p - 1]:
                    sorted = False
                    break
            if not sorted:
                if not msort:
                    msort = alloc_i64(n)
                merge_sort_by_ts(perm, msort.value(), a, b, ts)
                for p in range(a, b):
                    var i = Int(perm[unsafe_offset=p])
                    sts[unsafe_offset=p] = ts[unsafe_offset=i]
                    sv[unsafe_offset=p] = load_valid(
                        inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i
                    )
        if msort:
            msort.value().unsafe_free()
    else:
        maxrun = n
    return Grouped(starts, perm, sts, sv, has_perm, maxrun)


def rolling_prepare(desc: PythonObject) raises -> PythonObject:
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
    var d = i64p(Int(py=desc))
    var inp = read_inputs(d)
    var nwin = Int(d[unsafe_offset=HEADER])
    var hop = Int(d[unsafe_offset=HEADER + 1])
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var scratch_addr = Int(d[unsafe_offset=HEADER + 3])
    var scratch_size = Int(d[unsafe_offset=HEADER + 4])
    var wat = HEADER + 5
    var n = inp.n
    if n == 0:
        return PythonObject(0)
    var cols = read_columns(d, wat + nwin, nwin * naggs)
    if not stream_supported(cols):
        _ = rolling_generic(inp, nwin, hop, naggs, d.unsafe_offset(wat), cols)
        return PythonObject(-1)
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
    return PythonObject(maxrun)


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
                        pl.need_sum, pl.need_minmax, pl.need_extra, pl.sts, pl.sv, a, b, width,
                        pl.hop, pl.perm, pl.has_perm, o, dqmin, dqmax, a,
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
                pl.need_sum, pl.need_minmax, pl.need_extra, pl.sts, pl.sv, lo, r1, width,
                pl.hop, pl.perm, pl.has_perm, o, dqmin, dqmax, r0,
            )


def rolling_part(desc: PythonObject, part: PythonObject, parts: PythonObject, dq: PythonObject) raises -> PythonObject:
    """Compute part `part` of `parts` of a prepared call (see rolling_prepare)
    with the GIL released; `dq` addresses 16 * max(maxrun, 1) bytes of deques."""
    var d = i64p(Int(py=desc))
    var pl = read_plan(d)
    var p = Int(py=part)
    var ps = Int(py=parts)
    var q = i64p(Int(py=dq))
    with GILReleased(Python()):
        run_part(pl, p, ps, q)
    return PythonObject(0)


def rolling_finish(desc: PythonObject) raises -> PythonObject:
    """Pack the validity bitmaps of a prepared call from its level bytes."""
    var d = i64p(Int(py=desc))
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
    return PythonObject(pl.n)


# ---------------------------------------------------------------------------
# hopping
# ---------------------------------------------------------------------------


def hopping(desc: PythonObject) raises -> PythonObject:
    """Descriptor: header, size, step, naggs, count_only, capacity, out key
    codes (int32), out window starts, out window ends (int64 ns), then naggs
    columns. Windows are [start, start + size) with start a multiple of step
    (Spark's window()); one output row per (key, window) holding a row, in key
    then start order. Returns the number of windows; with count_only nothing
    is written (the caller sizes the outputs with it)."""
    var d = i64p(Int(py=desc))
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
        return PythonObject(0)
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
    return PythonObject(m)


# ---------------------------------------------------------------------------
# sessions
# ---------------------------------------------------------------------------


def sessions_generic(desc: PythonObject) raises -> PythonObject:
    """Descriptor: header, gap (ns; 0 with per-row gaps), per-row gap addr
    (int64 ns, 0: none), naggs, out key codes (int32), out session starts,
    out session ends (int64 ns), then naggs columns (capacity n).
    Spark's session_window: a key's rows in ts order; a row joins the open
    session when ts <= its end (the max of ts + gap over its rows), else it
    opens a new one. Rows with a per-row gap must have gap > 0 (the caller
    drops the others). Returns the number of sessions."""
    var d = i64p(Int(py=desc))
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
        return PythonObject(0)
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
            var end = t0 + (gap if gap_addr == 0 else Int(gaps[unsafe_offset=Int(perm[unsafe_offset=p])]))
            p += 1
            while p < b and Int(sts[unsafe_offset=p]) <= end:
                var row_gap = gap if gap_addr == 0 else Int(gaps[unsafe_offset=Int(perm[unsafe_offset=p])])
                end = max(end, Int(sts[unsafe_offset=p]) + row_gap)
                p += 1
            sl.move_to(first, p)
            sl.emit(m)
            out_code[unsafe_offset=m] = Int32(g)
            out_start[unsafe_offset=m] = Int64(t0)
            out_end[unsafe_offset=m] = Int64(end)
            m += 1
    return PythonObject(m)


def sessions_scratch_bytes(n: Int, ngroups: Int) -> Int:
    """Scratch the caller must pass to `sessions` (mirrored in _native.py)."""
    return 8 * (2 * ngroups + 2) + 8 * 3 * n + (n + 7) // 8 * 8 + 64 * 8


def sessions(desc: PythonObject) raises -> PythonObject:
    """Descriptor: header, gap (ns; 0 with per-row gaps), per-row gap addr
    (int64 ns, 0: none), naggs, out key codes (int32), out session starts,
    out session ends (int64 ns), then naggs columns (capacity n), then the
    scratch addr and bytes. Spark's session_window: a key's rows in ts order;
    a row joins the open session when ts <= its end (the max of ts + gap over
    its rows), else it opens a new one. Rows with a per-row gap must have
    gap > 0 (the caller drops the others). Returns the number of sessions.

    Sessions are disjoint, so each is aggregated directly over its contiguous
    rows (var/std two-pass around the compensated mean); outputs are written
    in order. count_distinct takes the frame-by-frame path."""
    var d = i64p(Int(py=desc))
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
        return PythonObject(0)
    if not stream_supported(cols):
        return sessions_generic(desc)
    var g = inp.ngroups if inp.codes != 0 else 1
    var scratch_addr = Int(d[unsafe_offset=HEADER + 6 + 4 * naggs])
    var scratch_size = Int(d[unsafe_offset=HEADER + 7 + 4 * naggs])
    if scratch_size < sessions_scratch_bytes(n, g):
        raise Error("ValueError: internal: kernel scratch buffer too small")
    var bump = Bump(scratch_addr, scratch_size)
    var gr = group_rows(inp, bump)
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
            while p < b and Int(sts[unsafe_offset=p]) <= end:
                if gap_addr == 0:
                    end = max(end, Int(sts[unsafe_offset=p]) + gap)
                else:
                    row = Int(gr.perm[unsafe_offset=p]) if gr.has_perm else p
                    end = max(end, Int(sts[unsafe_offset=p]) + Int(gaps[unsafe_offset=row]))
                p += 1
            # aggregate the session's rows [first, p)
            var count = 0
            var sm = 0.0
            var sc = 0.0
            var mn = 0.0
            var mx = 0.0
            var fv = 0.0
            var lv = 0.0
            for q in range(first, p):
                var v = sv[unsafe_offset=q]
                if isnan(v):
                    continue
                if count == 0:
                    mn = v
                    mx = v
                    fv = v
                else:
                    mn = min(mn, v)
                    mx = max(mx, v)
                lv = v
                count += 1
                Sliding.kadd(sm, sc, v)
            var total = sm + sc
            var mean = total / Float64(count) if count > 0 else 0.0
            var var_ = 0.0
            if need_sq and count > 1:
                var m2 = 0.0
                var m2c = 0.0
                for q in range(first, p):
                    var v = sv[unsafe_offset=q]
                    if not isnan(v):
                        var dv = v - mean
                        Sliding.kadd(m2, m2c, dv * dv)
                var_ = (m2 + m2c) / Float64(count - 1)
            out_code[unsafe_offset=m] = Int32(k)
            out_start[unsafe_offset=m] = Int64(t0)
            out_end[unsafe_offset=m] = Int64(end)
            if o.count != 0:
                i64p(o.count)[unsafe_offset=m] = Int64(count)
            if o.sum != 0:
                f64p(o.sum)[unsafe_offset=m] = total if count > 0 else 0.0
            if o.mean != 0:
                f64p(o.mean)[unsafe_offset=m] = mean
            if o.min != 0:
                put(o.min, o.min_dt, m, mn)
            if o.max != 0:
                put(o.max, o.max_dt, m, mx)
            if o.var_ != 0:
                f64p(o.var_)[unsafe_offset=m] = var_
            if o.std != 0:
                f64p(o.std)[unsafe_offset=m] = sqrt(var_)
            if o.first != 0:
                put(o.first, o.first_dt, m, fv)
            if o.last != 0:
                put(o.last, o.last_dt, m, lv)
            lev[unsafe_offset=m] = UInt8(min(count, 2))
            m += 1
    for i in range(m, (m + 7) // 8 * 8):
        lev[unsafe_offset=i] = 0
    for ref c in cols:
        if c.valid != 0:
            pack_levels(lev, m, c.agg == A_STD or c.agg == A_VAR, u8p(c.valid))
    return PythonObject(m)


# ---------------------------------------------------------------------------
# integer keys -> dense codes
# ---------------------------------------------------------------------------


def encode_int_keys(desc: PythonObject) raises -> PythonObject:
    """Descriptor: n, int64 keys addr, lowest key, span (highest - lowest + 1),
    int32 table addr (span slots, scratch), int32 codes out addr, int64 first
    rows out addr (min(n, span) slots). Codes are numbered in order of first
    occurrence (as Arrow's dictionary_encode does), through a direct table
    indexed by key - lowest: no hashing. Returns the number of distinct keys."""
    var d = i64p(Int(py=desc))
    var n = Int(d[unsafe_offset=0])
    var keys = i64p(Int(d[unsafe_offset=1]))
    var lowest = d[unsafe_offset=2]
    var span = Int(d[unsafe_offset=3])
    var table = I32P(unsafe_from_address=Int(d[unsafe_offset=4]))
    var codes = I32P(unsafe_from_address=Int(d[unsafe_offset=5]))
    var first = i64p(Int(d[unsafe_offset=6]))
    for j in range(span):
        table[unsafe_offset=j] = -1
    var g = 0
    for i in range(n):
        var j = Int(keys[unsafe_offset=i] - lowest)
        var c = Int(table[unsafe_offset=j])
        if c < 0:
            c = g
            table[unsafe_offset=j] = Int32(c)
            first[unsafe_offset=c] = Int64(i)
            g += 1
        codes[unsafe_offset=i] = Int32(c)
    return PythonObject(g)


@export
def PyInit_kernels() abi("C") -> PythonObject:
    try:
        var m = PythonModuleBuilder("kernels")
        m.def_function[rolling_prepare](
            "rolling_prepare", docstring="Rolling windows, step 1: group rows; see kernels.mojo."
        )
        m.def_function[rolling_part](
            "rolling_part", docstring="Rolling windows, step 2: one part; see kernels.mojo."
        )
        m.def_function[rolling_finish](
            "rolling_finish", docstring="Rolling windows, step 3: validity; see kernels.mojo."
        )
        m.def_function[hopping]("hopping", docstring="Hopping windows; see kernels.mojo.")
        m.def_function[sessions]("sessions", docstring="Session windows; see kernels.mojo.")
        m.def_function[encode_int_keys](
            "encode_int_keys", docstring="Dense codes of integer keys; see kernels.mojo."
        )
        return m.finalize()
    except e:
        abort(String("featureflow: failed to create the kernels module: ", e))
