"""Integers as byte strings, one row per value: ASCII decimal digits and protobuf varints.

The online writers frame every Redis command and value with such numbers (a RESP
length, a Lua argument, a protobuf field), several columns of them per write. Each
output is a matrix of `width` bytes per row, row i's bytes left-aligned, with the
row's byte count in `lengths[i]` (`featureflow.online._bytes.Cells`).
"""

from featureflow_kernels.abi import I64P, i64p, u8p

comptime VARINT_WIDTH = 10
"""Bytes of the longest varint: a negative int64 as its two's complement (64 / 7 bits)."""


def ascii_decimal(d: I64P) raises -> Int:
    """Descriptor: n, int64 values addr, out matrix addr (n rows of `width` bytes), width,
    int64 out lengths addr. Row i gets value i's decimal digits without leading zeros
    (0 is "0"). Returns n; raises on a negative value or one of more than `width` digits.
    """
    var n = Int(d[unsafe_offset=0])
    var values = i64p(Int(d[unsafe_offset=1]))
    var out = u8p(Int(d[unsafe_offset=2]))
    var width = Int(d[unsafe_offset=3])
    var lengths = i64p(Int(d[unsafe_offset=4]))
    for i in range(n):
        var v = Int(values[unsafe_offset=i])
        if v < 0:
            raise Error(String("ValueError: value ", i, " is negative (", v, ")"))
        var digits = 1
        var rest = v // 10
        while rest != 0:
            digits += 1
            rest //= 10
        if digits > width:
            raise Error(String("ValueError: value ", i, " has ", digits, " digits, over ", width))
        var row = i * width
        rest = v
        for k in range(digits - 1, -1, -1):
            out[unsafe_offset=row + k] = UInt8(48 + rest % 10)
            rest //= 10
        lengths[unsafe_offset=i] = Int64(digits)
    return n


def varint(d: I64P) raises -> Int:
    """Descriptor: n, int64 values addr, out matrix addr (n rows of VARINT_WIDTH bytes),
    int64 out lengths addr. Row i gets value i as a protobuf base-128 varint, low groups
    first; a negative value is read as its 64-bit two's complement (10 bytes). Returns n.
    """
    var n = Int(d[unsafe_offset=0])
    var values = i64p(Int(d[unsafe_offset=1]))
    var out = u8p(Int(d[unsafe_offset=2]))
    var lengths = i64p(Int(d[unsafe_offset=3]))
    for i in range(n):
        var u = UInt64(values[unsafe_offset=i])
        var row = i * VARINT_WIDTH
        var k = 0
        while u >= 0x80:
            out[unsafe_offset=row + k] = UInt8(u & 0x7F) | 0x80
            u >>= 7
            k += 1
        out[unsafe_offset=row + k] = UInt8(u)
        lengths[unsafe_offset=i] = Int64(k + 1)
    return n
