"""The aggregate math at the boundary it exposes to the passes (agg/sums.mojo)."""

from std.testing import assert_equal, assert_true

from featureflow_kernels.agg.sums import add_square, sample_variance, two_sum


def test_two_sum_keeps_the_low_bits() raises:
    var s = 1.0e16
    var c = 0.0
    two_sum(s, c, 1.0)  # 1e16 + 1 is not a float64: the 1 goes to c
    assert_equal(s, 1.0e16)
    assert_equal(c, 1.0)
    two_sum(s, c, -1.0e16)
    assert_equal(s + c, 1.0)


def test_two_sum_is_exact_in_either_order() raises:
    # the error term does not depend on which operand is larger
    var a = 1.0
    var ac = 0.0
    two_sum(a, ac, 1.0e-17)
    var b = 1.0e-17
    var bc = 0.0
    two_sum(b, bc, 1.0)
    assert_equal(a, b)
    assert_equal(ac, bc)


def _neumaier(mut s: Float64, mut c: Float64, x: Float64):
    """The variant the grouped pass, `Sliding` and the sessions used before two_sum."""
    var t = s + x
    if abs(s) >= abs(x):
        c += (s - t) + x
    else:
        c += (x - t) + s
    s = t


def test_two_sum_gives_the_bits_of_the_neumaier_sum() raises:
    # long running sums over values of mixed signs and magnitudes (an LCG)
    var state = UInt64(12345)
    var s1 = 0.0
    var c1 = 0.0
    var s2 = 0.0
    var c2 = 0.0
    for i in range(200_000):
        state = state * 6364136223846793005 + 1442695040888963407
        var u = Float64(Int(state >> 11)) / Float64(1 << 53) - 0.5
        var x = u * 10.0 ** Float64(Int(state >> 60) - 6)
        if i % 7 == 0:
            x = -s1  # cancellation
        two_sum(s1, c1, x)
        _neumaier(s2, c2, x)
        assert_equal(s1, s2)
        assert_equal(c1, c2)


def test_add_square_is_exact() raises:
    var d = 1.0 + 2.0**-30  # d^2 = 1 + 2^-29 + 2^-60: the last term is below an ulp of 1
    var s = 0.0
    var c = 0.0
    add_square(s, c, d, 1.0)
    assert_equal(s, 1.0 + 2.0**-29)
    assert_equal(c, 2.0**-60)
    add_square(s, c, d, -1.0)
    assert_equal(s + c, 0.0)


def test_sample_variance() raises:
    # values 1, 2, 3 (shifted sums S1 = 6, S2 = 14): variance 1
    assert_equal(sample_variance(6.0, 0.0, 14.0, 0.0, 3), 1.0)
    # a constant frame, and cancellation never makes it negative
    assert_equal(sample_variance(3.0, 0.0, 3.0, 0.0, 3), 0.0)
    assert_true(sample_variance(1.0e8 * 3.0, 0.0, 1.0e16 * 3.0, 0.0, 3) >= 0.0)


def main() raises:
    test_two_sum_keeps_the_low_bits()
    test_two_sum_is_exact_in_either_order()
    test_two_sum_gives_the_bits_of_the_neumaier_sum()
    test_add_square_is_exact()
    test_sample_variance()
    print("ok")
