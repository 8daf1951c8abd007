"""Whole Redis hashes as `RESTORE` payloads, one per entity, in one pass.

The Redis online writer creates or replaces an entity's hash with `RESTORE`; the
payload is what `DUMP` of the hash gives (featureflow.online.redis_dump has the
format and the numpy reference). Each entity's hash holds, view after view, the
fields of every view that has a row for it: a field name (the same for every
entity) and its value, the value's bytes joined from parts as `byte_rows` joins
them, read at the entity's row of that view. Per entity this writes the listpack
entries, the RDB head, the footer and the CRC-64, and says whether the server
would keep such a hash as this listpack (every field and value under 64 bytes,
none reading as a decimal integer, at most 128 fields). An entity that fails the
test gets an empty row.
"""

from featureflow_kernels.abi import I64P, U8P, i64p, u8p
from featureflow_kernels.byte_rows import PART_WORDS, part_bytes, part_size, part_start
from featureflow_kernels.checksums import U64P, crc64_of

comptime HEAD_WORDS = 15
comptime RDB_TYPE_HASH_LISTPACK = 16
comptime MAX_STRING = 63
comptime MAX_INTEGER_DIGITS = 20
comptime MAX_FIELDS = 128


@always_inline
def integer_like(s: U8P, at: Int, size: Int) -> Bool:
    """Whether `s[at:at + size]` could be stored by Redis as a listpack integer: 1 to 20
    bytes of decimal digits after an optional `-` (conservative, as the reference)."""
    if size < 1 or size > MAX_INTEGER_DIGITS:
        return False
    var k = 0
    if Int(s[unsafe_offset=at]) == 45:  # '-'
        if size < 2:
            return False
        k = 1
    for j in range(k, size):
        var b = Int(s[unsafe_offset=at + j])
        if b < 48 or b > 57:
            return False
    return True


def hash_payloads(d: I64P) raises -> Int:
    """Descriptor: n entities, V views, P fields, the RDB version (its two footer bytes
    as a little-endian int), int64 out offsets addr (n + 1, written), out bytes addr, out
    capacity, uint8 ok addr (n, written: 1 where the row holds the entity's payload),
    CRC tables addr (as `crc64_rows`), field names' bytes addr, int64 name offsets addr
    (P + 1), int64 view of each field addr (P, any order), int64 part bounds addr
    (P + 1: field k's value is parts [bounds[k], bounds[k + 1]) joined), int64 rows addr
    (n x V, row-major: each entity's row in each view, -1: none), parts Q; then
    PART_WORDS per part (as `byte_rows.join_rows`), read at the entity's row of the
    field's view. Returns the bytes written; raises when they would pass the capacity."""
    var n = Int(d[unsafe_offset=0])
    var views = Int(d[unsafe_offset=1])
    var fields = Int(d[unsafe_offset=2])
    var version = Int(d[unsafe_offset=3])
    var out_offsets = i64p(Int(d[unsafe_offset=4]))
    var out = u8p(Int(d[unsafe_offset=5]))
    var capacity = Int(d[unsafe_offset=6])
    var ok = u8p(Int(d[unsafe_offset=7]))
    var tables = U64P(unsafe_from_address=Int(d[unsafe_offset=8]))
    var names = u8p(Int(d[unsafe_offset=9]))
    var name_offsets = i64p(Int(d[unsafe_offset=10]))
    var view_of = i64p(Int(d[unsafe_offset=11]))
    var bounds = i64p(Int(d[unsafe_offset=12]))
    var rows = i64p(Int(d[unsafe_offset=13]))
    var names_ok = List[Bool](capacity=fields)
    for k in range(fields):
        var start = Int(name_offsets[unsafe_offset=k])
        var size = Int(name_offsets[unsafe_offset=k + 1]) - start
        names_ok.append(size <= MAX_STRING and not integer_like(names, start, size))
    var at = 0
    out_offsets[unsafe_offset=0] = 0
    for i in range(n):
        # sizes first: the head carries the listpack's length
        var fits = True
        var present = 0
        var entries = 0
        for k in range(fields):
            var r = Int(rows[unsafe_offset=i * views + Int(view_of[unsafe_offset=k])])
            if r < 0:
                continue
            var value = 0
            for q in range(Int(bounds[unsafe_offset=k]), Int(bounds[unsafe_offset=k + 1])):
                value += part_size(d.unsafe_offset(HEAD_WORDS + PART_WORDS * q), r)
            var name = Int(name_offsets[unsafe_offset=k + 1]) - Int(name_offsets[unsafe_offset=k])
            if value > MAX_STRING or not names_ok[k]:
                fits = False
            present += 1
            entries += name + value + 4
        if not fits or present == 0 or present > MAX_FIELDS:
            ok[unsafe_offset=i] = 0
            out_offsets[unsafe_offset=i + 1] = Int64(at)
            continue
        var size = 7 + entries  # + u32 total bytes, u16 elements, 0xFF
        var head = 1 if size < 64 else (2 if size < 16384 else 5)
        if at + 1 + head + size + 10 > capacity:
            raise Error(String("ValueError: entity ", i, " does not fit the output"))
        var start = at
        out[unsafe_offset=at] = RDB_TYPE_HASH_LISTPACK
        at += 1
        if head == 1:
            out[unsafe_offset=at] = UInt8(size)
        elif head == 2:
            out[unsafe_offset=at] = UInt8(0x40 | (size >> 8))
            out[unsafe_offset=at + 1] = UInt8(size & 0xFF)
        else:
            out[unsafe_offset=at] = 0x80
            for b in range(4):
                out[unsafe_offset=at + 1 + b] = UInt8((size >> (24 - 8 * b)) & 0xFF)
        at += head
        for b in range(4):
            out[unsafe_offset=at + b] = UInt8((size >> (8 * b)) & 0xFF)
        out[unsafe_offset=at + 4] = UInt8((2 * present) & 0xFF)
        out[unsafe_offset=at + 5] = UInt8((2 * present) >> 8)
        at += 6
        for k in range(fields):
            var r = Int(rows[unsafe_offset=i * views + Int(view_of[unsafe_offset=k])])
            if r < 0:
                continue
            var name_start = Int(name_offsets[unsafe_offset=k])
            var name = Int(name_offsets[unsafe_offset=k + 1]) - name_start
            out[unsafe_offset=at] = UInt8(0x80 | name)
            for j in range(name):
                out[unsafe_offset=at + 1 + j] = names[unsafe_offset=name_start + j]
            out[unsafe_offset=at + 1 + name] = UInt8(name + 1)
            at += name + 2
            var value_at = at + 1
            var value = 0
            for q in range(Int(bounds[unsafe_offset=k]), Int(bounds[unsafe_offset=k + 1])):
                var w = d.unsafe_offset(HEAD_WORDS + PART_WORDS * q)
                var data = part_bytes(w)
                var from_ = part_start(w, r)
                var part = part_size(w, r)
                for j in range(part):
                    out[unsafe_offset=value_at + value + j] = data[unsafe_offset=from_ + j]
                value += part
            out[unsafe_offset=at] = UInt8(0x80 | value)
            out[unsafe_offset=value_at + value] = UInt8(value + 1)
            if integer_like(out, value_at, value):
                fits = False
            at = value_at + value + 1
        out[unsafe_offset=at] = 0xFF
        out[unsafe_offset=at + 1] = UInt8(version & 0xFF)
        out[unsafe_offset=at + 2] = UInt8((version >> 8) & 0xFF)
        at += 3
        var crc = crc64_of(out, start, at, tables)
        for b in range(8):
            out[unsafe_offset=at + b] = UInt8((crc >> UInt64(8 * b)) & 0xFF)
        at += 8
        if not fits:  # a value reads as an integer: the server would not keep this listpack
            at = start
        ok[unsafe_offset=i] = 1 if fits else 0
        out_offsets[unsafe_offset=i + 1] = Int64(at)
    return at
