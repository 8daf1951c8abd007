"""One key's state in the in-order session passes (`_in_order`, `_by_close`):
`SREC` int64 words a key in the caller's scratch, named by `SessionKey`
instead of word offsets.

| word | `_in_order` | `_by_close` |
|---|---|---|
| 0 `head` | pass 1: sessions counted; then the open session's output slot (-1 - the key's first slot before any row) | the open session's start (ns); at the end the key's output cursor |
| 1 `end` | the open session's end (ts + gap of its last row, ns) | the same; `NO_END` when none is open |
| 2..6 | the open session's `Running` (count, sum, sum compensation, min, max); pass 1 keeps the session's start (ns) in word 2 | the open session's `Running` |
| 7 | the last value (float64) | the sessions closed |
"""

from featureflow_kernels.abi import F64P, I64P, U8P
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.agg.contract import RunningState, running_add, running_emit

comptime SREC = 8
"""int64 words of one key's state."""


@fieldwise_init
struct SessionKey(RunningState):
    """Key state words at `s` (a multiple of SREC) of the state array `w`; `f` is
    the same array as float64 (both loop-invariant: the address of a word is
    the one the pass computed before the view, so are its loads and stores)."""

    var w: I64P
    var f: F64P
    var s: Int

    comptime HEAD = 0
    comptime END = 1
    comptime COUNT = 2
    comptime SUM = 3
    comptime SUM_C = 4
    comptime MIN = 5
    comptime MAX = 6
    comptime AUX = 7

    @always_inline
    def head(self) -> Int64:
        return self.w[unsafe_offset=self.s + Self.HEAD]

    @always_inline
    def set_head(self, v: Int64):
        self.w[unsafe_offset=self.s + Self.HEAD] = v

    @always_inline
    def end(self) -> Int64:
        return self.w[unsafe_offset=self.s + Self.END]

    @always_inline
    def set_end(self, v: Int64):
        self.w[unsafe_offset=self.s + Self.END] = v

    @always_inline
    def counted_start(self) -> Int64:
        """`_in_order` pass 1: the start of the session being counted (ns)."""
        return self.w[unsafe_offset=self.s + Self.COUNT]

    @always_inline
    def set_counted_start(self, t: Int64):
        self.w[unsafe_offset=self.s + Self.COUNT] = t

    @always_inline
    def open(self):
        """An empty `Running` (min and max are set by its first value)."""
        self.w[unsafe_offset=self.s + Self.COUNT] = 0
        self.f[unsafe_offset=self.s + Self.SUM] = 0.0
        self.f[unsafe_offset=self.s + Self.SUM_C] = 0.0

    @always_inline
    def count(self) -> Int64:
        return self.w[unsafe_offset=self.s + Self.COUNT]

    @always_inline
    def set_count(mut self, n: Int64):
        self.w[unsafe_offset=self.s + Self.COUNT] = n

    @always_inline
    def sum(self) -> Float64:
        return self.f[unsafe_offset=self.s + Self.SUM]

    @always_inline
    def set_sum(mut self, v: Float64):
        self.f[unsafe_offset=self.s + Self.SUM] = v

    @always_inline
    def sum_c(self) -> Float64:
        return self.f[unsafe_offset=self.s + Self.SUM_C]

    @always_inline
    def set_sum_c(mut self, v: Float64):
        self.f[unsafe_offset=self.s + Self.SUM_C] = v

    @always_inline
    def min(self) -> Float64:
        return self.f[unsafe_offset=self.s + Self.MIN]

    @always_inline
    def set_min(mut self, v: Float64):
        self.f[unsafe_offset=self.s + Self.MIN] = v

    @always_inline
    def max(self) -> Float64:
        return self.f[unsafe_offset=self.s + Self.MAX]

    @always_inline
    def set_max(mut self, v: Float64):
        self.f[unsafe_offset=self.s + Self.MAX] = v

    @always_inline
    def add(mut self, v: Float64):
        """`Running`'s add on the key's words."""
        running_add(self, v)

    @always_inline
    def emit(self, o: Outs, j: Int, lev: U8P):
        """`Running`'s emit from the key's words."""
        running_emit(self, o, j, lev)

    @always_inline
    def last(self) -> Float64:
        return self.f[unsafe_offset=self.s + Self.AUX]

    @always_inline
    def set_last(self, v: Float64):
        self.f[unsafe_offset=self.s + Self.AUX] = v

    @always_inline
    def closed(self) -> Int64:
        return self.w[unsafe_offset=self.s + Self.AUX]

    @always_inline
    def set_closed(self, c: Int64):
        self.w[unsafe_offset=self.s + Self.AUX] = c


@fieldwise_init
struct SessionKeys(TrivialRegisterPassable):
    """The key states of a pass: `SREC` words a key from `w`."""

    var w: I64P
    var f: F64P

    @always_inline
    @staticmethod
    def of(st: I64P) -> Self:
        return Self(st, F64P(unsafe_from_address=Int(st)))

    @always_inline
    def key(self, c: Int) -> SessionKey:
        return SessionKey(self.w, self.f, c * SREC)
