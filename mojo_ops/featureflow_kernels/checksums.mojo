"""Checksums of byte strings: Redis's CRC-64 of many rows in one call.

The online writer builds `RESTORE` payloads whose footer carries the CRC-64 of
the payload (featureflow.online.redis_dump); a batch holds tens of thousands of
them, of many lengths. Here each row is one pass of slicing-by-8 (8 table
lookups per 8 bytes), whatever its length.
"""

from std.memory import bitcast

from featureflow_kernels.abi import I64P, U8P, i64p, u8p

comptime U64P = Pointer[UInt64, MutUntrackedOrigin]


def crc64_rows(d: I64P) raises -> Int:
    """Descriptor: n, bytes addr, int64 offsets addr (n + 1, Arrow's binary layout:
    row i is bytes[offsets[i]:offsets[i + 1]]), uint64 tables addr (8 x 256:
    table 0 is the byte-at-a-time table of the reflected polynomial, table k
    advances table k - 1 by one zero byte), uint64 out addr (n).

    Each row's CRC starts at 0 with no final xor (Redis's crc64: CRC-64/Jones,
    reflected). Returns n."""
    var n = Int(d[unsafe_offset=0])
    var data = u8p(Int(d[unsafe_offset=1]))
    var offsets = i64p(Int(d[unsafe_offset=2]))
    var tables = U64P(unsafe_from_address=Int(d[unsafe_offset=3]))
    var out = U64P(unsafe_from_address=Int(d[unsafe_offset=4]))
    for i in range(n):
        var at = Int(offsets[unsafe_offset=i])
        var end = Int(offsets[unsafe_offset=i + 1])
        if end < at:
            raise Error(String("ValueError: offsets decrease at row ", i))
        out[unsafe_offset=i] = crc64_of(data, at, end, tables)
    return n


@always_inline
def crc64_of(data: U8P, start: Int, end: Int, tables: U64P) -> UInt64:
    """Redis's CRC-64 of `data[start:end]` (see `crc64_rows` for `tables`)."""
    var at = start
    var crc: UInt64 = 0
    while end - at >= 8:
        crc ^= bitcast[DType.uint64, 1](data.unsafe_load[width=8](at))
        crc = (
            tables[unsafe_offset=7 * 256 + Int(crc & 0xFF)]
            ^ tables[unsafe_offset=6 * 256 + Int((crc >> 8) & 0xFF)]
            ^ tables[unsafe_offset=5 * 256 + Int((crc >> 16) & 0xFF)]
            ^ tables[unsafe_offset=4 * 256 + Int((crc >> 24) & 0xFF)]
            ^ tables[unsafe_offset=3 * 256 + Int((crc >> 32) & 0xFF)]
            ^ tables[unsafe_offset=2 * 256 + Int((crc >> 40) & 0xFF)]
            ^ tables[unsafe_offset=256 + Int((crc >> 48) & 0xFF)]
            ^ tables[unsafe_offset=Int(crc >> 56)]
        )
        at += 8
    while at < end:
        var byte = UInt64(data[unsafe_offset=at])
        crc = tables[unsafe_offset=Int((crc ^ byte) & 0xFF)] ^ (crc >> 8)
        at += 1
    return crc
