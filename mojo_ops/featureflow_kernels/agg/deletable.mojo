"""The deletable half of the aggregation contract: the states of the rolling
passes, whose frames lose rows as well as gain them.

A rolling frame's count, compensated sum and shifted moments (var/std) can
take a row out again (`remove`): adding -x by `two_sum` undoes adding x up to
the compensation, which `two_sum` keeps exactly. Their min/max (monotonic
deques) and first/last (FIFOs of rows) cannot, and each pass keeps those as
links among its own rows (see the passes).

As in `contract.RunningState`, the math is written once, generic over where
the state's words live: `SumState` (count, sum, its compensation) and
`MomentsState` (the sums of d = x - shift and of d^2 with their
compensations, the shift and whether it is set), each a getter and a setter a
word. A pass's typed key view (`rolling/_inorder.InorderKey`,
`_region.RegionKey`, `_stream.StreamKey`, ...) names its words at `comptime`
offsets; `Sums` and `Moments` hold them in registers (`_grouped`, and a
pass's loop over the rows that leave one key). The functions are
`@always_inline` and monomorphised: a pass compiles to the update it wrote
out on its words, every word read and written where it was, the same
floating-point operations in the same order (outputs bit-identical;
`bench/kernels_identity.py`).

`SUM` (a compile-time parameter, as in the passes) says whether the sum is
kept at all: the count always is.
"""

from featureflow_kernels.abi import f64p, i64p
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.agg.sums import add_square, sample_variance, two_sum


trait SumState(TrivialRegisterPassable):
    """Where a deletable sum's words live: the count of non-null rows, the sum
    and its compensation (`sum + sum_c` is the value)."""

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


@always_inline
def sum_clear[S: SumState](mut s: S):
    """No rows: count 0, the sums exactly 0."""
    s.set_count(0)
    s.set_sum(0.0)
    s.set_sum_c(0.0)


@always_inline
def sum_start[S: SumState](mut s: S, v: Float64):
    """Exactly the one value v (not two_sum from 0: -0.0 stays -0.0)."""
    s.set_count(1)
    s.set_sum(v)
    s.set_sum_c(0.0)


@always_inline
def sum_add[S: SumState, //, SUM: Bool](mut s: S, v: Float64):
    """A non-null value enters: the count, then two_sum into the sum."""
    s.set_count(s.count() + 1)
    comptime if SUM:
        var sm = s.sum()
        var sc = s.sum_c()
        two_sum(sm, sc, v)
        s.set_sum(sm)
        s.set_sum_c(sc)


@always_inline
def sum_remove[S: SumState, //, SUM: Bool](mut s: S, x: Float64):
    """A non-null value x that entered leaves, the state keeping other rows:
    two_sum of -x into the sum."""
    s.set_count(s.count() - 1)
    comptime if SUM:
        var sm = s.sum()
        var sc = s.sum_c()
        two_sum(sm, sc, -x)
        s.set_sum(sm)
        s.set_sum_c(sc)


@always_inline
def sum_remove_or_clear[S: SumState, //, SUM: Bool](mut s: S, x: Float64) -> Bool:
    """x leaves; when it was the last row the sums restart at exactly 0 (instead
    of carrying the rounding noise of the rows that left) and True says so:
    the caller then clears what else it keeps of the frame."""
    var n = s.count() - 1
    s.set_count(n)
    if n == 0:
        s.set_sum(0.0)
        s.set_sum_c(0.0)
        return True
    comptime if SUM:
        var sm = s.sum()
        var sc = s.sum_c()
        two_sum(sm, sc, -x)
        s.set_sum(sm)
        s.set_sum_c(sc)
    return False


@always_inline
def sum_total[S: SumState](s: S) -> Float64:
    """The sum's value (0.0 for no rows)."""
    return s.sum() + s.sum_c()


@always_inline
def sum_emit[S: SumState, //, SUM: Bool](s: S, count: Int, o: Outs, q: Int):
    """count, sum, mean as output row q (`count` is s.count(), read by the
    caller where the pass read it; 0 where there is no value: the validity
    bits say null)."""
    var has = count > 0
    if o.count != 0:
        i64p(o.count)[unsafe_offset=q] = Int64(count)
    comptime if SUM:
        var rsum = 0.0
        if has:
            rsum = sum_total(s)
        if o.sum != 0:
            f64p(o.sum)[unsafe_offset=q] = rsum
        if o.mean != 0:
            f64p(o.mean)[unsafe_offset=q] = rsum / Float64(count) if has else 0.0


@fieldwise_init
struct Sums(SumState):
    """A deletable sum in registers."""

    var n: Int64
    var s: Float64
    var s_c: Float64

    @always_inline
    @staticmethod
    def empty() -> Self:
        return Self(0, 0.0, 0.0)

    @always_inline
    @staticmethod
    def of[S: SumState](s: S) -> Self:
        """A copy of the words of s (all three read)."""
        return Self(s.count(), s.sum(), s.sum_c())

    @always_inline
    def store[S: SumState, //, SUM: Bool](self, mut s: S):
        """Write the count (and with SUM the sums) to the words of s."""
        s.set_count(self.n)
        comptime if SUM:
            s.set_sum(self.s)
            s.set_sum_c(self.s_c)

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


trait MomentsState(TrivialRegisterPassable):
    """Where var/std's words live: compensated sums of d = x - shift (`s1`) and
    of d^2 (`s2`), the shift (the first value since the frame was last empty:
    shifting by a value of the data keeps S2 - S1^2 / n free of catastrophic
    cancellation when the values share a large offset) and whether it is set."""

    def s1(self) -> Float64:
        ...

    def s1_c(self) -> Float64:
        ...

    def s2(self) -> Float64:
        ...

    def s2_c(self) -> Float64:
        ...

    def set_sums(mut self, s1: Float64, s1_c: Float64, s2: Float64, s2_c: Float64):
        ...

    def shift_set(self) -> Bool:
        ...

    def shift(self) -> Float64:
        ...

    def set_shift(mut self, v: Float64):
        """Shift by v from now on (and mark the shift set)."""
        ...

    def clear(mut self):
        """No rows: the sums exactly 0, the shift unset."""
        ...


@always_inline
def moments_add[S: MomentsState](mut s: S, v: Float64):
    """A non-null value enters (the first since the frame was empty sets the shift)."""
    if not s.shift_set():
        s.set_shift(v)
    var d = v - s.shift()
    var s1 = s.s1()
    var s1c = s.s1_c()
    var s2 = s.s2()
    var s2c = s.s2_c()
    two_sum(s1, s1c, d)
    add_square(s2, s2c, d, 1.0)
    s.set_sums(s1, s1c, s2, s2c)


@always_inline
def moments_remove[S: MomentsState](mut s: S, x: Float64):
    """A non-null value x that entered leaves (the frame keeps other rows)."""
    var d = x - s.shift()
    var s1 = s.s1()
    var s1c = s.s1_c()
    var s2 = s.s2()
    var s2c = s.s2_c()
    two_sum(s1, s1c, -d)
    add_square(s2, s2c, d, -1.0)
    s.set_sums(s1, s1c, s2, s2c)


@always_inline
def moments_variance[S: MomentsState](s: S, count: Int) -> Float64:
    """The sample variance of the frame's `count` (> 1) values."""
    return sample_variance(s.s1(), s.s1_c(), s.s2(), s.s2_c(), count)


@fieldwise_init
struct Moments(MomentsState):
    """var/std's state in registers."""

    var a: Float64
    var a_c: Float64
    var b: Float64
    var b_c: Float64
    var at: Float64
    var is_set: Bool

    @always_inline
    @staticmethod
    def empty() -> Self:
        return Self(0.0, 0.0, 0.0, 0.0, 0.0, False)

    @always_inline
    def s1(self) -> Float64:
        return self.a

    @always_inline
    def s1_c(self) -> Float64:
        return self.a_c

    @always_inline
    def s2(self) -> Float64:
        return self.b

    @always_inline
    def s2_c(self) -> Float64:
        return self.b_c

    @always_inline
    def set_sums(mut self, s1: Float64, s1_c: Float64, s2: Float64, s2_c: Float64):
        self.a = s1
        self.a_c = s1_c
        self.b = s2
        self.b_c = s2_c

    @always_inline
    def shift_set(self) -> Bool:
        return self.is_set

    @always_inline
    def shift(self) -> Float64:
        return self.at

    @always_inline
    def set_shift(mut self, v: Float64):
        self.at = v
        self.is_set = True

    @always_inline
    def clear(mut self):
        """The sums 0 and the shift unset (its value is kept: never read unset)."""
        self.a = 0.0
        self.a_c = 0.0
        self.b = 0.0
        self.b_c = 0.0
        self.is_set = False


@always_inline
def frame_add(mut sums: Sums, mut moments: Moments, v: Float64, need_sum: Bool, need_sq: Bool):
    """A non-null value v enters a frame held in registers (`Sliding`, a resumed
    `rolling/_resume.FrameState`): the count, the sum where wanted, the moments where
    var/std are wanted."""
    if need_sum:
        sum_add[True](sums, v)
    else:
        sum_add[False](sums, v)
    if need_sq:
        moments_add(moments, v)


@always_inline
def frame_remove(mut sums: Sums, mut moments: Moments, v: Float64, need_sum: Bool, need_sq: Bool):
    """A non-null value v that entered leaves such a frame; when it was the last row
    the sums and moments restart at exactly 0 (the shift unset)."""
    var cleared: Bool
    if need_sum:
        cleared = sum_remove_or_clear[True](sums, v)
    else:
        cleared = sum_remove_or_clear[False](sums, v)
    if cleared:
        moments.clear()
    elif need_sq:
        moments_remove(moments, v)
