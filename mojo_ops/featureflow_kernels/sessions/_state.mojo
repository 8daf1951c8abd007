"""One key's open session in the in-order passes (`_in_order`, `_by_close`).

The state is `SREC` int64 words a key in the caller's scratch; `SessionState`
names them instead of word offsets. Words 1..6 mean the same in both passes:
end (ts + gap of the last row; `_by_close`: NO_END when none is open), count,
sum and its compensation, min, max (float64). Word 0 and 7 are the pass's own:
`_in_order` keeps the output slot (`head`: -1 - the first slot before any row)
and the last value; `_by_close` the session start (`head`, later the key's
output cursor) and the sessions closed (`closed`).
"""

from featureflow_kernels.abi import F64P, I64P, U8P, f64p, i64p
from featureflow_kernels.buffers import put
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.agg.sums import two_sum

comptime SREC = 8
"""int64 words of one key's `SessionState`."""


@fieldwise_init
struct SessionState(Copyable, Movable):
    """A view of key `k`'s `SREC` words in a pass's state array."""

    var w: I64P
    var f: F64P

    @always_inline
    @staticmethod
    def of(st: I64P, k: Int) -> Self:
        var w = st.unsafe_offset(k * SREC)
        return Self(w, f64p(Int(w)))

    @always_inline
    def head(self) -> Int64:
        return self.w[unsafe_offset=0]

    @always_inline
    def set_head(self, v: Int64):
        self.w[unsafe_offset=0] = v

    @always_inline
    def end(self) -> Int64:
        return self.w[unsafe_offset=1]

    @always_inline
    def set_end(self, v: Int64):
        self.w[unsafe_offset=1] = v

    @always_inline
    def count(self) -> Int:
        return Int(self.w[unsafe_offset=2])

    @always_inline
    def last(self) -> Float64:
        return self.f[unsafe_offset=7]

    @always_inline
    def set_last(self, v: Float64):
        self.f[unsafe_offset=7] = v

    @always_inline
    def closed(self) -> Int:
        return Int(self.w[unsafe_offset=7])

    @always_inline
    def set_closed(self, c: Int):
        self.w[unsafe_offset=7] = Int64(c)

    @always_inline
    def open(self):
        """Start a session: no values yet (min and max are set by the first)."""
        self.w[unsafe_offset=2] = 0
        self.f[unsafe_offset=3] = 0.0
        self.f[unsafe_offset=4] = 0.0

    @always_inline
    def add(self, v: Float64) -> Bool:
        """Add a non-null value; True when it is the session's first."""
        var count = self.count()
        if count == 0:
            self.f[unsafe_offset=5] = v
            self.f[unsafe_offset=6] = v
        else:
            self.f[unsafe_offset=5] = min(self.f[unsafe_offset=5], v)
            self.f[unsafe_offset=6] = max(self.f[unsafe_offset=6], v)
        self.w[unsafe_offset=2] = Int64(count + 1)
        var sm = self.f[unsafe_offset=3]
        var sc = self.f[unsafe_offset=4]
        two_sum(sm, sc, v)
        self.f[unsafe_offset=3] = sm
        self.f[unsafe_offset=4] = sc
        return count == 0

    @always_inline
    def emit(self, o: Outs, j: Int, lev: U8P):
        """Write count, sum, mean, min, max and the validity level as output j."""
        var count = self.count()
        var has = count > 0
        var total = self.f[unsafe_offset=3] + self.f[unsafe_offset=4]
        if o.count != 0:
            i64p(o.count)[unsafe_offset=j] = Int64(count)
        if o.sum != 0:
            f64p(o.sum)[unsafe_offset=j] = total if has else 0.0
        if o.mean != 0:
            f64p(o.mean)[unsafe_offset=j] = total / Float64(count) if has else 0.0
        if o.min != 0:
            put(o.min, o.min_dt, j, self.f[unsafe_offset=5] if has else 0.0)
        if o.max != 0:
            put(o.max, o.max_dt, j, self.f[unsafe_offset=6] if has else 0.0)
        lev[unsafe_offset=j] = UInt8(min(count, 2))
