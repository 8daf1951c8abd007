"""Frame search shared by the rolling passes: a frame's low end (RANGE or
sawtooth), binary search over sorted ts, and the row range of a part.
"""

from featureflow_kernels.abi import I64P
from featureflow_kernels.buffers import floor_div


@always_inline
def frame_lower(t: Int, width: Int, hop: Int) -> Int:
    """The frame's low end (inclusive, ns) for a row at t: t - W, or its sawtooth floor."""
    var lower = t - width
    if hop > 0:
        lower = floor_div(lower, hop) * hop
    return lower


def first_at_or_after(ts: I64P, a: Int, b: Int, t: Int) -> Int:
    """The first position in [a, b) with ts >= t (ts sorted), or b."""
    var lo = a
    var hi = b
    while lo < hi:
        var mid = (lo + hi) // 2
        if Int(ts[unsafe_offset=mid]) < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@always_inline
def part_rows(n: Int, part: Int, parts: Int) -> Tuple[Int, Int]:
    """Rows [r0, r1) of a part: cut at multiples of 64 (validity words)."""
    var r0 = n * part // parts // 64 * 64
    var r1 = n if part == parts - 1 else n * (part + 1) // parts // 64 * 64
    return (r0, r1)
