"""Keyed input in ts order, count/sum/mean/min/max: bucketed so that every
pass works in cache.

1. (parallel over row ranges) rows are partitioned stably by bucket =
   code % BUCKETS into contiguous bucket runs of (ts, float64 value, code //
   BUCKETS): a 1024-way partition whose write cursors stay in L2, and each
   bucket's rows stay in ts order.
2. (parallel over buckets) each bucket (~n / 256 rows, its keys' states and
   ring of recent rows a few hundred KB, in L2) runs the in-order pass below
   (`inorder_window`) into bucket-ordered count/sum/min/max columns.
3. (parallel over row ranges) the results return to input order: row i
   takes the next result of its bucket's run (1024 sequential read streams),
   writing count, sum, mean, min, max and validity sequentially.
A bucket's key states are those of the pass it runs (`_inorder.InorderKey`,
on the contract's deletable sum, or `_slots.SlotKey`); a row's result between
phases 2 and 3 is a `_slots.WRec` (count as float64, sum, min, max).
"""

from std.memory import alloc
from std.sys.intrinsics import prefetch, PrefetchOptions
from featureflow_kernels.abi import (
    DT_F64,
    F64P,
    HEADER,
    I32P,
    I64P,
    Inputs,
    f64p,
    i64p,
    read_columns,
    read_inputs,
)
from featureflow_kernels.buffers import load_valid, put, store_bits
from featureflow_kernels.agg.outputs import Outs, outs_for
from featureflow_kernels.rolling._frames import part_rows
from featureflow_kernels.rolling._slots import SLOT_WORDS, WREC, WRecs, slot_window
from featureflow_kernels.rolling._inorder import IREC, ISTATE, inorder_span, inorder_window


comptime BUCKETS = 256


@fieldwise_init
struct BucketLayout(Copyable, Movable):
    """Addresses in the bucketed call's scratch (see `bucket_scratch_bytes`)."""

    var hist: I64P  # parts * BUCKETS row counts, part-major
    var pts: I64P
    var pv: F64P
    var pc: I32P
    var trec: F64P  # per partitioned row: count (as float64), sum, min, max


def bucket_scratch_bytes(n: Int, parts: Int) -> Int:
    """Scratch of a bucketed rolling call."""
    return 8 * parts * BUCKETS + 52 * n + 64 * 10


def bucket_layout(addr: Int, n: Int, parts: Int) -> BucketLayout:
    var a = (addr + 63) // 64 * 64
    var hist = i64p(a)
    a += (8 * parts * BUCKETS + 63) // 64 * 64
    var pts = i64p(a)
    a += (8 * n + 63) // 64 * 64
    var pv = f64p(a)
    a += (8 * n + 63) // 64 * 64
    var pc = I32P(unsafe_from_address=a)
    a += (4 * n + 63) // 64 * 64
    var trec = f64p(a)
    return BucketLayout(hist, pts, pv, pc, trec)


def bucket_cursors(lay: BucketLayout, part: Int, parts: Int) -> List[Int]:
    """Where part `part`'s rows of each bucket start: buckets in order, parts within."""
    var cur = List[Int](capacity=BUCKETS)
    var at = 0
    for b in range(BUCKETS):
        for p in range(parts):
            if p == part:
                cur.append(at)
            at += Int(lay.hist[unsafe_offset=p * BUCKETS + b])
    return cur^


def bucket_starts(lay: BucketLayout, parts: Int) -> List[Int]:
    var starts = List[Int](capacity=BUCKETS + 1)
    var at = 0
    for b in range(BUCKETS):
        starts.append(at)
        for p in range(parts):
            at += Int(lay.hist[unsafe_offset=p * BUCKETS + b])
    starts.append(at)
    return starts^


def bucketed_phase(
    d: I64P, phase: Int, part: Int, parts: Int, scratch: Int, w: Int, walk_rows: Int
):
    """One phase of the bucketed call for one part (see the section comment):
    0 counts, 1 partitions, 2 computes window `w` per bucket (`bucket_windows`;
    `walk_rows`: see there), 3 returns it to input order."""
    var inp = read_inputs(d)
    var n = inp.n
    var lay = bucket_layout(scratch, n, parts)
    var codes = I32P(unsafe_from_address=inp.codes)
    var rows = part_rows(n, part, parts)
    var r0 = rows[0]
    var r1 = rows[1]
    if phase == 0:
        var h = lay.hist.unsafe_offset(part * BUCKETS)
        for b in range(BUCKETS):
            h[unsafe_offset=b] = 0
        for i in range(r0, r1):
            h[unsafe_offset=Int(codes[unsafe_offset=i]) & (BUCKETS - 1)] += 1
    elif phase == 1:
        var cur = bucket_cursors(lay, part, parts)
        for i in range(r0, r1):
            var c = Int(codes[unsafe_offset=i])
            var b = c & (BUCKETS - 1)
            var j = cur[b]
            cur[b] = j + 1
            # the bucket's next cache line of each run, before its first write
            # (768 write streams: more than the hardware tracks)
            prefetch[PrefetchOptions().for_write()](lay.pts.unsafe_offset(j + 8))
            prefetch[PrefetchOptions().for_write()](lay.pv.unsafe_offset(j + 8))
            prefetch[PrefetchOptions().for_write()](lay.pc.unsafe_offset(j + 16))
            lay.pts[unsafe_offset=j] = inp.ts[unsafe_offset=i]
            lay.pv[unsafe_offset=j] = load_valid(
                inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i
            )
            lay.pc[unsafe_offset=j] = Int32(c // BUCKETS)
    elif phase == 2:
        bucket_windows(d, inp, lay, part, parts, w, walk_rows)
    else:
        gather_results(d, inp, lay, part, parts, w)


def bucket_windows(
    d: I64P, inp: Inputs, lay: BucketLayout, part: Int, parts: Int, w: Int, walk_rows: Int
):
    """Phase 2 for one part: window `w` of each of the part's buckets into records
    (`WREC`): each frame recomputed from its rows (`slot_window`) where a frame
    holds at most about `walk_rows` rows (estimated per bucket from its rows,
    keys and ts range; a bucket whose walks take over 2 * walk_rows steps a row
    falls back), else the frames maintained by expiry and min/max deques
    (`inorder_window`)."""
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var nwin = Int(d[unsafe_offset=HEADER])
    var hop = Int(d[unsafe_offset=HEADER + 1])
    var starts = bucket_starts(lay, parts)
    var glocal = (inp.ngroups + BUCKETS - 1) // BUCKETS
    var b0 = BUCKETS * part // parts
    var b1 = BUCKETS * (part + 1) // parts
    var biggest = 0
    for b in range(b0, b1):
        biggest = max(biggest, starts[b + 1] - starts[b])
    var ring_cap = 2
    while ring_cap < biggest:
        ring_cap *= 2
    # deque pass: key states, ring and separate result columns; slot pass: key
    # slots and row links
    var region = alloc[UInt8](
        4 * ISTATE * glocal
        + 4 * IREC * ring_cap
        + 32 * biggest
        + 4 * SLOT_WORDS * glocal
        + 4 * biggest
        + 260
    )
    var base = (Int(region) + 63) // 64 * 64
    var cols_at = (base + 4 * ISTATE * glocal + 4 * IREC * ring_cap + 63) // 64 * 64
    var slots = I32P(unsafe_from_address=cols_at + 32 * biggest)
    var links = slots.unsafe_offset(SLOT_WORDS * glocal)
    var no_valid = List[Int]()
    var width = Int(d[unsafe_offset=HEADER + 5 + w])
    var cols = read_columns(d, HEADER + 5 + nwin, nwin * naggs)
    var full = outs_for(cols, w * naggs, naggs, 0)
    var minmax = full.min != 0 or full.max != 0
    for b in range(b0, b1):
        var a = starts[b]
        var m = starts[b + 1] - a
        if m == 0:
            continue
        var bts = lay.pts.unsafe_offset(a)
        var bv = lay.pv.unsafe_offset(a)
        var bcodes = lay.pc.unsafe_offset(a)
        var recs = WRecs(lay.trec.unsafe_offset(WREC * a))
        var tspan = Int(bts[unsafe_offset=m - 1]) - Int(bts[unsafe_offset=0]) + 1
        var reach = min(width + hop, tspan)  # ns a frame covers (at most)
        var frame_rows = Float64(m) / Float64(glocal) * Float64(reach) / Float64(tspan)
        if frame_rows <= Float64(walk_rows):
            var budget = 2 * walk_rows * m + 1024
            var done: Bool
            if minmax:
                done = slot_window[True](
                    bts, bv, bcodes, glocal, m, width, hop, slots, links, recs, budget
                )
            else:
                done = slot_window[False](
                    bts, bv, bcodes, glocal, m, width, hop, slots, links, recs, budget
                )
            if done:
                continue
        var tcount = i64p(cols_at)
        var tsum = f64p(cols_at + 8 * biggest)
        var tmin = f64p(cols_at + 16 * biggest)
        var tmax = f64p(cols_at + 24 * biggest)
        var o = Outs(
            Int(tcount), Int(tsum), 0, Int(tmin), DT_F64, Int(tmax), DT_F64, 0, 0, 0, 0, 0, 0, 0
        )
        # the bucket's rows stream in order through the in-order pass, whose
        # key states and ring (at most the bucket's rows) stay in L2
        var sub = Inputs(m, bts, Int(bv), DT_F64, 0, 0, Int(bcodes), glocal)
        var span = inorder_span(bts, m, width, hop, m)
        var ring = 2
        while ring < span:
            ring *= 2
        if minmax:
            inorder_window[True, True](
                bts, sub, bcodes, glocal, m, 0, m, width, hop, o, no_valid, base, ring
            )
        else:
            inorder_window[True, False](
                bts, sub, bcodes, glocal, m, 0, m, width, hop, o, no_valid, base, ring
            )
        for q in range(m):
            recs.row(q).write(
                Float64(tcount[unsafe_offset=q]),
                tsum[unsafe_offset=q],
                tmin[unsafe_offset=q],
                tmax[unsafe_offset=q],
            )
    region.free()


comptime GATHER_PF = 4  # records a bucket's read stream is prefetched ahead in phase 3


def gather_results(d: I64P, inp: Inputs, lay: BucketLayout, part: Int, parts: Int, w: Int):
    """Phase 3 for one part: row i of the part takes the next record of its
    bucket (`WREC`; one read stream a bucket, prefetched) and writes window `w`'s
    count, sum, mean, min, max and validity in input order."""
    var n = inp.n
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var nwin = Int(d[unsafe_offset=HEADER])
    var codes = I32P(unsafe_from_address=inp.codes)
    var rows = part_rows(n, part, parts)
    var r0 = rows[0]
    var r1 = rows[1]
    var cur = bucket_cursors(lay, part, parts)
    var cols = read_columns(d, HEADER + 5 + nwin, nwin * naggs)
    var o = outs_for(cols, w * naggs, naggs, 0)
    var nvalid = List[Int]()
    for c in range(w * naggs, (w + 1) * naggs):
        if cols[c].valid != 0:
            nvalid.append(cols[c].valid)
    var vbytes = (n + 7) // 8
    var bits: UInt64 = 0
    var recs = WRecs(lay.trec)
    for i in range(r0, r1):
        var b = Int(codes[unsafe_offset=i]) & (BUCKETS - 1)
        var j = cur[b]
        cur[b] = j + 1
        var r = recs.row(j)
        prefetch(recs.row(j + GATHER_PF).p)
        var cf = r.count()
        var count = Int64(cf)
        if o.count != 0:
            i64p(o.count)[unsafe_offset=i] = count
        if o.sum != 0:
            f64p(o.sum)[unsafe_offset=i] = r.sum()
        if o.mean != 0:
            f64p(o.mean)[unsafe_offset=i] = r.sum() / cf if count > 0 else 0.0
        if o.min != 0:
            put(o.min, o.min_dt, i, r.min())
        if o.max != 0:
            put(o.max, o.max_dt, i, r.max())
        if count > 0:
            bits |= UInt64(1) << UInt64(i & 63)
        if (i & 63) == 63 or i == r1 - 1:
            for k in range(len(nvalid)):
                store_bits(nvalid[k], i >> 6, bits, vbytes)
            bits = 0
