"""Rows gathered from several Arrow chunks of one fixed-width column, validity included.

The stream job's rolling state is runs (`runs.mojo`); merging runs gives the merged
rows as indices into the runs' concatenation (`merge_runs`), and each column of the
merged run is those rows of the runs' chunks. Gathered here in one pass per column,
straight from each chunk's buffers: no joined copy of the chunks first.
"""

from featureflow_kernels.abi import I64P, i64p, u8p

comptime CHUNK_WORDS = 4
"""Words per chunk: its first row's index in the concatenation, data addr (at the
chunk's row 0), validity addr (0: no nulls), validity bit offset."""
comptime HEAD_WORDS = 7


@always_inline
def _valid(addr: Int, bit: Int) -> Bool:
    return ((u8p(addr)[unsafe_offset=bit >> 3] >> UInt8(bit & 7)) & 1) != 0


def _gather[dt: DType](d: I64P) raises:
    var n = Int(d[unsafe_offset=0])
    var order = i64p(Int(d[unsafe_offset=1]))
    var chunks = Int(d[unsafe_offset=2])
    var total = Int(d[unsafe_offset=3])
    var out = Pointer[Scalar[dt], MutUntrackedOrigin](unsafe_from_address=Int(d[unsafe_offset=5]))
    var out_valid = Int(d[unsafe_offset=6])
    var c = 0
    var start = Int(d[unsafe_offset=HEAD_WORDS])
    var end = Int(d[unsafe_offset=HEAD_WORDS + CHUNK_WORDS]) if chunks > 1 else total
    for i in range(n):
        var g = Int(order[unsafe_offset=i])
        if g < start or g >= end:  # another chunk: a scan of the few chunks' starts
            if g < 0 or g >= total:
                raise Error(String("ValueError: row ", i, " takes ", g, " of ", total))
            c = 0
            while c + 1 < chunks and Int(d[unsafe_offset=HEAD_WORDS + CHUNK_WORDS * (c + 1)]) <= g:
                c += 1
            start = Int(d[unsafe_offset=HEAD_WORDS + CHUNK_WORDS * c])
            end = (
                Int(d[unsafe_offset=HEAD_WORDS + CHUNK_WORDS * (c + 1)]) if c + 1
                < chunks else total
            )
        var w = d.unsafe_offset(HEAD_WORDS + CHUNK_WORDS * c)
        var row = g - start
        var data = Pointer[Scalar[dt], MutUntrackedOrigin](
            unsafe_from_address=Int(w[unsafe_offset=1])
        )
        out[unsafe_offset=i] = data[unsafe_offset=row]
        if out_valid != 0:
            var valid = Int(w[unsafe_offset=2])
            if valid == 0 or _valid(valid, Int(w[unsafe_offset=3]) + row):
                var p = u8p(out_valid)
                p[unsafe_offset=i >> 3] = p[unsafe_offset=i >> 3] | (UInt8(1) << UInt8(i & 7))


def gather_chunks(d: I64P) raises -> Int:
    """Descriptor: n, int64 order addr (n indices into the chunks' concatenation), chunks
    C (>= 1), total rows of the chunks, value width in bytes (1, 2, 4 or 8), out data addr
    (n values), out validity addr (0: no chunk has nulls; else zeroed by the caller, a
    bit set here per valid row); then CHUNK_WORDS per chunk, in order. Returns n; raises
    on an index outside the chunks or another width."""
    var width = Int(d[unsafe_offset=4])
    if width == 8:
        _gather[DType.int64](d)
    elif width == 4:
        _gather[DType.int32](d)
    elif width == 2:
        _gather[DType.int16](d)
    elif width == 1:
        _gather[DType.int8](d)
    else:
        raise Error(String("ValueError: values of ", width, " bytes cannot be gathered"))
    return Int(d[unsafe_offset=0])
