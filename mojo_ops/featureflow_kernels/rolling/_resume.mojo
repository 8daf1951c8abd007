"""Frame states: a key's frame at its latest query, kept between calls of
`rolling_query` so that the next call resumes it instead of summing the
frame's rows again. The stream job asks, every micro-batch, for the frames of
each touched key's new events with 24 h of its events as context; resumed,
a key costs the rows that enter and leave its frame since the last call, not
the rows the frame holds.

A frame state is `FRAME_WORDS` int64 words per (key, window), floats stored
by their bits (`FrameState` names them). It holds the aggregates of exactly
the key's rows with ts in [low, t_last] (ns, both ends inclusive): count,
the compensated sum, the shifted moments of `Sliding` (same shift, same
two_sum and exact squares, so a resumed frame continues the arithmetic of the
walk that wrote it), and the frame's min and max as values; and `clip`, the
time before which the caller may have dropped rows since.

Resuming (`rolling/_query`): the rows of the call's newest run are the rows
added since the state was written, the others were there. A key's queries
after t_last start from the state; when the key has new rows or queries at
or before t_last (events out of order), the state first moves back to
t0 < all of them: the old rows after t0 leave it, and the rows from the
frame's low end at t0 that it lacked enter (the old ones before `low`, the
new ones up to t0). Then the frame walks forward: rows after t0 enter, rows
from its low end on leave, in ts order. A min or max cannot be updated when
its row leaves (no deque of the old rows is kept), so a removal of a value
equal to the state's min or max gives the key's window back to the walk
over all its rows, as does a low end before `clip`.

Before a state is written its frame is clipped to the call's clip: rows
before it leave, since the caller drops them from the runs (no later frame
reaches them), so a later call finds every row the state holds in the runs.
"""

from std.utils.numerics import isnan
from std.math import sqrt
from featureflow_kernels.abi import (
    A_COUNT,
    A_MAX,
    A_MEAN,
    A_MIN,
    A_STD,
    A_SUM,
    A_VAR,
    Column,
    F64P,
    I64P,
    U8P,
    f64p,
    i64p,
)
from featureflow_kernels.buffers import set_valid, store
from featureflow_kernels.agg.sliding import Sliding
from featureflow_kernels.agg.deletable import (
    Moments,
    Sums,
    frame_add,
    frame_remove,
    moments_variance,
    sum_total,
)
from featureflow_kernels.rolling._frames import frame_lower


comptime DEQUE_KEEP = 3
"""Entries of each of the frame's min and max deques a state keeps (`OldDeque`)."""
comptime F_DEQUES = 14
"""Word of the deques' entry counts (bits 0-7 min, 8-15 max) and truncation flags
(bit 16 min, bit 17 max); the entries follow, (ts, value bits) pairs, min first."""
comptime FRAME_WORDS = F_DEQUES + 1 + 4 * DEQUE_KEEP
"""Words of one (key, window) frame state; `FrameState` and `OldDeque` name them."""
comptime F_VALID = 1
comptime F_SHIFT_SET = 2


@fieldwise_init
struct FrameState(Copyable, Movable):
    """The aggregates of a key's rows with ts in [low, t_last] (module docstring):
    the deletable half of the contract (`agg/deletable`: `Sums`, `Moments`) and the
    frame's min and max as values (meaningful while count > 0)."""

    var sums: Sums
    var moments: Moments
    var min: Float64
    var max: Float64

    @staticmethod
    def empty() -> FrameState:
        """The state of no rows (a walk's frame after `Sliding.reset`)."""
        return FrameState(Sums.empty(), Moments.empty(), 0.0, 0.0)

    @always_inline
    def count(self) -> Int:
        return Int(self.sums.n)

    @staticmethod
    def clip(frames: Int, at: Int) -> Int:
        """Rows before this time may have left the runs since the state was written."""
        return Int(i64p(frames)[unsafe_offset=at + 13])

    @staticmethod
    def is_valid(frames: Int, at: Int) -> Bool:
        """Whether the words from `at` of the states at address `frames` hold one."""
        return (Int(i64p(frames)[unsafe_offset=at]) & F_VALID) != 0

    @staticmethod
    def t_last(frames: Int, at: Int) -> Int:
        return Int(i64p(frames)[unsafe_offset=at + 1])

    @staticmethod
    def low(frames: Int, at: Int) -> Int:
        return Int(i64p(frames)[unsafe_offset=at + 2])

    @staticmethod
    def load(frames: Int, at: Int) -> FrameState:
        var w = i64p(frames)
        var f = f64p(frames)
        return FrameState(
            Sums(w[unsafe_offset=at + 3], f[unsafe_offset=at + 4], f[unsafe_offset=at + 5]),
            Moments(
                f[unsafe_offset=at + 7],
                f[unsafe_offset=at + 8],
                f[unsafe_offset=at + 9],
                f[unsafe_offset=at + 10],
                f[unsafe_offset=at + 6],
                (Int(w[unsafe_offset=at]) & F_SHIFT_SET) != 0,
            ),
            f[unsafe_offset=at + 11],
            f[unsafe_offset=at + 12],
        )

    @staticmethod
    def of_sliding(s: Sliding) -> FrameState:
        """The state of `s`'s current frame (its deques' fronts as min and max)."""
        var mn: Float64 = 0.0
        var mx: Float64 = 0.0
        if s.need_min and s.qmin_t > s.qmin_h:
            mn = s.svals[unsafe_offset=Int(s.qmin[unsafe_offset=s.qmin_h])]
        if s.need_max and s.qmax_t > s.qmax_h:
            mx = s.svals[unsafe_offset=Int(s.qmax[unsafe_offset=s.qmax_h])]
        return FrameState(
            s.sums,
            s.moments,
            mn,
            mx,
        )

    def write(self, frames: Int, at: Int, t_last: Int, low: Int, clip: Int):
        """Store this state, of the rows with ts in [low, t_last], at words `at`..;
        `clip`: the time before which the caller drops rows."""
        var w = i64p(frames)
        var f = f64p(frames)
        var flags = F_VALID | (F_SHIFT_SET if self.moments.shift_set() else 0)
        w[unsafe_offset=at] = Int64(flags)
        w[unsafe_offset=at + 1] = Int64(t_last)
        w[unsafe_offset=at + 2] = Int64(low)
        w[unsafe_offset=at + 3] = self.sums.n
        f[unsafe_offset=at + 4] = self.sums.s
        f[unsafe_offset=at + 5] = self.sums.s_c
        f[unsafe_offset=at + 6] = self.moments.shift()
        f[unsafe_offset=at + 7] = self.moments.s1()
        f[unsafe_offset=at + 8] = self.moments.s1_c()
        f[unsafe_offset=at + 9] = self.moments.s2()
        f[unsafe_offset=at + 10] = self.moments.s2_c()
        f[unsafe_offset=at + 11] = self.min
        f[unsafe_offset=at + 12] = self.max
        w[unsafe_offset=at + 13] = Int64(clip)

    @always_inline
    def add_sums(mut self, s: Sliding, v: Float64):
        """Value v (not NaN) enters the count, sums and moments, as in `Sliding.add`."""
        frame_add(self.sums, self.moments, v, s.need_sum, s.need_sq)

    @always_inline
    def remove_sums(mut self, s: Sliding, v: Float64):
        """Value v (not NaN) leaves the count, sums and moments (all reset when the
        frame empties, as in `Sliding.remove`)."""
        frame_remove(self.sums, self.moments, v, s.need_sum, s.need_sq)

    @always_inline
    def add(mut self, s: Sliding, v: Float64):
        """Row value v enters (NaN: nothing), as `Sliding.add` updates its aggregates."""
        if isnan(v):
            return
        self.add_sums(s, v)
        # the newest of equal extremes wins, as in Sliding's deques
        if self.count() == 1 or v <= self.min:
            self.min = v
        if self.count() == 1 or v >= self.max:
            self.max = v

    @always_inline
    def remove(mut self, s: Sliding, v: Float64) -> Bool:
        """Row value v leaves, as `Sliding.remove` updates its sums; False when it
        held the frame's min or max while other rows stay (which then is unknown)."""
        if isnan(v):
            return True
        self.remove_sums(s, v)
        if self.count() == 0:
            return True
        if s.need_min and v <= self.min:
            return False
        if s.need_max and v >= self.max:
            return False
        return True

    def emit(self, cols: List[Column], row: Int, mn: Float64, mx: Float64):
        """Output row `row` of every column, as `Sliding.emit` writes it, with the
        frame's min `mn` and max `mx`; a row without a value has its validity bit
        cleared (the row may have been written before)."""
        var count = self.count()
        for ref c in cols:
            var has = True
            var v: Float64 = 0.0
            if c.agg == A_COUNT:
                v = Float64(count)
            elif c.agg == A_SUM:
                has = count > 0
                v = sum_total(self.sums)
            elif c.agg == A_MEAN:
                has = count > 0
                v = sum_total(self.sums) / Float64(count) if has else 0.0
            elif c.agg == A_MIN:
                has = count > 0
                v = mn if has else 0.0
            elif c.agg == A_MAX:
                has = count > 0
                v = mx if has else 0.0
            else:  # A_STD or A_VAR (the caller resumes no other aggregate)
                has = count > 1
                if has:
                    v = moments_variance(self.moments, count)
                    if c.agg == A_STD:
                        v = sqrt(v)
            store(c.data, c.dtype, row, v if has else 0.0)
            if c.valid != 0:
                if has:
                    set_valid(c.valid, row)
                else:
                    clear_valid(c.valid, row)


@always_inline
def clear_valid(addr: Int, row: Int):
    var p = U8P(unsafe_from_address=addr)
    p[unsafe_offset=row >> 3] = p[unsafe_offset=row >> 3] & ~(UInt8(1) << UInt8(row & 7))


def clear_rows(cols: List[Column], qout: I64P, q0: Int, q1: Int):
    """Clear the validity bits of output rows qout[q0:q1] in every column."""
    for ref c in cols:
        if c.valid != 0:
            for q in range(q0, q1):
                clear_valid(c.valid, Int(qout[unsafe_offset=q]))


def resumable(cols: List[Column]) -> Bool:
    """Whether a frame state answers every column (count, sum, mean, min, max, std, var)."""
    for ref c in cols:
        if not (
            c.agg == A_COUNT
            or c.agg == A_SUM
            or c.agg == A_MEAN
            or c.agg == A_MIN
            or c.agg == A_MAX
            or c.agg == A_STD
            or c.agg == A_VAR
        ):
            return False
    return True


struct OldDeque(Copyable, Movable):
    """The first `DEQUE_KEEP` entries of the min (or max) deque of a state's rows, as a
    frame state keeps them: each entry the row (ts, value) that is the min of every
    row of the state at or after it (the newest of equal values), so the entries'
    times and values increase (decrease for max); `trunc`: the deque has more.

    While a state resumes, `head` entries have left the frame, and the rows added
    since pop the entries from `alive` on (a newer value at or below theirs)."""

    var frames: Int
    var at: Int
    var n: Int
    var trunc: Bool
    var is_max: Bool
    var head: Int
    var alive: Int
    var seen: Bool
    var best_added: Float64

    def __init__(out self, frames: Int, at: Int, is_max: Bool):
        """The deque of the state at words `at`.. (frames 0: none known)."""
        self.frames = frames
        self.at = at
        self.is_max = is_max
        self.n = 0
        self.trunc = True
        if frames != 0:
            var word = Int(i64p(frames)[unsafe_offset=at + F_DEQUES])
            self.n = (word >> 8) & 0xFF if is_max else word & 0xFF
            self.trunc = ((word >> (17 if is_max else 16)) & 1) != 0
        self.head = 0
        self.alive = self.n
        self.seen = False
        self.best_added = 0.0

    @always_inline
    def _first(self) -> Int:
        return self.at + F_DEQUES + 1 + (2 * DEQUE_KEEP if self.is_max else 0)

    @always_inline
    def ts(self, i: Int) -> Int:
        return Int(i64p(self.frames)[unsafe_offset=self._first() + 2 * i])

    @always_inline
    def value(self, i: Int) -> Float64:
        return f64p(self.frames)[unsafe_offset=self._first() + 2 * i + 1]

    @always_inline
    def _better(self, a: Float64, b: Float64) -> Bool:
        """a is kept ahead of a newer b: strictly lower (min) or higher (max)."""
        return a > b if self.is_max else a < b

    @always_inline
    def added(mut self, v: Float64):
        """A newer row of value v (not NaN) entered: it pops the entries it beats."""
        if not self.seen or not self._better(self.best_added, v):
            self.best_added = v
            self.seen = True
        while self.alive > self.head and not self._better(self.value(self.alive - 1), v):
            self.alive -= 1

    @always_inline
    def expire(mut self, lower: Int):
        """The rows before `lower` (ns) left the frame."""
        while self.head < self.n and self.ts(self.head) < lower:
            self.head += 1
        self.alive = max(self.alive, self.head)

    @always_inline
    def known(self) -> Bool:
        """Whether the frame's extreme follows from the entries: an old entry is left,
        or every old row left is behind a newer row that beats it."""
        if self.head < self.alive:
            return True
        if not self.trunc:
            return True
        # the unknown entries beat the last kept one: a newer row beating that pops them
        return (
            self.n > 0 and self.seen and not self._better(self.value(self.n - 1), self.best_added)
        )

    @always_inline
    def front(self) -> Float64:
        """The oldest entry left (`head < alive`)."""
        return self.value(self.head)


struct Extremes:
    """The min and max of a resumed frame: of the state's rows still in it (values;
    lost once a row holding one of them leaves while others stay) and of the rows
    added since (deques of scratch positions, as in `Sliding`)."""

    var old_left: Int
    var min_lost: Bool
    var max_lost: Bool
    var need_min: Bool
    var need_max: Bool
    var qmin: I64P
    var qmin_h: Int
    var qmin_t: Int
    var qmax: I64P
    var qmax_h: Int
    var qmax_t: Int

    var old_min: OldDeque
    var old_max: OldDeque

    def __init__(out self, old_rows: Int, s: Sliding, frames: Int, at: Int):
        """`old_rows`: the state's rows (not NaN); their deques' entries are at words
        `at`.. of `frames` (0: not known); the added rows' deques use `s`'s buffers."""
        self.old_min = OldDeque(frames, at, False)
        self.old_max = OldDeque(frames, at, True)
        self.old_left = old_rows
        self.min_lost = False
        self.max_lost = False
        self.need_min = s.need_min
        self.need_max = s.need_max
        self.qmin = s.qmin
        self.qmin_h = 0
        self.qmin_t = 0
        self.qmax = s.qmax
        self.qmax_h = 0
        self.qmax_t = 0

    @always_inline
    def add(mut self, mv: F64P, p: Int, v: Float64):
        """Scratch row p (value v, not NaN) enters."""
        if self.need_min:
            self.add_min(mv, p, v)
            self.old_min.added(v)
        if self.need_max:
            self.add_max(mv, p, v)
            self.old_max.added(v)

    @always_inline
    def add_min(mut self, mv: F64P, p: Int, v: Float64):
        while (
            self.qmin_t > self.qmin_h
            and mv[unsafe_offset=Int(self.qmin[unsafe_offset=self.qmin_t - 1])] >= v
        ):
            self.qmin_t -= 1
        self.qmin[unsafe_offset=self.qmin_t] = Int64(p)
        self.qmin_t += 1

    @always_inline
    def add_max(mut self, mv: F64P, p: Int, v: Float64):
        while (
            self.qmax_t > self.qmax_h
            and mv[unsafe_offset=Int(self.qmax[unsafe_offset=self.qmax_t - 1])] <= v
        ):
            self.qmax_t -= 1
        self.qmax[unsafe_offset=self.qmax_t] = Int64(p)
        self.qmax_t += 1

    @always_inline
    def old_leaves(mut self, st: FrameState, v: Float64):
        """One of the state's rows (value v, not NaN) leaves."""
        self.old_left -= 1
        if v <= st.min:
            self.min_lost = True
        if v >= st.max:
            self.max_lost = True

    @always_inline
    def expire(mut self, lower: Int):
        """The state's rows before `lower` (ns) left the frame."""
        self.old_min.expire(lower)
        self.old_max.expire(lower)

    @always_inline
    def drop_before(mut self, lo: Int):
        """Forget the added rows before scratch position lo (they left)."""
        while self.qmin_h < self.qmin_t and Int(self.qmin[unsafe_offset=self.qmin_h]) < lo:
            self.qmin_h += 1
        while self.qmax_h < self.qmax_t and Int(self.qmax[unsafe_offset=self.qmax_h]) < lo:
            self.qmax_h += 1

    @always_inline
    def known(self, s: Sliding) -> Bool:
        """Whether the frame's min and max (those `s` needs) are known."""
        if self.old_left == 0:
            return True
        var min_known = not self.min_lost or self.old_min.known()
        var max_known = not self.max_lost or self.old_max.known()
        return not ((s.need_min and not min_known) or (s.need_max and not max_known))

    @always_inline
    def min(self, st: FrameState, mv: F64P) -> Float64:
        """The frame's min (`known`; count > 0): the newest of equal values wins."""
        if not self.need_min:
            return 0.0
        if self.old_left > 0 and self.min_lost:  # from the deque entries
            if self.old_min.head < self.old_min.alive:
                return self.old_min.front()
            return mv[unsafe_offset=Int(self.qmin[unsafe_offset=self.qmin_h])]
        if self.qmin_t > self.qmin_h:
            var v = mv[unsafe_offset=Int(self.qmin[unsafe_offset=self.qmin_h])]
            if self.old_left == 0 or v <= st.min:
                return v
        return st.min

    @always_inline
    def max(self, st: FrameState, mv: F64P) -> Float64:
        if not self.need_max:
            return 0.0
        if self.old_left > 0 and self.max_lost:
            if self.old_max.head < self.old_max.alive:
                return self.old_max.front()
            return mv[unsafe_offset=Int(self.qmax[unsafe_offset=self.qmax_h])]
        if self.qmax_t > self.qmax_h:
            var v = mv[unsafe_offset=Int(self.qmax[unsafe_offset=self.qmax_h])]
            if self.old_left == 0 or v >= st.max:
                return v
        return st.max


def resume_window(
    s: Sliding,
    mts: I64P,
    mv: F64P,
    n_leaving: Int,
    n: Int,
    mut st: FrameState,
    qts: I64P,
    qout: I64P,
    q0: Int,
    q1: Int,
    width: Int,
    hop: Int,
    keep_from: Int,
    deques: Int,
    deques_at: Int,
    fout: Int,
    fout_at: Int,
) -> Bool:
    """Resume one window's frame state over a key's queries q0..q1 (sorted by t).

    Args:
        s: the window's `Sliding` (which aggregates; its columns get the outputs; its
            deque buffers hold the added rows' extremes).
        mts, mv: merged rows: [0, n_leaving) the state's rows that leave by
            `keep_from`, then [n_leaving, n) the rows after its t_last up to the
            last query, in ts order.
        st: the state; on return (True) the clipped final frame's, to be written.
        keep_from: where the final frame is clipped (ns): max(its low end, clip).
        deques: the states holding the state's deque entries at words `deques_at`..
            (0: they do not describe its rows); fout: the states where the final deques
            go, at words `fout_at`.. (0: nowhere).
    Returns:
        False when a min or max is unknown where it is needed (a row holding the
        state's left while others of the state stay): the outputs of q0..q1 written
        so far are then to be written again by the walk.
    """
    var ex = Extremes(st.count(), s, deques, deques_at)
    var lo = 0
    var hi = n_leaving
    for q in range(q0, q1):
        var t = Int(qts[unsafe_offset=q])
        var lower = frame_lower(t, width, hop)
        while hi < n and Int(mts[unsafe_offset=hi]) <= t:
            var v = mv[unsafe_offset=hi]
            if not isnan(v):
                st.add_sums(s, v)
                ex.add(mv, hi, v)
            hi += 1
        while lo < hi and Int(mts[unsafe_offset=lo]) < lower:
            var v = mv[unsafe_offset=lo]
            if not isnan(v):
                st.remove_sums(s, v)
                if lo < n_leaving:
                    ex.old_leaves(st, v)
            lo += 1
        ex.expire(lower)
        ex.drop_before(lo)
        if st.count() > 0 and not ex.known(s):
            return False
        st.emit(s.cols, Int(qout[unsafe_offset=q]), ex.min(st, mv), ex.max(st, mv))
    while lo < hi and Int(mts[unsafe_offset=lo]) < keep_from:
        var v = mv[unsafe_offset=lo]
        if not isnan(v):
            st.remove_sums(s, v)
            if lo < n_leaving:
                ex.old_leaves(st, v)
        lo += 1
    ex.expire(keep_from)
    ex.drop_before(lo)
    if st.count() > 0:
        if not ex.known(s):
            return False
        var mn = ex.min(st, mv)
        var mx = ex.max(st, mv)
        st.min = mn
        st.max = mx
    if fout != 0:
        var n_min = 0
        var t_min = True
        var n_max = 0
        var t_max = True
        if s.need_min:
            (n_min, t_min) = write_entries(
                fout,
                fout_at,
                False,
                ex.old_min,
                ex.old_left,
                ex.qmin,
                ex.qmin_h,
                ex.qmin_t,
                mts,
                mv,
            )
        if s.need_max:
            (n_max, t_max) = write_entries(
                fout, fout_at, True, ex.old_max, ex.old_left, ex.qmax, ex.qmax_h, ex.qmax_t, mts, mv
            )
        write_counts(fout, fout_at, n_min, t_min, n_max, t_max)
    return True


def write_counts(frames: Int, at: Int, n_min: Int, t_min: Bool, n_max: Int, t_max: Bool):
    var word = n_min | (n_max << 8) | ((1 << 16) if t_min else 0) | ((1 << 17) if t_max else 0)
    i64p(frames)[unsafe_offset=at + F_DEQUES] = Int64(word)


def put_entry(frames: Int, at: Int, is_max: Bool, i: Int, ts: Int, v: Float64):
    var first = at + F_DEQUES + 1 + (2 * DEQUE_KEEP if is_max else 0)
    i64p(frames)[unsafe_offset=first + 2 * i] = Int64(ts)
    f64p(frames)[unsafe_offset=first + 2 * i + 1] = v


def write_entries(
    frames: Int, at: Int, is_max: Bool, old: OldDeque, old_left: Int, q: I64P, qh: Int,
    qt: Int, mts: I64P, mv: F64P,
) -> Tuple[Int, Bool]:  # fmt: skip
    """The final frame's deque, first `DEQUE_KEEP` entries: the state's entries still
    in it, then (unless unknown ones of the state's may follow them) the added rows'
    deque (scratch positions q[qh:qt]). Returns (entries written, more exist)."""
    var n = 0
    if old_left > 0:
        for i in range(old.head, old.alive):
            if n == DEQUE_KEEP:
                return (n, True)
            put_entry(frames, at, is_max, n, old.ts(i), old.value(i))
            n += 1
        if old.trunc and not (
            old.n > 0 and old.seen and not old._better(old.value(old.n - 1), old.best_added)
        ):
            return (n, True)  # the state's unknown entries may still be in the frame
    for k in range(qh, qt):
        if n == DEQUE_KEEP:
            return (n, True)
        var p = Int(q[unsafe_offset=k])
        put_entry(frames, at, is_max, n, Int(mts[unsafe_offset=p]), mv[unsafe_offset=p])
        n += 1
    return (n, False)


def write_sliding_deques(s: Sliding, mts: I64P, frames: Int, at: Int):
    """The deques of a walked frame (`Sliding`'s), first `DEQUE_KEEP` entries each."""
    var n_min = 0
    var n_max = 0
    for k in range(s.qmin_h, s.qmin_t if s.need_min else s.qmin_h):
        if n_min == DEQUE_KEEP:
            break
        var p = Int(s.qmin[unsafe_offset=k])
        put_entry(frames, at, False, n_min, Int(mts[unsafe_offset=p]), s.svals[unsafe_offset=p])
        n_min += 1
    for k in range(s.qmax_h, s.qmax_t if s.need_max else s.qmax_h):
        if n_max == DEQUE_KEEP:
            break
        var p = Int(s.qmax[unsafe_offset=k])
        put_entry(frames, at, True, n_max, Int(mts[unsafe_offset=p]), s.svals[unsafe_offset=p])
        n_max += 1
    var t_min = not s.need_min or s.qmin_t - s.qmin_h > n_min
    var t_max = not s.need_max or s.qmax_t - s.qmax_h > n_max
    write_counts(frames, at, n_min, t_min, n_max, t_max)
