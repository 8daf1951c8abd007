"""Bucketed rolling, short frames: each frame recomputed from its key's last
`SLOTS` non-null rows kept inline (SIMD over the slots), walking the row
links back only when all of them are in the frame; results go out as one
`WREC` record a row (`WRec`) for the gather (phase 3 of `_bucketed`). A key's
slots are `SlotKey`; the walk's count and sum go through the contract
(`agg/deletable.Sums`).
"""

from std.utils.numerics import inf, isnan
from std.sys.intrinsics import prefetch, PrefetchOptions
from featureflow_kernels.abi import F64P, I32P, I64P
from featureflow_kernels.agg.deletable import Sums, sum_add, sum_total
from featureflow_kernels.rolling._frames import frame_lower


comptime WREC = 4  # float64 words per bucketed result (`WRec`)


@fieldwise_init
struct WRec(TrivialRegisterPassable):
    """One row's bucketed result: `WREC` float64 words from `p` (phase 2 writes
    them in bucket order, phase 3 reads them in input order)."""

    var p: F64P

    comptime COUNT = 0  # the frame's non-null rows, as float64
    comptime SUM = 1  # the sum's value (0.0 when empty)
    comptime MIN = 2  # 0.0 when empty
    comptime MAX = 3

    @always_inline
    def count(self) -> Float64:
        return self.p[unsafe_offset=Self.COUNT]

    @always_inline
    def sum(self) -> Float64:
        return self.p[unsafe_offset=Self.SUM]

    @always_inline
    def min(self) -> Float64:
        return self.p[unsafe_offset=Self.MIN]

    @always_inline
    def max(self) -> Float64:
        return self.p[unsafe_offset=Self.MAX]

    @always_inline
    def write(self, count: Float64, sum: Float64, min: Float64, max: Float64):
        self.p[unsafe_offset=Self.COUNT] = count
        self.p[unsafe_offset=Self.SUM] = sum
        self.p[unsafe_offset=Self.MIN] = min
        self.p[unsafe_offset=Self.MAX] = max


@fieldwise_init
struct WRecs(TrivialRegisterPassable):
    """The results of a run of rows: row q's `WRec` at WREC * q from `base`."""

    var base: F64P

    @always_inline
    def row(self, q: Int) -> WRec:
        return WRec(self.base.unsafe_offset(WREC * q))


comptime SLOTS = 8  # a key's most recent non-null rows kept inline by `slot_window`
comptime SLOT_WORDS = 32  # int32 words a key (`SlotKey`)
comptime SLOT_PF = 16  # rows ahead whose key slots are prefetched
comptime FSlots = SIMD[DType.float64, SLOTS]
comptime ISlots = SIMD[DType.int32, SLOTS]


@fieldwise_init
struct SlotKey(TrivialRegisterPassable):
    """A key's `SLOT_WORDS` int32 words from `st`: its last `SLOTS` non-null rows'
    float64 values, their row numbers (from 1; 0: an empty slot) and how many
    rows entered (`head`: the next slot is head & (SLOTS - 1)); words 25..31
    unused. Not a deletable state: each frame is recomputed from the slots."""

    var st: I32P

    comptime VALUES = 0  # int32 words 0 .. 2 * SLOTS - 1: SLOTS float64
    comptime ROWS = 2 * SLOTS
    comptime HEAD = 3 * SLOTS

    @always_inline
    def values(self) -> FSlots:
        return F64P(unsafe_from_address=Int(self.st)).unsafe_load[width=SLOTS](Self.VALUES)

    @always_inline
    def set_values(self, v: FSlots):
        F64P(unsafe_from_address=Int(self.st)).unsafe_store(Self.VALUES, v)

    @always_inline
    def rows(self) -> ISlots:
        return self.st.unsafe_load[width=SLOTS](Self.ROWS)

    @always_inline
    def set_rows(self, r: ISlots):
        self.st.unsafe_store(Self.ROWS, r)

    @always_inline
    def row(self, i: Int) -> Int32:
        """Slot i's row number."""
        return self.st[unsafe_offset=Self.ROWS + i]

    @always_inline
    def head(self) -> Int:
        return Int(self.st[unsafe_offset=Self.HEAD])

    @always_inline
    def set_head(self, h: Int):
        self.st[unsafe_offset=Self.HEAD] = Int32(h)


@always_inline
def slot_enter(ks: SlotKey, links: I32P, q: Int, x: Float64, mut vals: FSlots, mut rows: ISlots):
    """Row q (value x, not null) enters its key's slots (loaded as vals and rows),
    replacing the oldest; it links to the key's previous newest row."""
    var h = ks.head()
    links[unsafe_offset=q + 1] = ks.row((h - 1) & (SLOTS - 1))
    var lane = ISlots(0, 1, 2, 3, 4, 5, 6, 7).eq(Int32(h & (SLOTS - 1)))
    vals = lane.select(FSlots(x), vals)
    rows = lane.select(ISlots(Int32(q + 1)), rows)
    ks.set_values(vals)
    ks.set_rows(rows)
    ks.set_head(h + 1)


@always_inline
def slot_emit[
    MINMAX: Bool
](ks: SlotKey, links: I32P, vv: F64P, vals: FSlots, rows: ISlots, first: Int, rec: WRec,) -> Int:
    """The frame's `WRec` from the key's slots: rows numbered >= first are in the
    frame; when all are, older rows are walked back along the links (their count
    and sum on the contract, `Sums`). Returns the walk's steps (0 when none)."""
    var inside = rows.ge(Int32(first))
    var cnt = Int(inside.cast[DType.int32]().reduce_add())
    var sm = inside.select(vals, FSlots(0.0)).reduce_add()
    var mn = 0.0
    var mx = 0.0
    comptime if MINMAX:
        var big = inf[DType.float64]()
        mn = inside.select(vals, FSlots(big)).reduce_min()
        mx = inside.select(vals, FSlots(-big)).reduce_max()
    var steps = 0
    if cnt == SLOTS:  # the oldest slot is in the frame: older rows may be too
        var j = Int(links[unsafe_offset=Int(ks.row(ks.head() & (SLOTS - 1)))])
        var acc = Sums(Int64(cnt), sm, 0.0)
        while j >= first:
            var x = vv[unsafe_offset=j]
            sum_add[True](acc, x)
            comptime if MINMAX:
                mn = min(mn, x)
                mx = max(mx, x)
            j = Int(links[unsafe_offset=j])
        cnt = Int(acc.count())
        sm = sum_total(acc)
        steps = cnt
    var has = cnt > 0
    rec.write(Float64(cnt), sm, mn if has else 0.0, mx if has else 0.0)
    return steps


def slot_window[
    MINMAX: Bool
](
    ts: I64P,
    v: F64P,
    codes: I32P,
    keys: Int,
    m: Int,
    width: Int,
    hop: Int,
    state: I32P,
    links: I32P,
    recs: WRecs,
    budget: Int,
) -> Bool:
    """One window over a bucket's m rows (ts order, key codes < `keys`), each frame
    recomputed from its rows. Each key keeps its last `SLOTS` non-null rows inline
    (value and row number, from 1; 0: empty) and every row links to its key's
    previous one (`links`, m + 1 int32). Row q's frame [frame_lower(ts[q]), ts[q]]
    (ns, inclusive; RANGE: later rows of an equal ts are peers and included) holds
    exactly the key's rows numbered >= gl + 1, gl the first row with ts >= the low
    end (ts is sorted): one SIMD pass over the slots, and only when all `SLOTS`
    are in the frame a walk back along the links from the oldest. Writes record q
    (`WREC`): count of non-null rows, sum, min, max (0 when empty). Returns False,
    records partly written, once the walks took more than `budget` steps in all."""
    for k in range(keys * SLOT_WORDS):
        state[unsafe_offset=k] = 0
    links[unsafe_offset=0] = 0
    var vv = v.unsafe_offset(-1)  # vv[j]: value of row number j
    var gl = 0
    var steps = 0
    var p = 0
    while p < m:
        var t = ts[unsafe_offset=p]
        var lower = Int64(frame_lower(Int(t), width, hop))
        gl += Int(ts[unsafe_offset=gl] < lower)  # usually one row leaves: no branch
        while ts[unsafe_offset=gl] < lower:
            gl += 1
        prefetch[PrefetchOptions().for_write()](
            state.unsafe_offset(Int(codes[unsafe_offset=min(p + SLOT_PF, m - 1)]) * SLOT_WORDS)
        )
        if p + 1 == m or ts[unsafe_offset=p + 1] != t:  # a run of one row: enter and emit
            var ks = SlotKey(state.unsafe_offset(Int(codes[unsafe_offset=p]) * SLOT_WORDS))
            var vals = ks.values()
            var rows = ks.rows()
            var x = v[unsafe_offset=p]
            if not isnan(x):
                slot_enter(ks, links, p, x, vals, rows)
            steps += slot_emit[MINMAX](ks, links, vv, vals, rows, gl + 1, recs.row(p))
            p += 1
            continue
        var e = p + 1
        while e < m and ts[unsafe_offset=e] == t:
            e += 1
        for q in range(p, e):  # the run enters before any of it is emitted
            var x = v[unsafe_offset=q]
            if not isnan(x):
                var ks = SlotKey(state.unsafe_offset(Int(codes[unsafe_offset=q]) * SLOT_WORDS))
                var vals = ks.values()
                var rows = ks.rows()
                slot_enter(ks, links, q, x, vals, rows)
        for q in range(p, e):
            var ks = SlotKey(state.unsafe_offset(Int(codes[unsafe_offset=q]) * SLOT_WORDS))
            steps += slot_emit[MINMAX](ks, links, vv, ks.values(), ks.rows(), gl + 1, recs.row(q))
        if steps > budget:
            return False
        p = e
    return steps <= budget
