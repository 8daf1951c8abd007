"""The one compensated-sum algorithm (Knuth's two_sum), exactly added squares
(fma) and the sample variance S2 - S1^2 / n evaluated in double-double, shared
by every pass. (two_sum's error term is exact whichever operand is larger, so
it gives the same bits as the Neumaier variant the grouped pass, `Sliding` and
the sessions used before, without its branch.)
"""

from std.math import fma


@always_inline
def two_sum(mut s: Float64, mut c: Float64, x: Float64):
    """Add x to s, accumulating the rounding error in c (Knuth's TwoSum: no branch)."""
    var t = s + x
    var z = t - s
    c += (s - (t - z)) + (x - z)
    s = t


@always_inline
def add_square(mut s: Float64, mut c: Float64, d: Float64, sign: Float64):
    """s += sign * d^2 exactly: the square's rounding error (fma) joins the compensation."""
    var sq = d * d
    var low = fma(d, d, -sq)
    two_sum(s, c, sign * sq)
    c += sign * low


@always_inline
def sample_variance(s1: Float64, s1c: Float64, s2: Float64, s2c: Float64, count: Int) -> Float64:
    """(S2 - S1^2 / n) / (n - 1) from compensated sums of d = x - shift and of d^2.

    In double-double arithmetic: when the shift is far from the frame's values
    (its row left the frame long ago) the two terms nearly cancel, and a plain
    double formula loses as many digits as they share. Never negative.
    """
    var nn = Float64(count)
    var a = s1 + s1c  # S1 normalised to (a, b): |b| <= ulp(a) / 2
    var z = a - s1
    var b = (s1 - (a - z)) + (s1c - z)
    var sq = a * a
    var sq_low = fma(a, a, -sq) + 2.0 * a * b
    var q = sq / nn  # S1^2 / n as (q, q_low)
    var qn = q * nn
    var q_low = ((sq - qn) - fma(q, nn, -qn) + sq_low) / nn
    var h = s2
    var l = s2c
    two_sum(h, l, -q)
    var v = (h + (l - q_low)) / (nn - 1.0)
    return v if v > 0.0 else 0.0
