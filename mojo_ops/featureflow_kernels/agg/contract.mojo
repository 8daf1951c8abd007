"""The aggregation contract the passes share, in the spirit of Chronon's
`BaseAggregator`: an aggregate's state starts `empty()`, takes non-null values
by `add`, combines with the state of later disjoint rows by `merge`, and is
written out by `emit` (one output row of a window's columns `Outs`, with its
validity level: 0 no value, 1 one, 2 or more). `Aggregator` is that contract
for a state held as a value; `FrameAggregator` the same over a frame of
sorted rows that also loses rows (`remove`), which `Sliding` implements.

The math of an aggregate is written once, generic over where its state lives
(`RunningState`: the state's words with a getter and a setter each): in
registers (`Running`, the grouped session pass) or in a key's scratch words
(`sessions/_state.SessionKey`, the in-order session passes). The functions are
`@always_inline` and monomorphised, so a pass compiles to the update written out
on its words: each word read and written where the pass wrote it out, min and
max read only when asked for, the floating-point operations in the same order
(the outputs' bits do not change, and neither does the machine code's shape:
passing the words as `ref` arguments, or loading the whole state into a value
and storing it back, made the by-close session pass 3-7 % slower).

`Running`: count, compensated sum (`agg/sums.two_sum`) and min/max of a stream
of values: the state of a session. It is not deletable (min/max); the rolling
passes, whose frames also lose rows, take the contract's deletable half
(`agg/deletable`: count, sum, var/std's shifted moments) and keep min/max
and first/last as deques and FIFOs of their own (mojo_ops/README.md).
"""

from featureflow_kernels.abi import U8P, f64p, i64p
from featureflow_kernels.buffers import put
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.agg.sums import two_sum


trait Aggregator(TrivialRegisterPassable):
    """An aggregate's state over a set of non-null values, held as a value."""

    @staticmethod
    def empty() -> Self:
        """The state of no values."""
        ...

    def add(mut self, v: Float64):
        """Add one non-null (not NaN) value."""
        ...

    def merge(mut self, other: Self):
        """Add the values of `other`, which come after this state's."""
        ...

    def emit(self, o: Outs, j: Int, lev: U8P):
        """Write the aggregates this state answers as output row j of `o`, and
        its validity level (min(count, 2)) as lev[j]."""
        ...


trait FrameAggregator:
    """The contract over a frame of sorted rows whose bounds never decrease
    (`agg/sliding.Sliding`: hopping, count_distinct, sessions with
    count_distinct): rows enter by position at the frame's high end and leave
    by position at its low end, so the state keeps what min/max/first/last
    need (deques) beside its deletable parts (count, sums, moments, the
    count_distinct map)."""

    def reset(mut self, start: Int):
        """Empty the frame; the next rows begin at sorted position `start`."""
        ...

    def add(mut self, p: Int):
        """Row p enters the frame (a null or NaN value counts for nothing)."""
        ...

    def remove(mut self, p: Int):
        """Row p, the frame's lowest, leaves it."""
        ...

    def emit(self, row: Int):
        """Write the frame's aggregates to output row `row` of every column."""
        ...


trait RunningState(TrivialRegisterPassable):
    """Where a `Running` state's words live: count, sum and its compensation
    (`sum + sum_c` is the value), min and max (undefined while count is 0)."""

    def count(self) -> Int64:
        ...

    def set_count(mut self, n: Int64):
        ...

    def sum(self) -> Float64:
        ...

    def set_sum(mut self, v: Float64):
        ...

    def sum_c(self) -> Float64:
        ...

    def set_sum_c(mut self, v: Float64):
        ...

    def min(self) -> Float64:
        ...

    def set_min(mut self, v: Float64):
        ...

    def max(self) -> Float64:
        ...

    def set_max(mut self, v: Float64):
        ...


@always_inline
def running_add[S: RunningState](mut s: S, v: Float64):
    """Add a non-null value: the first sets min and max; two_sum into the sum."""
    var n = s.count()
    if n == 0:
        s.set_min(v)
        s.set_max(v)
    else:
        s.set_min(min(s.min(), v))
        s.set_max(max(s.max(), v))
    s.set_count(n + 1)
    var sm = s.sum()
    var sc = s.sum_c()
    two_sum(sm, sc, v)
    s.set_sum(sm)
    s.set_sum_c(sc)


@always_inline
def running_merge[S: RunningState, T: RunningState](mut s: S, other: T):
    """Add the values of `other` (later rows): counts add, min/max combine, the
    sum takes other's sum by two_sum and adds its compensation."""
    var m = other.count()
    if m == 0:
        return
    var n = s.count()
    if n == 0:
        s.set_min(other.min())
        s.set_max(other.max())
    else:
        s.set_min(min(s.min(), other.min()))
        s.set_max(max(s.max(), other.max()))
    s.set_count(n + m)
    var sm = s.sum()
    var sc = s.sum_c()
    two_sum(sm, sc, other.sum())
    s.set_sum(sm)
    s.set_sum_c(sc + other.sum_c())


@always_inline
def running_emit[S: RunningState](s: S, o: Outs, j: Int, lev: U8P):
    """count, sum, mean, min, max as output row j (0 where there is no value:
    the validity bits say null) and the level min(count, 2)."""
    var n = Int(s.count())
    var has = n > 0
    var total = s.sum() + s.sum_c()
    if o.count != 0:
        i64p(o.count)[unsafe_offset=j] = Int64(n)
    if o.sum != 0:
        f64p(o.sum)[unsafe_offset=j] = total if has else 0.0
    if o.mean != 0:
        f64p(o.mean)[unsafe_offset=j] = total / Float64(n) if has else 0.0
    if o.min != 0:
        put(o.min, o.min_dt, j, s.min() if has else 0.0)
    if o.max != 0:
        put(o.max, o.max_dt, j, s.max() if has else 0.0)
    lev[unsafe_offset=j] = UInt8(min(n, 2))


@fieldwise_init
struct Running(Aggregator, RunningState):
    """count, sum (two_sum: `sum + sum_c`), min and max in registers."""

    var n: Int64
    var s: Float64
    var s_c: Float64
    var lo: Float64
    var hi: Float64

    @always_inline
    @staticmethod
    def empty() -> Self:
        return Self(0, 0.0, 0.0, 0.0, 0.0)

    @always_inline
    def count(self) -> Int64:
        return self.n

    @always_inline
    def set_count(mut self, n: Int64):
        self.n = n

    @always_inline
    def sum(self) -> Float64:
        return self.s

    @always_inline
    def set_sum(mut self, v: Float64):
        self.s = v

    @always_inline
    def sum_c(self) -> Float64:
        return self.s_c

    @always_inline
    def set_sum_c(mut self, v: Float64):
        self.s_c = v

    @always_inline
    def min(self) -> Float64:
        return self.lo

    @always_inline
    def set_min(mut self, v: Float64):
        self.lo = v

    @always_inline
    def max(self) -> Float64:
        return self.hi

    @always_inline
    def set_max(mut self, v: Float64):
        self.hi = v

    @always_inline
    def total(self) -> Float64:
        """The sum (0.0 for no values)."""
        return self.s + self.s_c

    @always_inline
    def add(mut self, v: Float64):
        running_add(self, v)

    @always_inline
    def merge(mut self, other: Self):
        running_merge(self, other)

    @always_inline
    def emit(self, o: Outs, j: Int, lev: U8P):
        running_emit(self, o, j, lev)
