"""Integer keys to dense int32 codes through a direct table (no hashing).
"""

from featureflow_kernels.abi import I32P, I64P, i64p


def encode_int_keys(d: I64P) raises -> Int:
    """Descriptor: n, int64 keys addr, lowest key, span (highest - lowest + 1),
    int32 table addr (span slots, scratch), int32 codes out addr, int64 first
    rows out addr (min(n, span) slots). Codes are numbered in order of first
    occurrence (as Arrow's dictionary_encode does), through a direct table
    indexed by key - lowest: no hashing. Returns the number of distinct keys."""
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
    return g
