"""Rolling windows (RANGE and sawtooth frames): the entry points.

`rolling_stream_mode` picks the path. Input in ts order streams (one pass
per window and part, outputs written in input order): keyed
count/sum/mean/min/max take the in-order ring (`_inorder`) or, for windows
whose frames span many rows, key buckets (`_bucketed`, `_slots`); other
keyed aggregates per-key regions (`_region`); unkeyed in place
(`_stream`). Otherwise rows are grouped by key first (`_grouped`:
prepare, parts, finish), and count_distinct goes frame by frame
(`_generic`). Frame search helpers are in `_frames`. Frames at query
points over runs sorted by (key, ts), the stream job's state: `_query`.
"""

from featureflow_kernels.abi import (
    A_COUNT,
    A_MAX,
    A_MEAN,
    A_MIN,
    A_SUM,
    Column,
    DT_F64,
    F64P,
    HEADER,
    I32P,
    I64P,
    f64p,
    i64p,
    read_columns,
    read_inputs,
)
from featureflow_kernels.buffers import load_valid
from featureflow_kernels.agg.outputs import Outs, outs_for
from featureflow_kernels.support import bucketed_supported, stream_supported
from featureflow_kernels.rolling._grouped import (
    deque_bytes,
    rolling_scratch_bytes,
    rolling_finish,
    rolling_part,
    rolling_prepare,
)
from featureflow_kernels.rolling._stream import stream_scratch_bytes
from featureflow_kernels.rolling._inorder import (
    inorder_scratch_bytes,
    rolling_inorder_part,
    rolling_inorder_span,
)
from featureflow_kernels.rolling._bucketed import bucket_scratch_bytes, bucketed_phase
from featureflow_kernels.rolling._stream import stream_window
from featureflow_kernels.rolling._region import region_window
from featureflow_kernels.rolling._query import query_scratch_bytes, rolling_query
from featureflow_kernels.rolling._resume import FRAME_WORDS


def stream_dispatch[
    KEYED: Bool
](
    sum_: Bool,
    minmax: Bool,
    extra: Bool,
    ts: I64P,
    sv: F64P,
    codes: I32P,
    g: Int,
    n: Int,
    r0: Int,
    r1: Int,
    width: Int,
    hop: Int,
    o: Outs,
    cols: List[Column],
    c0: Int,
    naggs: Int,
    scratch: Int,
):
    """Run the pass specialised for keys and the needed aggregate families."""
    comptime if KEYED:
        if sum_ and not minmax and not extra:
            region_window[True, False, False](
                ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch
            )
        elif minmax and not extra:
            region_window[True, True, False](
                ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch
            )
        elif not sum_ and not minmax and not extra:
            region_window[False, False, False](
                ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch
            )
        else:
            region_window[True, True, True](
                ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch
            )
        return
    if sum_ and not minmax and not extra:
        stream_window[KEYED, True, False, False](
            ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch
        )
    elif minmax and not extra:
        stream_window[KEYED, True, True, False](
            ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch
        )
    elif not sum_ and not minmax and not extra:
        stream_window[KEYED, False, False, False](
            ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch
        )
    else:
        stream_window[KEYED, True, True, True](
            ts, sv, codes, g, n, r0, r1, width, hop, o, cols, c0, naggs, scratch
        )


comptime STREAM_NONE = 0
comptime STREAM_IN_PLACE = 1
comptime STREAM_CONVERT = 2
comptime STREAM_BUCKETED = 3
"""`rolling_stream_mode`'s answers (exported to Python by the bindings)."""


def rolling_stream_mode(d: I64P) -> Int:
    """Which rolling path a `rolling_prepare` descriptor takes.

    Returns:
        `STREAM_NONE` when the call cannot stream (ts not in order, or
        count_distinct: prepare, parts, finish), `STREAM_IN_PLACE` when it
        streams over the values in place, `STREAM_CONVERT` when the values
        must first be converted (`rolling_stream_convert`), `STREAM_BUCKETED`
        when it takes the bucketed path (`bucketed_phase`).
    """
    var inp = read_inputs(d)
    var nwin = Int(d[unsafe_offset=HEADER])
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var cols = read_columns(d, HEADER + 5 + nwin, nwin * naggs)
    if not stream_supported(cols) or inp.n >= Int(Int32.MAX):
        return STREAM_NONE
    var ts = inp.ts
    for i in range(1, inp.n):
        if ts[unsafe_offset=i] < ts[unsafe_offset=i - 1]:
            return STREAM_NONE
    if inp.codes != 0 and bucketed_supported(cols):
        return STREAM_BUCKETED
    if inp.dtype == DT_F64 and inp.valid_addr == 0:
        return STREAM_IN_PLACE
    return STREAM_CONVERT


def rolling_stream_convert(d: I64P, dst: Int) -> Int:
    """Write the values as float64 (NaN for null) to `dst` (8 * n bytes)."""
    var inp = read_inputs(d)
    var sv = f64p(dst)
    for i in range(inp.n):
        sv[unsafe_offset=i] = load_valid(inp.vaddr, inp.dtype, inp.valid_addr, inp.valid_off, i)
    return inp.n


def rolling_stream_part(d: I64P, p: Int, ps: Int, sc: Int, vaddr: Int) -> Int:
    """Every window of rows [r0, r1) of part `p` of `ps` (cut at multiples of
    64 rows). `sc` addresses `stream_scratch_bytes(n, keys)` bytes; `vaddr` the
    converted float64 values, or 0 to read the caller's float64 values in place."""
    var inp = read_inputs(d)
    var nwin = Int(d[unsafe_offset=HEADER])
    var hop = Int(d[unsafe_offset=HEADER + 1])
    var naggs = Int(d[unsafe_offset=HEADER + 2])
    var widths = d.unsafe_offset(HEADER + 5)
    var cols = read_columns(d, HEADER + 5 + nwin, nwin * naggs)
    var n = inp.n
    var r0 = n * p // ps // 64 * 64
    var r1 = n if p == ps - 1 else n * (p + 1) // ps // 64 * 64
    if r0 >= r1:
        return 0
    var sv = f64p(vaddr if vaddr != 0 else inp.vaddr)
    var keyed = inp.codes != 0
    var g = inp.ngroups if keyed else 1
    var codes = I32P(unsafe_from_address=inp.codes if keyed else Int(inp.ts))
    var need_sum = False
    var need_minmax = False
    var need_extra = False
    for ref c in cols:
        if c.agg == A_SUM or c.agg == A_MEAN:
            need_sum = True
        elif c.agg == A_MIN or c.agg == A_MAX:
            need_minmax = True
        elif c.agg != A_COUNT:
            need_extra = True
    for w in range(nwin):
        var width = Int(widths[unsafe_offset=w])
        var o = outs_for(cols, w * naggs, naggs, 0)
        if keyed:
            stream_dispatch[True](
                need_sum,
                need_minmax,
                need_extra,
                inp.ts,
                sv,
                codes,
                g,
                n,
                r0,
                r1,
                width,
                hop,
                o,
                cols,
                w * naggs,
                naggs,
                sc,
            )
        else:
            stream_dispatch[False](
                need_sum,
                need_minmax,
                need_extra,
                inp.ts,
                sv,
                codes,
                g,
                n,
                r0,
                r1,
                width,
                hop,
                o,
                cols,
                w * naggs,
                naggs,
                sc,
            )
    return r1 - r0
