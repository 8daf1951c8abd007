"""The kept session records' bookkeeping: which records a batch's entities own, and
the splice that replaces them, testing every record against the watermark.

Records (`_resume.SessionRecord`) are rows of int64 words sorted by key (word
R_KEY). `record_segments` finds each wanted key's rows by a merge of the two
sorted sequences (linear, no binary search per key); `splice_records` writes
the records after a batch in one pass: the untouched keys' as they were, each
touched key's kept prefix then its new records, and sends each to the open or
the closed output by the watermark (a session is final when last + gap <
watermark or start + max length < watermark); on the way it writes what the
caller would otherwise read back column by column from 88-byte records (each
scan a cache miss a record): the open records' keys, each key's first open
start, and the rows they hold.
"""

from featureflow_kernels.abi import I64P, i64p
from featureflow_kernels.sessions._resume import R_KEY, R_LAST, R_ROWS, R_START


def record_segments(d: I64P) -> Int:
    """Descriptor words: 0 records n, 1 their keys addr (int64, sorted), 2 wanted keys
    K, 3 wanted keys addr (int64, sorted, distinct), 4 lo out addr, 5 hi out addr
    (int64, K: key k's records are [lo[k], hi[k]); lo == hi where it has none, at the
    position its records would take). Returns K."""
    var n = Int(d[unsafe_offset=0])
    var own = i64p(Int(d[unsafe_offset=1]))
    var nk = Int(d[unsafe_offset=2])
    var keys = i64p(Int(d[unsafe_offset=3]))
    var lo = i64p(Int(d[unsafe_offset=4]))
    var hi = i64p(Int(d[unsafe_offset=5]))
    var p = 0
    for k in range(nk):
        var key = keys[unsafe_offset=k]
        while p < n and own[unsafe_offset=p] < key:
            p += 1
        lo[unsafe_offset=k] = Int64(p)
        while p < n and own[unsafe_offset=p] == key:
            p += 1
        hi[unsafe_offset=k] = Int64(p)
    return nk


@always_inline
def _copy(src: I64P, dst: I64P, w: Int):
    for i in range(w):
        dst[unsafe_offset=i] = src[unsafe_offset=i]


def splice_records(d: I64P) -> Int:
    """Descriptor words: 0 old records n, 1 words a record W, 2 old addr (sorted by
    key), 3 touched keys K, 4 cut addr, 5 end addr (int64, K: touched key k's old
    records [cut[k], end[k]) are replaced; cuts nondecreasing, each end[k] <=
    cut[k + 1]), 6 new records m, 7 new addr (word R_KEY: the touched key's index,
    nondecreasing), 8 touched keys addr (int64, K: written as the new records' key),
    9 gap (ns), 10 max length (ns), 11 watermark (ns; int64 min: none closes),
    12 open out addr, 13 closed out addr (each room for n + m records), 14 counts
    out addr (4 words: open and closed records written, distinct keys of the open
    ones, their rows), 15 open keys out addr (int64, room for n + m: each open
    record's key), 16 first keys out addr and 17 first starts out addr (int64, room
    for n + m: each distinct key of the open records and its first record's start),
    18 open lasts out addr (int64, room for n + m: each open record's last row's
    time). Returns the open records written."""
    var n = Int(d[unsafe_offset=0])
    var w = Int(d[unsafe_offset=1])
    var old = i64p(Int(d[unsafe_offset=2]))
    var nk = Int(d[unsafe_offset=3])
    var cut = i64p(Int(d[unsafe_offset=4]))
    var end = i64p(Int(d[unsafe_offset=5]))
    var m = Int(d[unsafe_offset=6])
    var new = i64p(Int(d[unsafe_offset=7]))
    var keys = i64p(Int(d[unsafe_offset=8]))
    var gap = d[unsafe_offset=9]
    var max_len = d[unsafe_offset=10]
    var mark = d[unsafe_offset=11]
    var open = i64p(Int(d[unsafe_offset=12]))
    var closed = i64p(Int(d[unsafe_offset=13]))
    var counts = i64p(Int(d[unsafe_offset=14]))
    var open_keys = i64p(Int(d[unsafe_offset=15]))
    var first_keys = i64p(Int(d[unsafe_offset=16]))
    var first_starts = i64p(Int(d[unsafe_offset=17]))
    var lasts = i64p(Int(d[unsafe_offset=18]))
    var no = 0
    var nc = 0
    var nd = 0
    var rows = 0
    var p = 0  # next old record
    var q = 0  # next new record
    for k in range(nk + 1):
        var stop = Int(cut[unsafe_offset=k]) if k < nk else n
        while p < stop:  # untouched records
            var src = old.unsafe_offset(p * w)
            var last = src[unsafe_offset=R_LAST]
            var start = src[unsafe_offset=R_START]
            if last + gap < mark or start + max_len < mark:
                _copy(src, closed.unsafe_offset(nc * w), w)
                nc += 1
            else:
                _copy(src, open.unsafe_offset(no * w), w)
                _opened(
                    src[unsafe_offset=R_KEY],
                    src,
                    open_keys,
                    first_keys,
                    first_starts,
                    lasts,
                    no,
                    nd,
                )
                rows += Int(src[unsafe_offset=R_ROWS])
                no += 1
            p += 1
        if k == nk:
            break
        p = Int(end[unsafe_offset=k])
        while q < m and Int(new[unsafe_offset=q * w + R_KEY]) == k:
            var src = new.unsafe_offset(q * w)
            var last = src[unsafe_offset=R_LAST]
            var start = src[unsafe_offset=R_START]
            var key = keys[unsafe_offset=k]
            if last + gap < mark or start + max_len < mark:
                var dst = closed.unsafe_offset(nc * w)
                _copy(src, dst, w)
                dst[unsafe_offset=R_KEY] = key
                nc += 1
            else:
                var dst = open.unsafe_offset(no * w)
                _copy(src, dst, w)
                dst[unsafe_offset=R_KEY] = key
                _opened(key, src, open_keys, first_keys, first_starts, lasts, no, nd)
                rows += Int(src[unsafe_offset=R_ROWS])
                no += 1
            q += 1
    counts[unsafe_offset=0] = Int64(no)
    counts[unsafe_offset=1] = Int64(nc)
    counts[unsafe_offset=2] = Int64(nd)
    counts[unsafe_offset=3] = Int64(rows)
    return no


@always_inline
def _opened(
    key: Int64,
    rec: I64P,
    open_keys: I64P,
    first_keys: I64P,
    first_starts: I64P,
    lasts: I64P,
    no: Int,
    mut nd: Int,
):
    """Open record `no` (key `key`, words at `rec`) was written: its key and last row's
    time, and its start when it is its key's first."""
    open_keys[unsafe_offset=no] = key
    lasts[unsafe_offset=no] = rec[unsafe_offset=R_LAST]
    if nd == 0 or first_keys[unsafe_offset=nd - 1] != key:
        first_keys[unsafe_offset=nd] = key
        first_starts[unsafe_offset=nd] = rec[unsafe_offset=R_START]
        nd += 1
