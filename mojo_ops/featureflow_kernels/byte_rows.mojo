"""Byte strings joined row by row: row i of the output is part 0's row i, then part 1's...

The online writers build each entity's command or payload from many parts (a field
name, a length, a value's bytes), a column of rows at a time. A part is one of:

- PACKED: Arrow's binary layout, row i is `data[offsets[i]:offsets[i + 1]]`;
- MATRIX: row i is the first `lengths[i]` bytes (all `width` of them when there are no
  lengths) at `data + i * stride`; a stride of 0 repeats one row (a constant).

Bytes within a matrix row are contiguous; the caller makes them so.
"""

from featureflow_kernels.abi import I64P, U8P, i64p, u8p

comptime PACKED = 0
comptime MATRIX = 1
comptime PART_WORDS = 5
comptime HEAD_WORDS = 5


@always_inline
def part_bytes(w: I64P) -> U8P:
    """The bytes of the part whose PART_WORDS start at `w`."""
    return u8p(Int(w[unsafe_offset=1]))


@always_inline
def part_start(w: I64P, i: Int) -> Int:
    """Where row `i` of the part whose PART_WORDS start at `w` begins in its bytes."""
    if Int(w[unsafe_offset=0]) == PACKED:
        return Int(i64p(Int(w[unsafe_offset=2]))[unsafe_offset=i])
    return i * Int(w[unsafe_offset=4])


@always_inline
def part_size(w: I64P, i: Int) -> Int:
    """The bytes of row `i` of the part whose PART_WORDS start at `w`."""
    if Int(w[unsafe_offset=0]) == PACKED:
        var offsets = i64p(Int(w[unsafe_offset=2]))
        return Int(offsets[unsafe_offset=i + 1]) - Int(offsets[unsafe_offset=i])
    var lengths = Int(w[unsafe_offset=2])
    return Int(i64p(lengths)[unsafe_offset=i]) if lengths != 0 else Int(w[unsafe_offset=3])


def join_rows(d: I64P) raises -> Int:
    """Descriptor: n, parts P, int64 out offsets addr (n + 1, written), out bytes addr,
    out capacity; then PART_WORDS per part: kind, bytes addr, int64 offsets addr
    (PACKED) or lengths addr (MATRIX; 0: every row is `width` bytes), width, stride.
    Returns the bytes written; raises when they would pass the capacity."""
    var n = Int(d[unsafe_offset=0])
    var parts = Int(d[unsafe_offset=1])
    var out_offsets = i64p(Int(d[unsafe_offset=2]))
    var out = u8p(Int(d[unsafe_offset=3]))
    var capacity = Int(d[unsafe_offset=4])
    var at = 0
    out_offsets[unsafe_offset=0] = 0
    for i in range(n):
        for p in range(parts):
            var w = d.unsafe_offset(HEAD_WORDS + PART_WORDS * p)
            var data = part_bytes(w)
            var start = part_start(w, i)
            var size = part_size(w, i)
            if size < 0 or at + size > capacity:
                raise Error(
                    String("ValueError: row ", i, " of part ", p, " does not fit the output")
                )
            for j in range(size):
                out[unsafe_offset=at + j] = data[unsafe_offset=start + j]
            at += size
        out_offsets[unsafe_offset=i + 1] = Int64(at)
    return at
