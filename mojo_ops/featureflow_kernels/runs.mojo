"""Merge of runs sorted by (key, ts): the stream job's state compaction.

Each run is sorted by key, then ts, ties in arrival order; the runs are in
arrival order. `merge_runs` writes the merged order as indices into the runs'
concatenation (run r's row i is `sum(n of runs before r) + i`), dropping rows
with ts < the cut, so the caller gathers every column once (Arrow `take`).
Ties on (key, ts) go to the earlier run: the merge is stable, and merging
adjacent runs keeps arrival order. One pass, O(rows * runs).
"""

from featureflow_kernels.abi import I64P, i64p


comptime MERGE_WORDS = 3
"""Call words before the per-run words: runs R, cut (ns), output addr."""


def merge_runs(d: I64P) -> Int:
    """Descriptor words: 0 runs R, 1 cut (int64 ns: rows with ts < cut are
    dropped), 2 output addr (int64, room for every row); then 3 words a run:
    rows, keys addr (int64), ts addr (int64). Returns the rows written."""
    var nruns = Int(d[unsafe_offset=0])
    var cut = Int(d[unsafe_offset=1])
    var out = i64p(Int(d[unsafe_offset=2]))
    var n = List[Int]()
    var keys = List[I64P]()
    var ts = List[I64P]()
    var first = List[Int]()
    var pos = List[Int]()
    var total = 0
    for r in range(nruns):
        var b = MERGE_WORDS + 3 * r
        n.append(Int(d[unsafe_offset=b]))
        keys.append(i64p(Int(d[unsafe_offset=b + 1])))
        ts.append(i64p(Int(d[unsafe_offset=b + 2])))
        first.append(total)
        pos.append(0)
        total += n[r]
    var m = 0
    while True:
        var best = -1
        var bk = 0
        var bt = 0
        for r in range(nruns):
            var i = pos[r]
            if i < n[r]:
                var k = Int(keys[r][unsafe_offset=i])
                var t = Int(ts[r][unsafe_offset=i])
                if best < 0 or k < bk or (k == bk and t < bt):
                    best = r
                    bk = k
                    bt = t
        if best < 0:
            break
        if bt >= cut:
            out[unsafe_offset=m] = Int64(first[best] + pos[best])
            m += 1
        pos[best] += 1
    return m
