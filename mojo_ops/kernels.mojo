# featureflow window kernels: rolling (RANGE and sawtooth), hopping and
# session aggregates over Arrow buffers passed by address.
#
# rolling over input already in ts order (the stream case; see "rolling over
# input in ts order") reads the inputs in order and writes every output row in
# order: keyed count/sum/mean/min/max through key buckets (partition, windows
# per bucket in cache, gather back), other keyed aggregates through per-key
# slots, unkeyed in place. Otherwise:
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
from std.utils.numerics import inf, nan, isnan
from std.math import fma, sqrt
from std.memory import alloc, bitcast
from std.sys.intrinsics import prefetch, PrefetchOptions

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
            add_square(self.s2, self.s2_c, d, 1.0)
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
                add_square(self.s2, self.s2_c, d, -1.0)
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
                    v = sample_variance(self.s1, self.s1_c, self.s2, self.s2_c, self.count)
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
                    add_square(s2, s2c, d, 1.0)
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
                        add_square(s2, s2c, d, -1.0)
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
                    rvar = sample_variance(s1, s1c, s2, s2c, count)
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


def group_rows(inp: Inputs, mut bump: Bump, want_perm: Bool = True) raises -> Grouped:
    """Key k's rows at sorted positions [starts[k], starts[k + 1]) in ts order
    (ties in input order): their ts (sts), float64 values with NaN for null
    (sv) and input rows (perm). Unkeyed input in ts order is used in place
    (has_perm False: position = row; sv converted only when not float64
    without nulls). Needs 8 * (2 * keys + 2) + 24 * n bytes (+ alignment).
    Keyed, perm is only written when `want_perm` or a key's rows need sorting
    (8 bytes a row less to touch otherwise)."""
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
        var perm_at = bump.take(8 * n)
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
        var sorted = True
        for i in range(n):
            var c = Int(codes[unsafe_offset=i])
            var p = Int(cursor[unsafe_offset=c])
            cursor[unsafe_offset=c] = Int64(p + 1)
            var t = ts[unsafe_offset=i]
            if p > Int(starts[unsafe_offset=c]) and sts[unsafe_offset=p - 1] > t:
                sorted = False
            sts[unsafe_offset=p] = t
            sv[unsafe_offset=p] = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i)
        if want_perm or not sorted:
            perm = i64p(perm_at)
            for k in range(g):
                cursor[unsafe_offset=k] = starts[unsafe_offset=k]
            for i in range(n):
                var c = Int(codes[unsafe_offset=i])
                var p = Int(cursor[unsafe_offset=c])
                cursor[unsafe_offset=c] = Int64(p + 1)
                perm[unsafe_offset=p] = Int64(i)
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
# rolling over input in ts order: one streaming pass per window
# ---------------------------------------------------------------------------
#
# Input already in ts order (as a stream delivers it) is read in place. Rows
# enter their key's state in input order and leave it in input order too: a
# second pointer `lo` trails the newest row by the window, and rows leave when
# ts < lower (the frame's low end, non-decreasing in t). So the inputs are read
# twice sequentially, every output is written sequentially, and only the
# per-key state (64 bytes a key, +64 for var/std) is touched at random.
# min/max are monotonic deques and `first` a FIFO of non-null rows, linked
# through int32 arrays indexed by row (relative to the pass's first row).
# A run of rows with an equal ts enters before any of it is emitted (RANGE
# CURRENT ROW includes peers). A part [r0, r1) (r0 a multiple of 64, so
# validity words are never shared) starts at the first row in the frame of
# row r0 and emits from r0 on; rows of a run continuing past r1 enter only.

comptime REC = 8  # int64 words per key in the main state record
# main record words: 0 count, 1 sum, 2 sum compensation, 3 (min front, min back),
# 4 (max front, max back), 5 (first, last) as int32 pairs (-1: none)
comptime SQ = 8  # float64 words per key for var/std: s1, s1c, s2, s2c, shift, shift set


def stream_scratch_bytes(n: Int, ngroups: Int) -> Int:
    """Scratch each part of `rolling_stream_part` needs (mirrored in _native.py):
    128 bytes of state a key, 24 bytes a row (keyed: slots and deques; unkeyed:
    links)."""
    return 8 * (REC + SQ) * ngroups + 24 * n + 64 * 4


@always_inline
def two_sum(mut s: Float64, mut c: Float64, x: Float64):
    """Add x to s, accumulating the rounding error in c (Knuth's TwoSum: no branch)."""
    var t = s + x
    var z = t - s
    c += (s - (t - z)) + (x - z)
    s = t


@always_inline
def add_square(mut s: Float64, mut c: Float64, d: Float64, sign: Float64):
    """s += sign * d^2 exactly: the square's rounding error (fma) joins the compensation."""
    var sq = d * d
    var low = fma(d, d, -sq)
    two_sum(s, c, sign * sq)
    c += sign * low


@always_inline
def sample_variance(s1: Float64, s1c: Float64, s2: Float64, s2c: Float64, count: Int) -> Float64:
    """(S2 - S1^2 / n) / (n - 1) from compensated sums of d = x - shift and of d^2.

    In double-double arithmetic: when the shift is far from the frame's values
    (its row left the frame long ago) the two terms nearly cancel, and a plain
    double formula loses as many digits as they share. Never negative.
    """
    var nn = Float64(count)
    var a = s1 + s1c  # S1 normalised to (a, b): |b| <= ulp(a) / 2
    var z = a - s1
    var b = (s1 - (a - z)) + (s1c - z)
    var sq = a * a
    var sq_low = fma(a, a, -sq) + 2.0 * a * b
    var q = sq / nn  # S1^2 / n as (q, q_low)
    var qn = q * nn
    var q_low = ((sq - qn) - fma(q, nn, -qn) + sq_low) / nn
    var h = s2
    var l = s2c
    two_sum(h, l, -q)
    var v = (h + (l - q_low)) / (nn - 1.0)
    return v if v > 0.0 else 0.0


@always_inline
def frame_lower(t: Int, width: Int, hop: Int) -> Int:
    """The frame's low end (inclusive, ns) for a row at t: t - W, or its sawtooth floor."""
    var lower = t - width
    if hop > 0:
        lower = floor_div(lower, hop) * hop
    return lower


def first_at_or_after(ts: I64P, a: Int, b: Int, t: Int) -> Int:
    """The first position in [a, b) with ts >= t (ts sorted), or b."""
    var lo = a
    var hi = b
    while lo < hi:
        var mid = (lo + hi) // 2
        if Int(ts[unsafe_offset=mid]) < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@always_inline
def store_bits(dst: Int, word: Int, bits: UInt64, nbytes: Int):
    """Validity word `word` (64 rows, LSB first), clipped to the bitmap's nbytes."""
    var p = u8p(dst)
    for j in range(8):
        var at = word * 8 + j
        if at < nbytes:
            p[unsafe_offset=at] = UInt8((bits >> UInt64(8 * j)) & 0xFF)


def stream_window[KEYED: Bool, SUM: Bool, MINMAX: Bool, EXTRA: Bool](
    ts: I64P,
    sv: F64P,
    codes: I32P,
    g: Int,
    n: Int,
    r0: Int,
    r1: Int,
    width: Int,
    hop: Int,
    o: Outs,
    cols: List[Column],
    c0: Int,
    naggs: Int,
    scratch: Int,
):
    """One window's aggregates for rows [r0, r1) of ts-ordered input (see above)."""
    var need_min = o.min != 0
    var need_max = o.max != 0
    var need_sq = o.std != 0 or o.var_ != 0
    var need_first = o.first != 0
    var need_last = o.last != 0
    var w0 = first_at_or_after(ts, 0, r0, frame_lower(Int(ts[unsafe_offset=r0]), width, hop))
    var end = r1
    while end < n and ts[unsafe_offset=end] == ts[unsafe_offset=r1 - 1]:
        end += 1
    var cap = end - w0
    var st = i64p(scratch)
    var sf = f64p(scratch)
    var si = I32P(unsafe_from_address=scratch)
    var sq = f64p(scratch + 8 * REC * g)
    var minprev = I32P(unsafe_from_address=scratch + 8 * (REC + SQ) * g)
    var minnext = minprev.unsafe_offset(cap)
    var maxprev = minprev.unsafe_offset(2 * cap)
    var maxnext = minprev.unsafe_offset(3 * cap)
    var nextrow = minprev.unsafe_offset(4 * cap)
    var base = sv.unsafe_offset(w0)  # values by link index
    for k in range(g):
        var r = k * REC
        st[unsafe_offset=r] = 0
        sf[unsafe_offset=r + 1] = 0.0
        sf[unsafe_offset=r + 2] = 0.0
        st[unsafe_offset=r + 3] = -1
        st[unsafe_offset=r + 4] = -1
        st[unsafe_offset=r + 5] = -1
    comptime if EXTRA:
        if need_sq:
            for k in range(g * SQ):
                sq[unsafe_offset=k] = 0.0
    var nvalid = List[Int]()
    var nvalid_two = List[Bool]()
    for c in range(c0, c0 + naggs):
        if cols[c].valid != 0:
            nvalid.append(cols[c].valid)
            nvalid_two.append(cols[c].agg == A_STD or cols[c].agg == A_VAR)
    var vbytes = (n + 7) // 8
    var bits1: UInt64 = 0
    var bits2: UInt64 = 0
    var lo = w0
    var p = w0
    while p < end:
        var t = ts[unsafe_offset=p]
        var e = p + 1
        while e < end and ts[unsafe_offset=e] == t:
            e += 1
        # the run [p, e) enters
        for q in range(p, e):
            var v = sv[unsafe_offset=q]
            if isnan(v):
                continue
            var r = 0
            comptime if KEYED:
                r = Int(codes[unsafe_offset=q]) * REC
            st[unsafe_offset=r] += 1
            var qi = Int32(q - w0)
            comptime if SUM:
                var s = sf[unsafe_offset=r + 1]
                var sc = sf[unsafe_offset=r + 2]
                two_sum(s, sc, v)
                sf[unsafe_offset=r + 1] = s
                sf[unsafe_offset=r + 2] = sc
            comptime if MINMAX:
                if need_min:
                    var b = si[unsafe_offset=2 * (r + 3) + 1]
                    while b >= 0 and base[unsafe_offset=Int(b)] >= v:
                        b = minprev[unsafe_offset=Int(b)]
                    minprev[unsafe_offset=Int(qi)] = b
                    if b < 0:
                        si[unsafe_offset=2 * (r + 3)] = qi
                    else:
                        minnext[unsafe_offset=Int(b)] = qi
                    si[unsafe_offset=2 * (r + 3) + 1] = qi
                if need_max:
                    var b = si[unsafe_offset=2 * (r + 4) + 1]
                    while b >= 0 and base[unsafe_offset=Int(b)] <= v:
                        b = maxprev[unsafe_offset=Int(b)]
                    maxprev[unsafe_offset=Int(qi)] = b
                    if b < 0:
                        si[unsafe_offset=2 * (r + 4)] = qi
                    else:
                        maxnext[unsafe_offset=Int(b)] = qi
                    si[unsafe_offset=2 * (r + 4) + 1] = qi
            comptime if EXTRA:
                if need_sq:
                    var k = (r // REC) * SQ
                    if sq[unsafe_offset=k + 5] == 0.0:
                        # shifting by a value of the data keeps s2 - s1^2/n free of
                        # catastrophic cancellation when values share a large offset
                        sq[unsafe_offset=k + 4] = v
                        sq[unsafe_offset=k + 5] = 1.0
                    var d = v - sq[unsafe_offset=k + 4]
                    var s1 = sq[unsafe_offset=k]
                    var s1c = sq[unsafe_offset=k + 1]
                    var s2 = sq[unsafe_offset=k + 2]
                    var s2c = sq[unsafe_offset=k + 3]
                    two_sum(s1, s1c, d)
                    add_square(s2, s2c, d, 1.0)
                    sq[unsafe_offset=k] = s1
                    sq[unsafe_offset=k + 1] = s1c
                    sq[unsafe_offset=k + 2] = s2
                    sq[unsafe_offset=k + 3] = s2c
                if need_first:
                    var last = si[unsafe_offset=2 * (r + 5) + 1]
                    if last < 0:
                        si[unsafe_offset=2 * (r + 5)] = qi
                    else:
                        nextrow[unsafe_offset=Int(last)] = qi
                si[unsafe_offset=2 * (r + 5) + 1] = qi
        # rows older than the frame leave, oldest first
        var lower = Int64(frame_lower(Int(t), width, hop))
        while ts[unsafe_offset=lo] < lower:
            var x = sv[unsafe_offset=lo]
            var li = Int32(lo - w0)
            lo += 1
            if isnan(x):
                continue
            var r = 0
            comptime if KEYED:
                r = Int(codes[unsafe_offset=lo - 1]) * REC
            var cnt = st[unsafe_offset=r] - 1
            st[unsafe_offset=r] = cnt
            if cnt == 0:
                # an empty frame: restart exactly instead of carrying noise
                sf[unsafe_offset=r + 1] = 0.0
                sf[unsafe_offset=r + 2] = 0.0
                st[unsafe_offset=r + 3] = -1
                st[unsafe_offset=r + 4] = -1
                st[unsafe_offset=r + 5] = -1
                comptime if EXTRA:
                    if need_sq:
                        var k = (r // REC) * SQ
                        for j in range(SQ):
                            sq[unsafe_offset=k + j] = 0.0
                continue
            comptime if SUM:
                var s = sf[unsafe_offset=r + 1]
                var sc = sf[unsafe_offset=r + 2]
                two_sum(s, sc, -x)
                sf[unsafe_offset=r + 1] = s
                sf[unsafe_offset=r + 2] = sc
            comptime if MINMAX:
                # a deque's back is the key's newest row: never the leaving one here
                # (the new front's back link is cut so pops stop at the front)
                if need_min and si[unsafe_offset=2 * (r + 3)] == li:
                    var f = minnext[unsafe_offset=Int(li)]
                    si[unsafe_offset=2 * (r + 3)] = f
                    minprev[unsafe_offset=Int(f)] = -1
                if need_max and si[unsafe_offset=2 * (r + 4)] == li:
                    var f = maxnext[unsafe_offset=Int(li)]
                    si[unsafe_offset=2 * (r + 4)] = f
                    maxprev[unsafe_offset=Int(f)] = -1
            comptime if EXTRA:
                if need_sq:
                    var k = (r // REC) * SQ
                    var d = x - sq[unsafe_offset=k + 4]
                    var s1 = sq[unsafe_offset=k]
                    var s1c = sq[unsafe_offset=k + 1]
                    var s2 = sq[unsafe_offset=k + 2]
                    var s2c = sq[unsafe_offset=k + 3]
                    two_sum(s1, s1c, -d)
                    add_square(s2, s2c, d, -1.0)
                    sq[unsafe_offset=k] = s1
                    sq[unsafe_offset=k + 1] = s1c
                    sq[unsafe_offset=k + 2] = s2
                    sq[unsafe_offset=k + 3] = s2c
                if need_first:  # the leaving row is the FIFO's front
                    si[unsafe_offset=2 * (r + 5)] = nextrow[unsafe_offset=Int(li)]
        # the frame's results for the run's rows of this part
        for q in range(max(p, r0), min(e, r1)):
            var r = 0
            comptime if KEYED:
                r = Int(codes[unsafe_offset=q]) * REC
            var count = Int(st[unsafe_offset=r])
            var has = count > 0
            if o.count != 0:
                i64p(o.count)[unsafe_offset=q] = Int64(count)
            comptime if SUM:
                var rsum = 0.0
                if has:
                    rsum = sf[unsafe_offset=r + 1] + sf[unsafe_offset=r + 2]
                if o.sum != 0:
                    f64p(o.sum)[unsafe_offset=q] = rsum
                if o.mean != 0:
                    f64p(o.mean)[unsafe_offset=q] = rsum / Float64(count) if has else 0.0
            comptime if MINMAX:
                if need_min:
                    var rmin = 0.0
                    if has:
                        rmin = base[unsafe_offset=Int(si[unsafe_offset=2 * (r + 3)])]
                    put(o.min, o.min_dt, q, rmin)
                if need_max:
                    var rmax = 0.0
                    if has:
                        rmax = base[unsafe_offset=Int(si[unsafe_offset=2 * (r + 4)])]
                    put(o.max, o.max_dt, q, rmax)
            comptime if EXTRA:
                if need_sq:
                    var rvar = 0.0
                    if count > 1:
                        var k = (r // REC) * SQ
                        rvar = sample_variance(
                            sq[unsafe_offset=k], sq[unsafe_offset=k + 1],
                            sq[unsafe_offset=k + 2], sq[unsafe_offset=k + 3], count,
                        )
                    if o.var_ != 0:
                        f64p(o.var_)[unsafe_offset=q] = rvar
                    if o.std != 0:
                        f64p(o.std)[unsafe_offset=q] = sqrt(rvar)
                if need_first:
                    var rfirst = 0.0
                    if has:
                        rfirst = base[unsafe_offset=Int(si[unsafe_offset=2 * (r + 5)])]
                    put(o.first, o.first_dt, q, rfirst)
                if need_last:
                    var rlast = 0.0
                    if has:
                        rlast = base[unsafe_offset=Int(si[unsafe_offset=2 * (r + 5) + 1])]
                    put(o.last, o.last_dt, q, rlast)
            var bit = UInt64(1) << UInt64(q & 63)
            if has:
                bits1 |= bit
            if count > 1:
                bits2 |= bit
            if (q & 63) == 63 or q == r1 - 1:
                for j in range(len(nvalid)):
                    store_bits(nvalid[j], q >> 6, bits2 if nvalid_two[j] else bits1, vbytes)
                bits1 = 0
                bits2 = 0
        p = e


# Keyed input in ts order: per-key regions filled on arrival.
#
# A counting pass over the part's key codes gives each key a slot range;
# arriving rows are appended to their key's range as (ts, value) pairs, so a
# key's frame is a contiguous run of slots next to the ones it touched last.
# The key's frame is trimmed lazily, when one of its rows is emitted (rows
# leave once ts < lower). Per row: the key's 64-byte record, the slot line and
# the deque lines, all local to the key; inputs and outputs are sequential.

comptime PF = 32  # prefetch distance in rows
comptime KREC = 8  # int64 words per key: (hi, lo), (count, first), sum, sum_c,
# (min head, min tail), (max head, max tail), (last, -), -; positions are slots


def region_window[SUM: Bool, MINMAX: Bool, EXTRA: Bool](
    ts: I64P,
    sv: F64P,
    codes: I32P,
    g: Int,
    n: Int,
    r0: Int,
    r1: Int,
    width: Int,
    hop: Int,
    o: Outs,
    cols: List[Column],
    c0: Int,
    naggs: Int,
    scratch: Int,
):
    """One window's aggregates for rows [r0, r1) of keyed ts-ordered input."""
    var need_min = o.min != 0
    var need_max = o.max != 0
    var need_sq = o.std != 0 or o.var_ != 0
    var need_first = o.first != 0
    var need_last = o.last != 0
    var w0 = first_at_or_after(ts, 0, r0, frame_lower(Int(ts[unsafe_offset=r0]), width, hop))
    var end = r1
    while end < n and ts[unsafe_offset=end] == ts[unsafe_offset=r1 - 1]:
        end += 1
    var cap = end - w0
    var st = i64p(scratch)
    var sf = f64p(scratch)
    var si = I32P(unsafe_from_address=scratch)
    var sq = f64p(scratch + 8 * KREC * g)
    var slot_ts = i64p(scratch + 8 * (KREC + SQ) * g)  # pairs: ts, value
    var slot_v = f64p(Int(slot_ts))
    var dqmin = I32P(unsafe_from_address=Int(slot_ts) + 16 * cap)
    var dqmax = dqmin.unsafe_offset(cap)
    # slot ranges: a counting pass over the part's keys
    for k in range(g * KREC):
        st[unsafe_offset=k] = 0
    for q in range(w0, end):
        st[unsafe_offset=Int(codes[unsafe_offset=q]) * KREC] += 1
    var at = 0
    for k in range(g):
        var r = k * KREC
        var c = Int(st[unsafe_offset=r])
        si[unsafe_offset=2 * r] = Int32(at)  # hi
        si[unsafe_offset=2 * r + 1] = Int32(at)  # lo
        si[unsafe_offset=2 * (r + 1)] = 0  # count
        si[unsafe_offset=2 * (r + 1) + 1] = Int32(at)  # first
        si[unsafe_offset=2 * (r + 4)] = Int32(at)
        si[unsafe_offset=2 * (r + 4) + 1] = Int32(at)
        si[unsafe_offset=2 * (r + 5)] = Int32(at)
        si[unsafe_offset=2 * (r + 5) + 1] = Int32(at)
        si[unsafe_offset=2 * (r + 6)] = -1  # last
        at += c
    comptime if EXTRA:
        if need_sq:
            for k in range(g * SQ):
                sq[unsafe_offset=k] = 0.0
    var nvalid = List[Int]()
    var nvalid_two = List[Bool]()
    for c in range(c0, c0 + naggs):
        if cols[c].valid != 0:
            nvalid.append(cols[c].valid)
            nvalid_two.append(cols[c].agg == A_STD or cols[c].agg == A_VAR)
    var vbytes = (n + 7) // 8
    var bits1: UInt64 = 0
    var bits2: UInt64 = 0
    var p = w0
    while p < end:
        # latency, not bandwidth, bounds this loop: fetch the record of the key
        # PF rows ahead, and the slot lines of the key PF / 2 rows ahead
        if p + PF < end:
            prefetch[PrefetchOptions().for_write()](st.unsafe_offset(Int(codes[unsafe_offset=p + PF]) * KREC))
            var rr = Int(codes[unsafe_offset=p + PF // 2]) * KREC
            var hh = Int(si[unsafe_offset=2 * rr])
            prefetch[PrefetchOptions().for_write()](slot_ts.unsafe_offset(2 * hh))
            prefetch[PrefetchOptions().for_read()](slot_ts.unsafe_offset(2 * Int(si[unsafe_offset=2 * rr + 1])))
            comptime if MINMAX:
                prefetch[PrefetchOptions().for_write()](dqmin.unsafe_offset(Int(si[unsafe_offset=2 * (rr + 4) + 1])))
                prefetch[PrefetchOptions().for_write()](dqmax.unsafe_offset(Int(si[unsafe_offset=2 * (rr + 5) + 1])))
        var t = ts[unsafe_offset=p]
        var e = p + 1
        while e < end and ts[unsafe_offset=e] == t:
            e += 1
        # the run [p, e) enters its keys' slots
        for q in range(p, e):
            var r = Int(codes[unsafe_offset=q]) * KREC
            var v = sv[unsafe_offset=q]
            var h = Int(si[unsafe_offset=2 * r])
            si[unsafe_offset=2 * r] = Int32(h + 1)
            slot_ts[unsafe_offset=2 * h] = t
            slot_v[unsafe_offset=2 * h + 1] = v
            if isnan(v):
                continue
            si[unsafe_offset=2 * (r + 1)] += 1
            comptime if SUM:
                var s = sf[unsafe_offset=r + 2]
                var sc = sf[unsafe_offset=r + 3]
                two_sum(s, sc, v)
                sf[unsafe_offset=r + 2] = s
                sf[unsafe_offset=r + 3] = sc
            comptime if MINMAX:
                if need_min:
                    var head = Int(si[unsafe_offset=2 * (r + 4)])
                    var tail = Int(si[unsafe_offset=2 * (r + 4) + 1])
                    while tail > head and slot_v[unsafe_offset=2 * Int(dqmin[unsafe_offset=tail - 1]) + 1] >= v:
                        tail -= 1
                    dqmin[unsafe_offset=tail] = Int32(h)
                    si[unsafe_offset=2 * (r + 4) + 1] = Int32(tail + 1)
                if need_max:
                    var head = Int(si[unsafe_offset=2 * (r + 5)])
                    var tail = Int(si[unsafe_offset=2 * (r + 5) + 1])
                    while tail > head and slot_v[unsafe_offset=2 * Int(dqmax[unsafe_offset=tail - 1]) + 1] <= v:
                        tail -= 1
                    dqmax[unsafe_offset=tail] = Int32(h)
                    si[unsafe_offset=2 * (r + 5) + 1] = Int32(tail + 1)
            comptime if EXTRA:
                if need_sq:
                    var k = (r // KREC) * SQ
                    if sq[unsafe_offset=k + 5] == 0.0:
                        # shifting by a value of the data keeps s2 - s1^2/n free of
                        # catastrophic cancellation when values share a large offset
                        sq[unsafe_offset=k + 4] = v
                        sq[unsafe_offset=k + 5] = 1.0
                    var d = v - sq[unsafe_offset=k + 4]
                    var s1 = sq[unsafe_offset=k]
                    var s1c = sq[unsafe_offset=k + 1]
                    var s2 = sq[unsafe_offset=k + 2]
                    var s2c = sq[unsafe_offset=k + 3]
                    two_sum(s1, s1c, d)
                    add_square(s2, s2c, d, 1.0)
                    sq[unsafe_offset=k] = s1
                    sq[unsafe_offset=k + 1] = s1c
                    sq[unsafe_offset=k + 2] = s2
                    sq[unsafe_offset=k + 3] = s2c
                si[unsafe_offset=2 * (r + 6)] = Int32(h)  # last
        var lower = Int64(frame_lower(Int(t), width, hop))
        for q in range(max(p, r0), min(e, r1)):
            var r = Int(codes[unsafe_offset=q]) * KREC
            # the key's rows older than the frame leave, oldest first
            var lo = Int(si[unsafe_offset=2 * r + 1])
            var lo0 = lo
            while slot_ts[unsafe_offset=2 * lo] < lower:
                var x = slot_v[unsafe_offset=2 * lo + 1]
                lo += 1
                if isnan(x):
                    continue
                var cnt = si[unsafe_offset=2 * (r + 1)] - 1
                si[unsafe_offset=2 * (r + 1)] = cnt
                if cnt == 0:
                    # an empty frame: restart exactly instead of carrying noise
                    sf[unsafe_offset=r + 2] = 0.0
                    sf[unsafe_offset=r + 3] = 0.0
                    comptime if EXTRA:
                        if need_sq:
                            var k = (r // KREC) * SQ
                            for j in range(SQ):
                                sq[unsafe_offset=k + j] = 0.0
                    continue
                comptime if SUM:
                    var s = sf[unsafe_offset=r + 2]
                    var sc = sf[unsafe_offset=r + 3]
                    two_sum(s, sc, -x)
                    sf[unsafe_offset=r + 2] = s
                    sf[unsafe_offset=r + 3] = sc
                comptime if EXTRA:
                    if need_sq:
                        var k = (r // KREC) * SQ
                        var d = x - sq[unsafe_offset=k + 4]
                        var s1 = sq[unsafe_offset=k]
                        var s1c = sq[unsafe_offset=k + 1]
                        var s2 = sq[unsafe_offset=k + 2]
                        var s2c = sq[unsafe_offset=k + 3]
                        two_sum(s1, s1c, -d)
                        add_square(s2, s2c, d, -1.0)
                        sq[unsafe_offset=k] = s1
                        sq[unsafe_offset=k + 1] = s1c
                        sq[unsafe_offset=k + 2] = s2
                        sq[unsafe_offset=k + 3] = s2c
            var count = Int(si[unsafe_offset=2 * (r + 1)])
            var has = count > 0
            if lo != lo0:
                si[unsafe_offset=2 * r + 1] = Int32(lo)
                comptime if MINMAX:
                    if need_min:
                        var head = Int(si[unsafe_offset=2 * (r + 4)])
                        while head < Int(si[unsafe_offset=2 * (r + 4) + 1]) and Int(dqmin[unsafe_offset=head]) < lo:
                            head += 1
                        si[unsafe_offset=2 * (r + 4)] = Int32(head)
                    if need_max:
                        var head = Int(si[unsafe_offset=2 * (r + 5)])
                        while head < Int(si[unsafe_offset=2 * (r + 5) + 1]) and Int(dqmax[unsafe_offset=head]) < lo:
                            head += 1
                        si[unsafe_offset=2 * (r + 5)] = Int32(head)
            if o.count != 0:
                i64p(o.count)[unsafe_offset=q] = Int64(count)
            comptime if SUM:
                var rsum = 0.0
                if has:
                    rsum = sf[unsafe_offset=r + 2] + sf[unsafe_offset=r + 3]
                if o.sum != 0:
                    f64p(o.sum)[unsafe_offset=q] = rsum
                if o.mean != 0:
                    f64p(o.mean)[unsafe_offset=q] = rsum / Float64(count) if has else 0.0
            comptime if MINMAX:
                if need_min:
                    var rmin = 0.0
                    if has:
                        rmin = slot_v[unsafe_offset=2 * Int(dqmin[unsafe_offset=Int(si[unsafe_offset=2 * (r + 4)])]) + 1]
                    put(o.min, o.min_dt, q, rmin)
                if need_max:
                    var rmax = 0.0
                    if has:
                        rmax = slot_v[unsafe_offset=2 * Int(dqmax[unsafe_offset=Int(si[unsafe_offset=2 * (r + 5)])]) + 1]
                    put(o.max, o.max_dt, q, rmax)
            comptime if EXTRA:
                if need_sq:
                    var rvar = 0.0
                    if count > 1:
                        var k = (r // KREC) * SQ
                        rvar = sample_variance(
                            sq[unsafe_offset=k], sq[unsafe_offset=k + 1],
                            sq[unsafe_offset=k + 2], sq[unsafe_offset=k + 3], count,
                        )
                    if o.var_ != 0:
                        f64p(o.var_)[unsafe_offset=q] = rvar
                    if o.std != 0:
                        f64p(o.std)[unsafe_offset=q] = sqrt(rvar)
                if need_first:
                    var rfirst = 0.0
                    if has:
                        var f = max(Int(si[unsafe_offset=2 * (r + 1) + 1]), lo)
                        while isnan(slot_v[unsafe_offset=2 * f + 1]):
                            f += 1
                        si[unsafe_offset=2 * (r + 1) + 1] = Int32(f)
                        rfirst = slot_v[unsafe_offset=2 * f + 1]
                    put(o.first, o.first_dt, q, rfirst)
                if need_last:
                    var rlast = 0.0
                    if has:
                        rlast = slot_v[unsafe_offset=2 * Int(si[unsafe_offset=2 * (r + 6)]) + 1]
                    put(o.last, o.last_dt, q, rlast)
            var bit = UInt64(1) << UInt64(q & 63)
            if has:
                bits1 |= bit
            if count > 1:
                bits2 |= bit
            if (q & 63) == 63 or q == r1 - 1:
                for j in range(len(nvalid)):
                    store_bits(nvalid[j], q >> 6, bits2 if nvalid_two[j] else bits1, vbytes)
                bits1 = 0
                bits2 = 0
        p = e


# Keyed input in ts order, count/sum/mean/min/max: bucketed so that every
# pass works in cache.
#
# 1. (parallel over row ranges) rows are partitioned stably by bucket =
#    code % BUCKETS into contiguous bucket runs of (ts, float64 value, code //
#    BUCKETS): a 1024-way partition whose write cursors stay in L2, and each
#    bucket's rows stay in ts order.
# 2. (parallel over buckets) each bucket (~n / 256 rows, its keys' states and
#    ring of recent rows a few hundred KB, in L2) runs the in-order pass below
#    (`inorder_window`) into bucket-ordered count/sum/min/max columns.
# 3. (parallel over row ranges) the results return to input order: row i
#    takes the next result of its bucket's run (1024 sequential read streams),
#    writing count, sum, mean, min, max and validity sequentially.

comptime BUCKETS = 256


@fieldwise_init
struct BucketLayout(Copyable, Movable):
    """Addresses in the bucketed call's scratch (see `bucket_scratch_bytes`)."""

    var hist: I64P  # parts * BUCKETS row counts, part-major
    var pts: I64P
    var pv: F64P
    var pc: I32P
    var trec: F64P  # per partitioned row: count (as float64), sum, min, max


def bucket_scratch_bytes(n: Int, parts: Int) -> Int:
    """Scratch of a bucketed rolling call (mirrored in _native.py)."""
    return 8 * parts * BUCKETS + 52 * n + 64 * 10


def bucket_layout(addr: Int, n: Int, parts: Int) -> BucketLayout:
    var a = (addr + 63) // 64 * 64
    var hist = i64p(a)
    a += (8 * parts * BUCKETS + 63) // 64 * 64
    var pts = i64p(a)
    a += (8 * n + 63) // 64 * 64
    var pv = f64p(a)
    a += (8 * n + 63) // 64 * 64
    var pc = I32P(unsafe_from_address=a)
    a += (4 * n + 63) // 64 * 64
    var trec = f64p(a)
    return BucketLayout(hist, pts, pv, pc, trec)


@always_inline
def part_rows(n: Int, part: Int, parts: Int) -> Tuple[Int, Int]:
    """Rows [r0, r1) of a part: cut at multiples of 64 (validity words)."""
    var r0 = n * part // parts // 64 * 64
    var r1 = n if part == parts - 1 else n * (part + 1) // parts // 64 * 64
    return (r0, r1)


def bucket_cursors(lay: BucketLayout, part: Int, parts: Int) -> List[Int]:
    """Where part `part`'s rows of each bucket start: buckets in order, parts within."""
    var cur = List[Int](capacity=BUCKETS)
    var at = 0
    for b in range(BUCKETS):
        for p in range(parts):
            if p == part:
                cur.append(at)
            at += Int(lay.hist[unsafe_offset=p * BUCKETS + b])
    return cur^


def bucket_starts(lay: BucketLayout, parts: Int) -> List[Int]:
    var starts = List[Int](capacity=BUCKETS + 1)
    var at = 0
    for b in range(BUCKETS):
        starts.append(at)
        for p in range(parts):
            at += Int(lay.hist[unsafe_offset=p * BUCKETS + b])
    starts.append(at)
    return starts^


def bucketed_phase(d: I64P, phase: Int, part: Int, parts: Int, scratch: Int, w: Int, walk_rows: Int):
    """One phase of the bucketed call for one part (see the section comment):
    0 counts, 1 partitions, 2 computes window `w` per bucket (`bucket_windows`;
    `walk_rows`: see there), 3 returns it to input order."""
    var inp = read_inputs(d)
    var n = inp.n
    var lay = bucket_layout(scratch, n, parts)
    var codes = I32P(unsafe_from_address=inp.codes)
    var rows = part_rows(n, part, parts)
    var r0 = rows[0]
    var r1 = rows[1]
    if phase == 0:
        var h = lay.hist.unsafe_offset(part * BUCKETS)
        for b in range(BUCKETS):
            h[unsafe_offset=b] = 0
        for i in range(r0, r1):
            h[unsafe_offset=Int(codes[unsafe_offset=i]) & (BUCKETS - 1)] += 1
    elif phase == 1:
        var cur = bucket_cursors(lay, part, parts)
        for i in range(r0, r1):
            var c = Int(codes[unsafe_offset=i])
            var b = c & (BUCKETS - 1)
            var j = cur[b]
            cur[b] = j + 1
            # the bucket's next cache line of each run, before its first write
            # (768 write streams: more than the hardware tracks)
            prefetch[PrefetchOptions().for_write()](lay.pts.unsafe_offset(j + 8))
            prefetch[PrefetchOptions().for_write()](lay.pv.unsafe_offset(j + 8))
            prefetch[PrefetchOptions().for_write()](lay.pc.unsafe_offset(j + 16))
            lay.pts[unsafe_offset=j] = inp.ts[unsafe_offset=i]
            lay.pv[unsafe_offset=j] = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i)
            lay.pc[unsafe_offset=j] = Int32(c // BUCKETS)
    elif phase == 2:
        bucket_windows(d, inp, lay, part, parts, w, walk_rows)
    else:
        gather_results(d, inp, lay, part, parts, w)


def bucket_windows(d: I64P, inp: Inputs, lay: BucketLayout, part: Int, parts: Int, w: Int, walk_rows: Int):
    """Phase 2 for one part: window `w` of each of the part's buckets into records
    (`WREC`): each frame recomputed from its rows (`slot_window`) where a frame
    holds at most about `walk_rows` rows (estimated per bucket from its rows,
    keys and ts range; a bucket whose walks take over 2 * walk_rows steps a row
    falls back), else the frames maintained by expiry and min/max deques
    (`inorder_window`)."""
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var nwin = Int(d[unsafe_offset=HEADER])
    var hop = Int(d[unsafe_offset=HEADER + 1])
    var starts = bucket_starts(lay, parts)
    var glocal = (inp.ngroups + BUCKETS - 1) // BUCKETS
    var b0 = BUCKETS * part // parts
    var b1 = BUCKETS * (part + 1) // parts
    var biggest = 0
    for b in range(b0, b1):
        biggest = max(biggest, starts[b + 1] - starts[b])
    var ring_cap = 2
    while ring_cap < biggest:
        ring_cap *= 2
    # deque pass: key states, ring and separate result columns; slot pass: key
    # slots and row links
    var region = alloc[UInt8](
        4 * ISTATE * glocal + 4 * IREC * ring_cap + 32 * biggest + 4 * SLOT_WORDS * glocal + 4 * biggest + 260
    )
    var base = (Int(region) + 63) // 64 * 64
    var cols_at = (base + 4 * ISTATE * glocal + 4 * IREC * ring_cap + 63) // 64 * 64
    var slots = I32P(unsafe_from_address=cols_at + 32 * biggest)
    var links = slots.unsafe_offset(SLOT_WORDS * glocal)
    var no_valid = List[Int]()
    var width = Int(d[unsafe_offset=HEADER + 5 + w])
    var cols = read_columns(d, HEADER + 5 + nwin, nwin * naggs)
    var full = outs_for(cols, w * naggs, naggs, 0)
    var minmax = full.min != 0 or full.max != 0
    for b in range(b0, b1):
        var a = starts[b]
        var m = starts[b + 1] - a
        if m == 0:
            continue
        var bts = lay.pts.unsafe_offset(a)
        var bv = lay.pv.unsafe_offset(a)
        var bcodes = lay.pc.unsafe_offset(a)
        var rec = lay.trec.unsafe_offset(WREC * a)
        var tspan = Int(bts[unsafe_offset=m - 1]) - Int(bts[unsafe_offset=0]) + 1
        var reach = min(width + hop, tspan)  # ns a frame covers (at most)
        var frame_rows = Float64(m) / Float64(glocal) * Float64(reach) / Float64(tspan)
        if frame_rows <= Float64(walk_rows):
            var budget = 2 * walk_rows * m + 1024
            var done: Bool
            if minmax:
                done = slot_window[True](bts, bv, bcodes, glocal, m, width, hop, slots, links, rec, budget)
            else:
                done = slot_window[False](bts, bv, bcodes, glocal, m, width, hop, slots, links, rec, budget)
            if done:
                continue
        var tcount = i64p(cols_at)
        var tsum = f64p(cols_at + 8 * biggest)
        var tmin = f64p(cols_at + 16 * biggest)
        var tmax = f64p(cols_at + 24 * biggest)
        var o = Outs(Int(tcount), Int(tsum), 0, Int(tmin), DT_F64, Int(tmax), DT_F64, 0, 0, 0, 0, 0, 0, 0)
        # the bucket's rows stream in order through the in-order pass, whose
        # key states and ring (at most the bucket's rows) stay in L2
        var sub = Inputs(m, bts, Int(bv), DT_F64, 0, 0, Int(bcodes), glocal)
        var span = inorder_span(bts, m, width, hop, m)
        var ring = 2
        while ring < span:
            ring *= 2
        if minmax:
            inorder_window[True, True](bts, sub, bcodes, glocal, m, 0, m, width, hop, o, no_valid, base, ring)
        else:
            inorder_window[True, False](bts, sub, bcodes, glocal, m, 0, m, width, hop, o, no_valid, base, ring)
        for q in range(m):
            rec[unsafe_offset=WREC * q] = Float64(tcount[unsafe_offset=q])
            rec[unsafe_offset=WREC * q + 1] = tsum[unsafe_offset=q]
            rec[unsafe_offset=WREC * q + 2] = tmin[unsafe_offset=q]
            rec[unsafe_offset=WREC * q + 3] = tmax[unsafe_offset=q]
    region.free()


comptime WREC = 4  # float64 words per bucketed result: count, sum, min, max
comptime GATHER_PF = 4  # records a bucket's read stream is prefetched ahead in phase 3


comptime SLOTS = 8  # a key's most recent non-null rows kept inline by `slot_window`
comptime SLOT_WORDS = 32  # int32 words a key: SLOTS float64 values, SLOTS row numbers, head, -
comptime SLOT_PF = 16  # rows ahead whose key slots are prefetched
comptime FSlots = SIMD[DType.float64, SLOTS]
comptime ISlots = SIMD[DType.int32, SLOTS]


@always_inline
def slot_enter(st: I32P, links: I32P, q: Int, x: Float64, mut vals: FSlots, mut rows: ISlots):
    """Row q (value x, not null) enters its key's slots `st` (loaded as vals and
    rows), replacing the oldest; it links to the key's previous newest row."""
    var h = Int(st[unsafe_offset=3 * SLOTS])
    links[unsafe_offset=q + 1] = st[unsafe_offset=2 * SLOTS + ((h - 1) & (SLOTS - 1))]
    var lane = ISlots(0, 1, 2, 3, 4, 5, 6, 7).eq(Int32(h & (SLOTS - 1)))
    vals = lane.select(FSlots(x), vals)
    rows = lane.select(ISlots(Int32(q + 1)), rows)
    F64P(unsafe_from_address=Int(st)).unsafe_store(0, vals)
    st.unsafe_store(2 * SLOTS, rows)
    st[unsafe_offset=3 * SLOTS] = Int32(h + 1)


@always_inline
def slot_emit[MINMAX: Bool](
    st: I32P, links: I32P, vv: F64P, vals: FSlots, rows: ISlots, first: Int, rec: F64P, q: Int,
) -> Int:
    """Record q (`WREC`) from the key's slots: rows numbered >= first are in the
    frame; when all are, older rows are walked back along the links. Returns the
    walk's steps (0 when none)."""
    var inside = rows.ge(Int32(first))
    var cnt = Int(inside.cast[DType.int32]().reduce_add())
    var sm = inside.select(vals, FSlots(0.0)).reduce_add()
    var mn = 0.0
    var mx = 0.0
    comptime if MINMAX:
        var big = inf[DType.float64]()
        mn = inside.select(vals, FSlots(big)).reduce_min()
        mx = inside.select(vals, FSlots(-big)).reduce_max()
    var steps = 0
    if cnt == SLOTS:  # the oldest slot is in the frame: older rows may be too
        var h = Int(st[unsafe_offset=3 * SLOTS])
        var j = Int(links[unsafe_offset=Int(st[unsafe_offset=2 * SLOTS + (h & (SLOTS - 1))])])
        var sc = 0.0
        while j >= first:
            var x = vv[unsafe_offset=j]
            cnt += 1
            two_sum(sm, sc, x)
            comptime if MINMAX:
                mn = min(mn, x)
                mx = max(mx, x)
            j = Int(links[unsafe_offset=j])
        sm += sc
        steps = cnt
    var has = cnt > 0
    rec[unsafe_offset=WREC * q] = Float64(cnt)
    rec[unsafe_offset=WREC * q + 1] = sm
    rec[unsafe_offset=WREC * q + 2] = mn if has else 0.0
    rec[unsafe_offset=WREC * q + 3] = mx if has else 0.0
    return steps


def slot_window[MINMAX: Bool](
    ts: I64P, v: F64P, codes: I32P, keys: Int, m: Int, width: Int, hop: Int,
    state: I32P, links: I32P, rec: F64P, budget: Int,
) -> Bool:
    """One window over a bucket's m rows (ts order, key codes < `keys`), each frame
    recomputed from its rows. Each key keeps its last `SLOTS` non-null rows inline
    (value and row number, from 1; 0: empty) and every row links to its key's
    previous one (`links`, m + 1 int32). Row q's frame [frame_lower(ts[q]), ts[q]]
    (ns, inclusive; RANGE: later rows of an equal ts are peers and included) holds
    exactly the key's rows numbered >= gl + 1, gl the first row with ts >= the low
    end (ts is sorted): one SIMD pass over the slots, and only when all `SLOTS`
    are in the frame a walk back along the links from the oldest. Writes record q
    (`WREC`): count of non-null rows, sum, min, max (0 when empty). Returns False,
    records partly written, once the walks took more than `budget` steps in all."""
    for k in range(keys * SLOT_WORDS):
        state[unsafe_offset=k] = 0
    links[unsafe_offset=0] = 0
    var vv = v.unsafe_offset(-1)  # vv[j]: value of row number j
    var gl = 0
    var steps = 0
    var p = 0
    while p < m:
        var t = ts[unsafe_offset=p]
        var lower = Int64(frame_lower(Int(t), width, hop))
        gl += Int(ts[unsafe_offset=gl] < lower)  # usually one row leaves: no branch
        while ts[unsafe_offset=gl] < lower:
            gl += 1
        prefetch[PrefetchOptions().for_write()](state.unsafe_offset(Int(codes[unsafe_offset=min(p + SLOT_PF, m - 1)]) * SLOT_WORDS))
        if p + 1 == m or ts[unsafe_offset=p + 1] != t:  # a run of one row: enter and emit
            var st = state.unsafe_offset(Int(codes[unsafe_offset=p]) * SLOT_WORDS)
            var vals = F64P(unsafe_from_address=Int(st)).unsafe_load[width=SLOTS](0)
            var rows = st.unsafe_load[width=SLOTS](2 * SLOTS)
            var x = v[unsafe_offset=p]
            if not isnan(x):
                slot_enter(st, links, p, x, vals, rows)
            steps += slot_emit[MINMAX](st, links, vv, vals, rows, gl + 1, rec, p)
            p += 1
            continue
        var e = p + 1
        while e < m and ts[unsafe_offset=e] == t:
            e += 1
        for q in range(p, e):  # the run enters before any of it is emitted
            var x = v[unsafe_offset=q]
            if not isnan(x):
                var st = state.unsafe_offset(Int(codes[unsafe_offset=q]) * SLOT_WORDS)
                var vals = F64P(unsafe_from_address=Int(st)).unsafe_load[width=SLOTS](0)
                var rows = st.unsafe_load[width=SLOTS](2 * SLOTS)
                slot_enter(st, links, q, x, vals, rows)
        for q in range(p, e):
            var st = state.unsafe_offset(Int(codes[unsafe_offset=q]) * SLOT_WORDS)
            var vals = F64P(unsafe_from_address=Int(st)).unsafe_load[width=SLOTS](0)
            var rows = st.unsafe_load[width=SLOTS](2 * SLOTS)
            steps += slot_emit[MINMAX](st, links, vv, vals, rows, gl + 1, rec, q)
        if steps > budget:
            return False
        p = e
    return steps <= budget


def gather_results(d: I64P, inp: Inputs, lay: BucketLayout, part: Int, parts: Int, w: Int):
    """Phase 3 for one part: row i of the part takes the next record of its
    bucket (`WREC`; one read stream a bucket, prefetched) and writes window `w`'s
    count, sum, mean, min, max and validity in input order."""
    var n = inp.n
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var nwin = Int(d[unsafe_offset=HEADER])
    var codes = I32P(unsafe_from_address=inp.codes)
    var rows = part_rows(n, part, parts)
    var r0 = rows[0]
    var r1 = rows[1]
    var cur = bucket_cursors(lay, part, parts)
    var cols = read_columns(d, HEADER + 5 + nwin, nwin * naggs)
    var o = outs_for(cols, w * naggs, naggs, 0)
    var nvalid = List[Int]()
    for c in range(w * naggs, (w + 1) * naggs):
        if cols[c].valid != 0:
            nvalid.append(cols[c].valid)
    var vbytes = (n + 7) // 8
    var bits: UInt64 = 0
    for i in range(r0, r1):
        var b = Int(codes[unsafe_offset=i]) & (BUCKETS - 1)
        var j = cur[b]
        cur[b] = j + 1
        var r = lay.trec.unsafe_offset(WREC * j)
        prefetch(r.unsafe_offset(WREC * GATHER_PF))
        var cf = r[unsafe_offset=0]
        var count = Int64(cf)
        if o.count != 0:
            i64p(o.count)[unsafe_offset=i] = count
        if o.sum != 0:
            f64p(o.sum)[unsafe_offset=i] = r[unsafe_offset=1]
        if o.mean != 0:
            f64p(o.mean)[unsafe_offset=i] = r[unsafe_offset=1] / cf if count > 0 else 0.0
        if o.min != 0:
            put(o.min, o.min_dt, i, r[unsafe_offset=2])
        if o.max != 0:
            put(o.max, o.max_dt, i, r[unsafe_offset=3])
        if count > 0:
            bits |= UInt64(1) << UInt64(i & 63)
        if (i & 63) == 63 or i == r1 - 1:
            for k in range(len(nvalid)):
                store_bits(nvalid[k], i >> 6, bits, vbytes)
            bits = 0


def bucketed_supported(cols: List[Column]) -> Bool:
    """The bucketed path computes count, sum, mean, min and max."""
    for ref c in cols:
        if c.agg > A_MAX:
            return False
    return True


def rolling_bucketed_part(
    desc: PythonObject, phase: PythonObject, part: PythonObject, parts: PythonObject,
    scratch: PythonObject, window: PythonObject, walk_rows: PythonObject,
) raises -> PythonObject:
    """Phase `phase` of a bucketed rolling call (see the section comment) for
    part `part` of `parts`, with the GIL released; `scratch` addresses
    `bucket_scratch_bytes(n, parts)` bytes shared by the parts; phase 2 walks
    frames back where they hold at most about `walk_rows` rows (0: never)."""
    var d = i64p(Int(py=desc))
    var ph = Int(py=phase)
    var p = Int(py=part)
    var ps = Int(py=parts)
    var sc = Int(py=scratch)
    var w = Int(py=window)
    var wr = Int(py=walk_rows)
    with GILReleased(Python()):
        bucketed_phase(d, ph, p, ps, sc, w, wr)
    return PythonObject(0)


# Keyed input in ts order, count/sum/mean/min/max: rows in input order.
#
# One pass per window reads the inputs and writes every output row in order;
# only the per-key state (64 bytes a key) and a ring of the recent rows are
# touched at random. As ts is sorted, a row is in the frame of row i exactly
# when its index is >= g(i), the first row with ts >= the frame's low end (a
# second pointer over ts): the ring records no ts. A ring record (32 bytes,
# row & mask) holds the row's float64 value and int32 links: the key's next
# non-null row (rows leave in order along it) and the min and max monotonic
# deques' previous/next elements, so a key's frame needs no slots of its own.
# A key is trimmed lazily when one of its rows arrives; every row it may then
# read is at or after g(g(i)) (see `inorder_span`), so a ring of at least
# i + run - g(g(i)) rows (power of two) never hands out a record still needed.
# A part [r0, r1) warms up from g(r0) and emits from r0 on.

comptime SPAN_BLOCK = 1024  # rows per block of `inorder_span`'s bound
comptime IREC = 8  # int32 words per ring record: value (2), next, min prev, min next,
# max prev, max next, -
comptime ISTATE = 16  # int32 words per key: lo, tail, count, min head, max head, -,
# then float64 words 3..6: sum, sum compensation, min, max


def gallop(ts: I64P, a: Int, b: Int, t: Int) -> Int:
    """`first_at_or_after` for an answer expected near a: exponential steps from a."""
    var step = 1
    while a + step < b and Int(ts[unsafe_offset=a + step - 1]) < t:
        step *= 2
    return first_at_or_after(ts, a + step // 2, min(a + step, b), t)


def inorder_span(ts: I64P, n: Int, width: Int, hop: Int, limit: Int) -> Int:
    """An upper bound of the ring rows a pass needs, max over runs [p, e) of
    e - g(g(p)), exceeding the exact value by less than SPAN_BLOCK rows: per block
    of SPAN_BLOCK rows starting at a, the block's last run end minus g(g(a)) (g
    is monotone), by binary search. Stops early with a value > `limit` once the
    bound exceeds it."""
    var span = 0
    var a = 0
    var ga = 0
    var gga = 0
    while a < n:
        var z = min(n, a + SPAN_BLOCK) - 1
        var e = z + 1
        while e < n and ts[unsafe_offset=e] == ts[unsafe_offset=z]:
            e += 1
        ga = gallop(ts, ga, a + 1, frame_lower(Int(ts[unsafe_offset=a]), width, hop))
        gga = gallop(ts, gga, ga + 1, frame_lower(Int(ts[unsafe_offset=ga]), width, hop))
        span = max(span, e - gga)
        if span > limit:
            return span
        a += SPAN_BLOCK
    return span


def inorder_window[SUM: Bool, MINMAX: Bool](
    ts: I64P,
    inp: Inputs,
    codes: I32P,
    g: Int,
    n: Int,
    r0: Int,
    r1: Int,
    width: Int,
    hop: Int,
    o: Outs,
    valid: List[Int],
    scratch: Int,
    ring_rows: Int,
):
    """One window's count/sum/mean/min/max for rows [r0, r1) (see the section comment)."""
    var need_min = o.min != 0
    var need_max = o.max != 0
    var st = I32P(unsafe_from_address=scratch)
    var sf = f64p(scratch)
    var ring = I32P(unsafe_from_address=scratch + 4 * ISTATE * g)
    var rf = f64p(Int(ring))
    var mask = ring_rows - 1
    for k in range(g):
        st[unsafe_offset=k * ISTATE + 1] = -1  # tail: no row
        st[unsafe_offset=k * ISTATE + 2] = 0
        sf[unsafe_offset=k * (ISTATE // 2) + 3] = 0.0
        sf[unsafe_offset=k * (ISTATE // 2) + 4] = 0.0
    var w0 = first_at_or_after(ts, 0, r0, frame_lower(Int(ts[unsafe_offset=r0]), width, hop))
    var end = r1
    while end < n and ts[unsafe_offset=end] == ts[unsafe_offset=r1 - 1]:
        end += 1
    var gl = w0  # first row in the current frame
    var vbytes = (n + 7) // 8
    var bits: UInt64 = 0
    var p = w0
    while p < end:
        if p + PF < end:
            prefetch[PrefetchOptions().for_write()](st.unsafe_offset(Int(codes[unsafe_offset=p + PF]) * ISTATE))
            var s2 = Int(codes[unsafe_offset=p + PF // 2]) * ISTATE
            var tl = Int(st[unsafe_offset=s2 + 1])
            if tl >= 0:
                prefetch[PrefetchOptions().for_write()](ring.unsafe_offset(IREC * (tl & mask)))
                prefetch[PrefetchOptions().for_write()](ring.unsafe_offset(IREC * (Int(st[unsafe_offset=s2]) & mask)))
                comptime if MINMAX:
                    prefetch[PrefetchOptions().for_write()](ring.unsafe_offset(IREC * (Int(st[unsafe_offset=s2 + 3]) & mask)))
                    prefetch[PrefetchOptions().for_write()](ring.unsafe_offset(IREC * (Int(st[unsafe_offset=s2 + 4]) & mask)))
        var t = ts[unsafe_offset=p]
        var e = p + 1
        while e < end and ts[unsafe_offset=e] == t:
            e += 1
        var lower = Int64(frame_lower(Int(t), width, hop))
        while ts[unsafe_offset=gl] < lower:
            gl += 1
        # trim each key of the run to the frame, then let the run's rows enter
        for q in range(p, e):
            var s = Int(codes[unsafe_offset=q]) * ISTATE
            var f = s // 2
            var tail = Int(st[unsafe_offset=s + 1])
            if tail < gl:  # every row of the key left (or it has none)
                if tail >= 0:
                    st[unsafe_offset=s + 1] = -1
                    st[unsafe_offset=s + 2] = 0
                    sf[unsafe_offset=f + 3] = 0.0
                    sf[unsafe_offset=f + 4] = 0.0
            else:
                var lo = Int(st[unsafe_offset=s])
                if lo < gl:
                    var cnt = Int(st[unsafe_offset=s + 2])
                    var sm = sf[unsafe_offset=f + 3]
                    var sc = sf[unsafe_offset=f + 4]
                    while lo < gl:
                        var rr = IREC * (lo & mask)
                        comptime if SUM:
                            two_sum(sm, sc, -rf[unsafe_offset=rr // 2])
                        cnt -= 1
                        lo = Int(ring[unsafe_offset=rr + 2])
                    st[unsafe_offset=s] = Int32(lo)
                    st[unsafe_offset=s + 2] = Int32(cnt)
                    comptime if SUM:
                        sf[unsafe_offset=f + 3] = sm
                        sf[unsafe_offset=f + 4] = sc
                    comptime if MINMAX:
                        if need_min:
                            var h = Int(st[unsafe_offset=s + 3])
                            if h < lo:
                                while h < lo:
                                    h = Int(ring[unsafe_offset=IREC * (h & mask) + 4])
                                st[unsafe_offset=s + 3] = Int32(h)
                                sf[unsafe_offset=f + 5] = rf[unsafe_offset=IREC * (h & mask) // 2]
                        if need_max:
                            var h = Int(st[unsafe_offset=s + 4])
                            if h < lo:
                                while h < lo:
                                    h = Int(ring[unsafe_offset=IREC * (h & mask) + 6])
                                st[unsafe_offset=s + 4] = Int32(h)
                                sf[unsafe_offset=f + 6] = rf[unsafe_offset=IREC * (h & mask) // 2]
            var x = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, q)
            if isnan(x):
                continue
            var rq = IREC * (q & mask)
            rf[unsafe_offset=rq // 2] = x
            ring[unsafe_offset=rq + 2] = -1
            tail = Int(st[unsafe_offset=s + 1])
            st[unsafe_offset=s + 1] = Int32(q)
            if tail < 0:
                st[unsafe_offset=s] = Int32(q)
                st[unsafe_offset=s + 2] = 1
                sf[unsafe_offset=f + 3] = x
                sf[unsafe_offset=f + 4] = 0.0
                comptime if MINMAX:
                    ring[unsafe_offset=rq + 3] = -1
                    ring[unsafe_offset=rq + 5] = -1
                    st[unsafe_offset=s + 3] = Int32(q)
                    st[unsafe_offset=s + 4] = Int32(q)
                    sf[unsafe_offset=f + 5] = x
                    sf[unsafe_offset=f + 6] = x
                continue
            ring[unsafe_offset=IREC * (tail & mask) + 2] = Int32(q)
            st[unsafe_offset=s + 2] += 1
            comptime if SUM:
                var sm = sf[unsafe_offset=f + 3]
                var sc = sf[unsafe_offset=f + 4]
                two_sum(sm, sc, x)
                sf[unsafe_offset=f + 3] = sm
                sf[unsafe_offset=f + 4] = sc
            comptime if MINMAX:
                if need_min:
                    var head = Int(st[unsafe_offset=s + 3])
                    var b = tail
                    while b >= head and rf[unsafe_offset=IREC * (b & mask) // 2] >= x:
                        b = Int(ring[unsafe_offset=IREC * (b & mask) + 3])
                    ring[unsafe_offset=rq + 3] = Int32(b)
                    if b < head:
                        st[unsafe_offset=s + 3] = Int32(q)
                        sf[unsafe_offset=f + 5] = x
                    else:
                        ring[unsafe_offset=IREC * (b & mask) + 4] = Int32(q)
                if need_max:
                    var head = Int(st[unsafe_offset=s + 4])
                    var b = tail
                    while b >= head and rf[unsafe_offset=IREC * (b & mask) // 2] <= x:
                        b = Int(ring[unsafe_offset=IREC * (b & mask) + 5])
                    ring[unsafe_offset=rq + 5] = Int32(b)
                    if b < head:
                        st[unsafe_offset=s + 4] = Int32(q)
                        sf[unsafe_offset=f + 6] = x
                    else:
                        ring[unsafe_offset=IREC * (b & mask) + 6] = Int32(q)
        for q in range(max(p, r0), min(e, r1)):
            var s = Int(codes[unsafe_offset=q]) * ISTATE
            var f = s // 2
            var count = Int(st[unsafe_offset=s + 2])
            var has = count > 0
            if o.count != 0:
                i64p(o.count)[unsafe_offset=q] = Int64(count)
            comptime if SUM:
                var rsum = 0.0
                if has:
                    rsum = sf[unsafe_offset=f + 3] + sf[unsafe_offset=f + 4]
                if o.sum != 0:
                    f64p(o.sum)[unsafe_offset=q] = rsum
                if o.mean != 0:
                    f64p(o.mean)[unsafe_offset=q] = rsum / Float64(count) if has else 0.0
            comptime if MINMAX:
                if need_min:
                    put(o.min, o.min_dt, q, sf[unsafe_offset=f + 5] if has else 0.0)
                if need_max:
                    put(o.max, o.max_dt, q, sf[unsafe_offset=f + 6] if has else 0.0)
            if has:
                bits |= UInt64(1) << UInt64(q & 63)
            if (q & 63) == 63 or q == r1 - 1:
                for j in range(len(valid)):
                    store_bits(valid[j], q >> 6, bits, vbytes)
                bits = 0
        p = e


def inorder_scratch_bytes(ngroups: Int, ring_rows: Int) -> Int:
    """Scratch of one part of `rolling_inorder_part` (mirrored in _native.py)."""
    return 4 * ISTATE * ngroups + 4 * IREC * ring_rows + 64


def rolling_inorder_span(
    desc: PythonObject, window: PythonObject, limit: PythonObject
) raises -> PythonObject:
    """Ring rows (`inorder_span`) window number `window` of the call needs, or
    any value > `limit` when it needs more."""
    var d = i64p(Int(py=desc))
    var inp = read_inputs(d)
    var w = Int(py=window)
    var width = Int(d[unsafe_offset=HEADER + 5 + w])
    var hop = Int(d[unsafe_offset=HEADER + 1])
    var lim = Int(py=limit)
    var span = 0
    with GILReleased(Python()):
        span = inorder_span(inp.ts, inp.n, width, hop, lim)
    return PythonObject(span)


def rolling_inorder_part(
    desc: PythonObject, part: PythonObject, parts: PythonObject, window: PythonObject,
    scratch: PythonObject, ring_rows: PythonObject,
) raises -> PythonObject:
    """Window `window` for rows of part `part` of `parts` (cut at multiples of 64
    rows) with the GIL released; `scratch` addresses `inorder_scratch_bytes` bytes
    (64-byte aligned) of this part; `ring_rows` is a power of two >= the span."""
    var d = i64p(Int(py=desc))
    var inp = read_inputs(d)
    var nwin = Int(d[unsafe_offset=HEADER])
    var hop = Int(d[unsafe_offset=HEADER + 1])
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var w = Int(py=window)
    var width = Int(d[unsafe_offset=HEADER + 5 + w])
    var cols = read_columns(d, HEADER + 5 + nwin, nwin * naggs)
    var n = inp.n
    var rows = part_rows(n, Int(py=part), Int(py=parts))
    var r0 = rows[0]
    var r1 = rows[1]
    if r0 >= r1:
        return PythonObject(0)
    var o = outs_for(cols, w * naggs, naggs, 0)
    var valid = List[Int]()
    for c in range(w * naggs, (w + 1) * naggs):
        if cols[c].valid != 0:
            valid.append(cols[c].valid)
    var codes = I32P(unsafe_from_address=inp.codes)
    var sc = (Int(py=scratch) + 63) // 64 * 64
    var rr = Int(py=ring_rows)
    var g = inp.ngroups
    var need_sum = o.sum != 0 or o.mean != 0
    var need_minmax = o.min != 0 or o.max != 0
    with GILReleased(Python()):
        if need_minmax:
            inorder_window[True, True](inp.ts, inp, codes, g, n, r0, r1, width, hop, o, valid, sc, rr)
        elif need_sum:
            inorder_window[True, False](inp.ts, inp, codes, g, n, r0, r1, width, hop, o, valid, sc, rr)
        else:
            inorder_window[False, False](inp.ts, inp, codes, g, n, r0, r1, width, hop, o, valid, sc, rr)
    return PythonObject(r1 - r0)


def stream_dispatch[KEYED: Bool](
    sum_: Bool, minmax: Bool, extra: Bool,
    ts: I64P, sv: F64P, codes: I32P, g: Int, n: Int, r0: Int, r1: Int,
    width: Int, hop: Int, o: Outs, cols: List[Column], c0: Int, naggs: Int, scratch: Int,
):
    """Run the pass specialised for keys and the needed aggregate families."""
    comptime if KEYED:
        if sum_ and not minmax and not extra:
            region_window[True, False, False](ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch)
        elif minmax and not extra:
            region_window[True, True, False](ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch)
        elif not sum_ and not minmax and not extra:
            region_window[False, False, False](ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch)
        else:
            region_window[True, True, True](ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch)
        return
    if sum_ and not minmax and not extra:
        stream_window[KEYED, True, False, False](ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch)
    elif minmax and not extra:
        stream_window[KEYED, True, True, False](ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch)
    elif not sum_ and not minmax and not extra:
        stream_window[KEYED, False, False, False](ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch)
    else:
        stream_window[KEYED, True, True, True](ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch)


def rolling_stream_mode(desc: PythonObject) raises -> PythonObject:
    """For a `rolling_prepare` descriptor: 0 when the call cannot stream (ts not
    in order, or count_distinct), 1 when it streams over the values in place,
    2 when the values must first be converted (`rolling_stream_convert`), 3 when
    it takes the bucketed path (`rolling_bucketed_part`)."""
    var d = i64p(Int(py=desc))
    var inp = read_inputs(d)
    var nwin = Int(d[unsafe_offset=HEADER])
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var cols = read_columns(d, HEADER + 5 + nwin, nwin * naggs)
    if not stream_supported(cols) or inp.n >= Int(Int32.MAX):
        return PythonObject(0)
    var ts = inp.ts
    for i in range(1, inp.n):
        if ts[unsafe_offset=i] < ts[unsafe_offset=i - 1]:
            return PythonObject(0)
    if inp.codes != 0 and bucketed_supported(cols):
        return PythonObject(3)
    if inp.dtype == DT_F64 and inp.valid_addr == 0:
        return PythonObject(1)
    return PythonObject(2)


def rolling_stream_convert(desc: PythonObject, dst: PythonObject) raises -> PythonObject:
    """Write the values as float64 (NaN for null) to `dst` (8 * n bytes)."""
    var d = i64p(Int(py=desc))
    var inp = read_inputs(d)
    var sv = f64p(Int(py=dst))
    for i in range(inp.n):
        sv[unsafe_offset=i] = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i)
    return PythonObject(inp.n)


def rolling_stream_part(
    desc: PythonObject, part: PythonObject, parts: PythonObject, scratch: PythonObject, values: PythonObject
) raises -> PythonObject:
    """Every window of rows [r0, r1) of part `part` of `parts` (cut at multiples
    of 64 rows) with the GIL released. `scratch` addresses
    `stream_scratch_bytes(n, keys)` bytes; `values` the converted float64 values,
    or 0 to read the caller's float64 values in place."""
    var d = i64p(Int(py=desc))
    var inp = read_inputs(d)
    var nwin = Int(d[unsafe_offset=HEADER])
    var hop = Int(d[unsafe_offset=HEADER + 1])
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var widths = d.unsafe_offset(HEADER + 5)
    var cols = read_columns(d, HEADER + 5 + nwin, nwin * naggs)
    var n = inp.n
    var p = Int(py=part)
    var ps = Int(py=parts)
    var r0 = n * p // ps // 64 * 64
    var r1 = n if p == ps - 1 else n * (p + 1) // ps // 64 * 64
    if r0 >= r1:
        return PythonObject(0)
    var vaddr = Int(py=values)
    var sv = f64p(vaddr if vaddr != 0 else inp.vaddr)
    var keyed = inp.codes != 0
    var g = inp.ngroups if keyed else 1
    var codes = I32P(unsafe_from_address=inp.codes if keyed else Int(inp.ts))
    var sc = Int(py=scratch)
    var need_sum = False
    var need_minmax = False
    var need_extra = False
    for ref c in cols:
        if c.agg == A_SUM or c.agg == A_MEAN:
            need_sum = True
        elif c.agg == A_MIN or c.agg == A_MAX:
            need_minmax = True
        elif c.agg != A_COUNT:
            need_extra = True
    with GILReleased(Python()):
        for w in range(nwin):
            var width = Int(widths[unsafe_offset=w])
            var o = outs_for(cols, w * naggs, naggs, 0)
            if keyed:
                stream_dispatch[True](
                    need_sum, need_minmax, need_extra, inp.ts, sv, codes, g, n, r0, r1,
                    width, hop, o, cols, w * naggs, naggs, sc,
                )
            else:
                stream_dispatch[False](
                    need_sum, need_minmax, need_extra, inp.ts, sv, codes, g, n, r0, r1,
                    width, hop, o, cols, w * naggs, naggs, sc,
                )
    return PythonObject(r1 - r0)


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


# Keyed sessions over input in ts order with a fixed gap (count, sum, mean, min,
# max, first, last): no grouping copy of the rows. As each key's rows arrive in
# ts order, a row opens a session exactly when it is the key's first or its ts
# is past the key's current end (the end is always the last row's ts + gap).
# Pass 1 counts each key's sessions (16 bytes of state a key), a prefix over the
# keys gives each key its first output slot (codes are in key order), and
# pass 2 aggregates each key's open session in its 64-byte state, writing it to
# its slot when the next one opens (or at the end). Both passes read the
# inputs sequentially; only the key states are touched at random (prefetched).

comptime SREC = 8  # int64 words per key: slot (-1 - first slot before any row),
# end, count, sum, sum compensation, min, max, last


def sessions_in_order_supported(cols: List[Column]) -> Bool:
    for ref c in cols:
        if c.agg == A_STD or c.agg == A_VAR or c.agg == A_DISTINCT:
            return False
    return True


@always_inline
def flush_session(
    st: I64P, s: Int, o: Outs, out_end: I64P, lev: U8P
):
    """Write key state `s`'s open session to its slot."""
    var sf = f64p(Int(st))
    var j = Int(st[unsafe_offset=s])
    var count = Int(st[unsafe_offset=s + 2])
    var has = count > 0
    var total = sf[unsafe_offset=s + 3] + sf[unsafe_offset=s + 4]
    out_end[unsafe_offset=j] = st[unsafe_offset=s + 1]
    if o.count != 0:
        i64p(o.count)[unsafe_offset=j] = Int64(count)
    if o.sum != 0:
        f64p(o.sum)[unsafe_offset=j] = total if has else 0.0
    if o.mean != 0:
        f64p(o.mean)[unsafe_offset=j] = total / Float64(count) if has else 0.0
    if o.min != 0:
        put(o.min, o.min_dt, j, sf[unsafe_offset=s + 5] if has else 0.0)
    if o.max != 0:
        put(o.max, o.max_dt, j, sf[unsafe_offset=s + 6] if has else 0.0)
    if o.last != 0:
        put(o.last, o.last_dt, j, sf[unsafe_offset=s + 7] if has else 0.0)
    if o.first != 0 and not has:
        put(o.first, o.first_dt, j, 0.0)
    lev[unsafe_offset=j] = UInt8(min(count, 2))


def sessions_in_order(
    inp: Inputs, gap: Int, o: Outs, out_code: I32P, out_start: I64P, out_end: I64P,
    st: I64P, lev: U8P,
) -> Int:
    """Keyed ts-ordered sessions (see the section comment); `st` holds 8 * SREC
    bytes a key. Returns the number of sessions."""
    var n = inp.n
    var g = inp.ngroups
    var ts = inp.ts
    var codes = I32P(unsafe_from_address=inp.codes)
    var sf = f64p(Int(st))
    for k in range(g):
        st[unsafe_offset=k * SREC] = 0
    for i in range(n):
        if i + PF < n:
            prefetch[PrefetchOptions().for_write()](st.unsafe_offset(Int(codes[unsafe_offset=i + PF]) * SREC))
        var s = Int(codes[unsafe_offset=i]) * SREC
        var t = ts[unsafe_offset=i]
        if st[unsafe_offset=s] == 0 or t > st[unsafe_offset=s + 1]:
            st[unsafe_offset=s] += 1
        st[unsafe_offset=s + 1] = t + Int64(gap)
    var m = 0
    for k in range(g):
        var c = Int(st[unsafe_offset=k * SREC])
        st[unsafe_offset=k * SREC] = Int64(-1 - m)
        m += c
    for i in range(n):
        if i + PF < n:
            prefetch[PrefetchOptions().for_write()](st.unsafe_offset(Int(codes[unsafe_offset=i + PF]) * SREC))
        var c = Int(codes[unsafe_offset=i])
        var s = c * SREC
        var t = ts[unsafe_offset=i]
        var j = Int(st[unsafe_offset=s])
        if j < 0 or t > st[unsafe_offset=s + 1]:
            if j < 0:
                j = -1 - j
            else:
                flush_session(st, s, o, out_end, lev)
                j += 1
            st[unsafe_offset=s] = Int64(j)
            st[unsafe_offset=s + 2] = 0
            sf[unsafe_offset=s + 3] = 0.0
            sf[unsafe_offset=s + 4] = 0.0
            out_code[unsafe_offset=j] = Int32(c)
            out_start[unsafe_offset=j] = t
        st[unsafe_offset=s + 1] = t + Int64(gap)
        var v = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i)
        if isnan(v):
            continue
        var count = Int(st[unsafe_offset=s + 2])
        if count == 0:
            sf[unsafe_offset=s + 5] = v
            sf[unsafe_offset=s + 6] = v
            if o.first != 0:
                put(o.first, o.first_dt, j, v)
        else:
            sf[unsafe_offset=s + 5] = min(sf[unsafe_offset=s + 5], v)
            sf[unsafe_offset=s + 6] = max(sf[unsafe_offset=s + 6], v)
        sf[unsafe_offset=s + 7] = v
        st[unsafe_offset=s + 2] = Int64(count + 1)
        var sm = sf[unsafe_offset=s + 3]
        var sc = sf[unsafe_offset=s + 4]
        Sliding.kadd(sm, sc, v)
        sf[unsafe_offset=s + 3] = sm
        sf[unsafe_offset=s + 4] = sc
    for k in range(g):
        if st[unsafe_offset=k * SREC] >= 0:
            flush_session(st, k * SREC, o, out_end, lev)
    return m


# Without first/last, the sessions are not counted ahead: one pass writes each
# session to the outputs when it closes (sequentially, in close order, which is
# start order within a key), counting each key's sessions; then the outputs are
# put in key order by a counting sort of the sessions alone (about one row in
# eight on the benchmark), one column at a time through a scratch column.

comptime NO_END = Int64.MIN  # a key state's end when it has no open session


@always_inline
def close_session(
    st: I64P, s: Int, c: Int, j: Int, o: Outs, out_code: I32P, out_start: I64P,
    out_end: I64P, lev: U8P,
):
    """Write key c's open session (state at word s) as output j, and count it."""
    var sf = f64p(Int(st))
    var count = Int(st[unsafe_offset=s + 2])
    var has = count > 0
    var total = sf[unsafe_offset=s + 3] + sf[unsafe_offset=s + 4]
    out_code[unsafe_offset=j] = Int32(c)
    out_start[unsafe_offset=j] = st[unsafe_offset=s]
    out_end[unsafe_offset=j] = st[unsafe_offset=s + 1]
    if o.count != 0:
        i64p(o.count)[unsafe_offset=j] = Int64(count)
    if o.sum != 0:
        f64p(o.sum)[unsafe_offset=j] = total if has else 0.0
    if o.mean != 0:
        f64p(o.mean)[unsafe_offset=j] = total / Float64(count) if has else 0.0
    if o.min != 0:
        put(o.min, o.min_dt, j, sf[unsafe_offset=s + 5] if has else 0.0)
    if o.max != 0:
        put(o.max, o.max_dt, j, sf[unsafe_offset=s + 6] if has else 0.0)
    lev[unsafe_offset=j] = UInt8(min(count, 2))
    st[unsafe_offset=s + 7] += 1


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


def dtype_width(dtype: Int) -> Int:
    return 8 if dtype == DT_F64 or dtype == DT_I64 else 4


def sessions_by_close(
    inp: Inputs, gap: Int, o: Outs, out_code: I32P, out_start: I64P, out_end: I64P,
    st: I64P, lev: U8P, perm: I32P, tmp: Int,
) -> Int:
    """Keyed ts-ordered sessions without first/last (see the comment above); `st`
    holds 8 * SREC bytes a key (start, end (NO_END: none open), count, sum, sum
    compensation, min, max, sessions closed), `perm` 4 bytes and `tmp` 8 bytes a
    session. Returns the number of sessions."""
    var n = inp.n
    var g = inp.ngroups
    var ts = inp.ts
    var codes = I32P(unsafe_from_address=inp.codes)
    var sf = f64p(Int(st))
    for k in range(g):
        st[unsafe_offset=k * SREC + 1] = NO_END
        st[unsafe_offset=k * SREC + 7] = 0
    var m = 0
    for i in range(n):
        if i + PF < n:
            prefetch[PrefetchOptions().for_write()](st.unsafe_offset(Int(codes[unsafe_offset=i + PF]) * SREC))
        var c = Int(codes[unsafe_offset=i])
        var s = c * SREC
        var t = ts[unsafe_offset=i]
        var end = st[unsafe_offset=s + 1]
        if end == NO_END or t > end:
            if end != NO_END:
                close_session(st, s, c, m, o, out_code, out_start, out_end, lev)
                m += 1
            st[unsafe_offset=s] = t
            st[unsafe_offset=s + 2] = 0
            sf[unsafe_offset=s + 3] = 0.0
            sf[unsafe_offset=s + 4] = 0.0
        st[unsafe_offset=s + 1] = t + Int64(gap)
        var v = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i)
        if isnan(v):
            continue
        var count = Int(st[unsafe_offset=s + 2])
        if count == 0:
            sf[unsafe_offset=s + 5] = v
            sf[unsafe_offset=s + 6] = v
        else:
            sf[unsafe_offset=s + 5] = min(sf[unsafe_offset=s + 5], v)
            sf[unsafe_offset=s + 6] = max(sf[unsafe_offset=s + 6], v)
        st[unsafe_offset=s + 2] = Int64(count + 1)
        var sm = sf[unsafe_offset=s + 3]
        var sc = sf[unsafe_offset=s + 4]
        Sliding.kadd(sm, sc, v)
        sf[unsafe_offset=s + 3] = sm
        sf[unsafe_offset=s + 4] = sc
    for k in range(g):
        if st[unsafe_offset=k * SREC + 1] != NO_END:
            close_session(st, k * SREC, k, m, o, out_code, out_start, out_end, lev)
            m += 1
    # key order: each key's first output position (word 0), then each session's
    var at = 0
    for k in range(g):
        var c = Int(st[unsafe_offset=k * SREC + 7])
        st[unsafe_offset=k * SREC] = Int64(at)
        at += c
    for j in range(m):
        var s = Int(out_code[unsafe_offset=j]) * SREC
        var p = st[unsafe_offset=s]
        perm[unsafe_offset=j] = Int32(p)
        st[unsafe_offset=s] = p + 1
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


def sessions_in_order_scratch_bytes(n: Int, ngroups: Int) -> Int:
    """Scratch of `sessions_in_order` and `sessions_by_close` (mirrored in
    _native.py): 64 bytes a key, 13 a row (level bytes; the close-order pass's
    permutation and scratch column, of which it touches one per session)."""
    return 8 * SREC * ngroups + (n + 7) // 8 * 8 + 12 * n + 64 * 6


def sessions_scratch_bytes(n: Int, ngroups: Int) -> Int:
    """Scratch the caller must pass to `sessions` (mirrored in _native.py)."""
    return 8 * (2 * ngroups + 2) + 8 * 3 * n + (n + 7) // 8 * 8 + 64 * 8


def sessions(desc: PythonObject) raises -> PythonObject:
    """Descriptor: header, gap (ns; 0 with per-row gaps), per-row gap addr
    (int64 ns, 0: none), naggs, out key codes (int32), out session starts,
    out session ends (int64 ns), then naggs columns (capacity n), then the
    scratch addr and bytes (`sessions_in_order_scratch_bytes` suffices for keyed
    input in ts order with a fixed gap and no std/var/count_distinct; otherwise
    it returns -1 unless it has `sessions_scratch_bytes`). Spark's session_window: a key's rows in ts order;
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
                m = sessions_by_close(inp, gap, o, out_code, out_start, out_end, st, lev, perm, tmp)
            else:
                m = sessions_in_order(inp, gap, o, out_code, out_start, out_end, st, lev)
            for i in range(m, (m + 7) // 8 * 8):
                lev[unsafe_offset=i] = 0
            for ref c in cols:
                if c.valid != 0:
                    pack_levels(lev, m, False, u8p(c.valid))
            return PythonObject(m)
    if scratch_size < sessions_scratch_bytes(n, g):
        return PythonObject(-1)  # the caller passes `sessions_scratch_bytes` and calls again
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
        m.def_function[rolling_stream_mode](
            "rolling_stream_mode", docstring="Rolling over ts-ordered input: can it stream?"
        )
        m.def_function[rolling_stream_convert](
            "rolling_stream_convert", docstring="Rolling over ts-ordered input: float64 values."
        )
        m.def_function[rolling_stream_part](
            "rolling_stream_part", docstring="Rolling over ts-ordered input: one part."
        )
        m.def_function[rolling_bucketed_part](
            "rolling_bucketed_part", docstring="Rolling over ts-ordered keyed input: one phase."
        )
        m.def_function[rolling_inorder_span](
            "rolling_inorder_span", docstring="Ring rows the in-order rolling pass needs."
        )
        m.def_function[rolling_inorder_part](
            "rolling_inorder_part", docstring="Rolling over ts-ordered keyed input, in input order."
        )
        m.def_function[hopping]("hopping", docstring="Hopping windows; see kernels.mojo.")
        m.def_function[sessions]("sessions", docstring="Session windows; see kernels.mojo.")
        m.def_function[encode_int_keys](
            "encode_int_keys", docstring="Dense codes of integer keys; see kernels.mojo."
        )
        return m.finalize()
    except e:
        abort(String("featureflow: failed to create the kernels module: ", e))
