"""Bucketed rolling, short frames: each frame recomputed from its key's last
`SLOTS` non-null rows kept inline (SIMD over the slots), walking the row
links back only when all of them are in the frame; results go out as one
`WREC` record a row for the gather (phase 3 of `_bucketed`).
"""

from std.utils.numerics import inf, isnan
from std.sys.intrinsics import prefetch, PrefetchOptions
from featureflow_kernels.abi import F64P, I32P, I64P
from featureflow_kernels.agg.sums import two_sum
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
comptime SLOT_WORDS = 32  # int32 words a key: SLOTS float64 values, SLOTS row numbers, head, -
comptime SLOT_PF = 16  # rows ahead whose key slots are prefetched
comptime FSlots = SIMD[DType.float64, SLOTS]
comptime ISlots = SIMD[DType.int32, SLOTS]


@always_inline
def slot_enter(st: I32P, links: I32P, q: Int, x: Float64, mut vals: FSlots, mut rows: ISlots):
    """Row q (value x, not null) enters its key's slots `st` (loaded as vals and
    rows), replacing the oldest; it links to the key's previous newest row."""
    var h = Int(st[unsafe_offset=3 * SLOTS])
    links[unsafe_offset=q + 1] = st[unsafe_offset=2 * SLOTS + ((h - 1) & (SLOTS - 1))]
    var lane = ISlots(0, 1, 2, 3, 4, 5, 6, 7).eq(Int32(h & (SLOTS - 1)))
    vals = lane.select(FSlots(x), vals)
    rows = lane.select(ISlots(Int32(q + 1)), rows)
    F64P(unsafe_from_address=Int(st)).unsafe_store(0, vals)
    st.unsafe_store(2 * SLOTS, rows)
    st[unsafe_offset=3 * SLOTS] = Int32(h + 1)


@always_inline
def slot_emit[
    MINMAX: Bool
](
    st: I32P,
    links: I32P,
    vv: F64P,
    vals: FSlots,
    rows: ISlots,
    first: Int,
    rec: F64P,
    q: Int,
) -> Int:
    """Record q (`WREC`) from the key's slots: rows numbered >= first are in the
    frame; when all are, older rows are walked back along the links. Returns the
    walk's steps (0 when none)."""
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
        var h = Int(st[unsafe_offset=3 * SLOTS])
        var j = Int(links[unsafe_offset=Int(st[unsafe_offset=2 * SLOTS + (h & (SLOTS - 1))])])
        var sc = 0.0
        while j >= first:
            var x = vv[unsafe_offset=j]
            cnt += 1
            two_sum(sm, sc, x)
            comptime if MINMAX:
                mn = min(mn, x)
                mx = max(mx, x)
            j = Int(links[unsafe_offset=j])
        sm += sc
        steps = cnt
    var has = cnt > 0
    rec[unsafe_offset=WREC * q] = Float64(cnt)
    rec[unsafe_offset=WREC * q + 1] = sm
    rec[unsafe_offset=WREC * q + 2] = mn if has else 0.0
    rec[unsafe_offset=WREC * q + 3] = mx if has else 0.0
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
    rec: F64P,
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
            var st = state.unsafe_offset(Int(codes[unsafe_offset=p]) * SLOT_WORDS)
            var vals = F64P(unsafe_from_address=Int(st)).unsafe_load[width=SLOTS](0)
            var rows = st.unsafe_load[width=SLOTS](2 * SLOTS)
            var x = v[unsafe_offset=p]
            if not isnan(x):
                slot_enter(st, links, p, x, vals, rows)
            steps += slot_emit[MINMAX](st, links, vv, vals, rows, gl + 1, rec, p)
            p += 1
            continue
        var e = p + 1
        while e < m and ts[unsafe_offset=e] == t:
            e += 1
        for q in range(p, e):  # the run enters before any of it is emitted
            var x = v[unsafe_offset=q]
            if not isnan(x):
                var st = state.unsafe_offset(Int(codes[unsafe_offset=q]) * SLOT_WORDS)
                var vals = F64P(unsafe_from_address=Int(st)).unsafe_load[width=SLOTS](0)
                var rows = st.unsafe_load[width=SLOTS](2 * SLOTS)
                slot_enter(st, links, q, x, vals, rows)
        for q in range(p, e):
            var st = state.unsafe_offset(Int(codes[unsafe_offset=q]) * SLOT_WORDS)
            var vals = F64P(unsafe_from_address=Int(st)).unsafe_load[width=SLOTS](0)
            var rows = st.unsafe_load[width=SLOTS](2 * SLOTS)
            steps += slot_emit[MINMAX](st, links, vv, vals, rows, gl + 1, rec, q)
        if steps > budget:
            return False
        p = e
    return steps <= budget
