"""The boundary with Python: codes, the descriptor header and the build facts.

Every kernel takes the address of one int64 descriptor array: the header
(`read_inputs`, words 0..`HEADER` - 1), then call-specific words documented at
each entry point, then output columns of 4 words (`read_columns`). The codes
below are checked against Python's tables when the library loads
(`featureflow.ops._mojo.loader`), and the scratch sizes are asked for by Python
through the bindings (`kernels.mojo`), never recomputed there.
"""

from std.sys import get_defined_string

comptime ABI_VERSION = 9
"""Bumped whenever a descriptor layout, a code or a kernel's arguments change;
the Python loader refuses a library built with another one."""

comptime SOURCES_DIGEST = get_defined_string["FEATUREFLOW_KERNELS_DIGEST", "unset"]()
"""Digest of the package sources this library was built from (passed by
scripts/build_kernels.py as `-D`); the loader compares it with the sources."""

comptime I64P = Pointer[Int64, MutUntrackedOrigin]
comptime I32P = Pointer[Int32, MutUntrackedOrigin]
comptime F64P = Pointer[Float64, MutUntrackedOrigin]
comptime F32P = Pointer[Float32, MutUntrackedOrigin]
comptime U8P = Pointer[UInt8, MutUntrackedOrigin]

# value / output dtype codes (featureflow.ops._inputs.VALUE_TYPES)
comptime DT_F64 = 0
comptime DT_F32 = 1
comptime DT_I64 = 2
comptime DT_I32 = 3

# aggregate codes (featureflow.ops._aggs.AGGS, in order)
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


@fieldwise_init
struct Column(Copyable, Movable):
    var agg: Int
    var data: Int
    var valid: Int  # 0 when the column has no validity bitmap (count)
    var dtype: Int


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
