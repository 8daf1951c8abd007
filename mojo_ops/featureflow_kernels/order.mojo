"""Putting rows in key then ts order: a stable merge sort by ts (`order_rows`,
`sort_inputs`: a permutation and gathered copies), and the counting sort by
key code that groups rows into each key's slot range (`group_rows`).
"""

from std.utils.numerics import nan
from featureflow_kernels.abi import DT_F64, F64P, I32P, I64P, Inputs, U8P, f64p, i64p
from featureflow_kernels.buffers import Bump, alloc_f64, alloc_i64, load_valid, load_value


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
                if (
                    ts[unsafe_offset=Int(src[unsafe_offset=j])]
                    < ts[unsafe_offset=Int(src[unsafe_offset=i])]
                ):
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
            if (
                ts[unsafe_offset=Int(perm[unsafe_offset=p])]
                < ts[unsafe_offset=Int(perm[unsafe_offset=p - 1])]
            ):
                sorted = False
                break
        if not sorted:
            if not scratch:
                scratch = alloc_i64(max(n, 1))
            merge_sort_by_ts(perm, scratch.value(), a, b, ts)
    if scratch:
        scratch.value().unsafe_free()
    return Order(perm, starts, g)


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
