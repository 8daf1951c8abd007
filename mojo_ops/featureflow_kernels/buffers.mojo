"""Typed loads and stores of the caller's Arrow buffers (values by dtype code,
NaN for null; outputs and validity bits), scratch allocation (`Bump`) and
small integer helpers.
"""

from std.utils.numerics import nan
from std.memory import alloc
from featureflow_kernels.abi import (
    Column,
    DT_F32,
    DT_F64,
    DT_I64,
    F32P,
    F64P,
    I32P,
    I64P,
    U8P,
    f64p,
    u8p,
)


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


@always_inline
def load_value(vaddr: Int, dtype: Int, i: Int) -> Float64:
    if dtype == DT_F64:
        return F64P(unsafe_from_address=vaddr)[unsafe_offset=i]
    if dtype == DT_F32:
        return Float64(F32P(unsafe_from_address=vaddr)[unsafe_offset=i])
    if dtype == DT_I64:
        return Float64(I64P(unsafe_from_address=vaddr)[unsafe_offset=i])
    return Float64(I32P(unsafe_from_address=vaddr)[unsafe_offset=i])


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


def clear_validity(cols: List[Column], rows: Int):
    for ref c in cols:
        if c.valid != 0:
            var p = U8P(unsafe_from_address=c.valid)
            for i in range((rows + 7) // 8):
                p[unsafe_offset=i] = 0


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


@always_inline
def put(addr: Int, dtype: Int, row: Int, v: Float64):
    if dtype == DT_F64:
        f64p(addr)[unsafe_offset=row] = v
    else:
        store(addr, dtype, row, v)


@always_inline
def store_bits(dst: Int, word: Int, bits: UInt64, nbytes: Int):
    """Validity word `word` (64 rows, LSB first), clipped to the bitmap's nbytes."""
    var p = u8p(dst)
    for j in range(8):
        var at = word * 8 + j
        if at < nbytes:
            p[unsafe_offset=at] = UInt8((bits >> UInt64(8 * j)) & 0xFF)


def dtype_width(dtype: Int) -> Int:
    return 8 if dtype == DT_F64 or dtype == DT_I64 else 4
