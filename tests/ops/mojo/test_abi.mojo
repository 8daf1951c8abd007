"""The descriptor reader and the path predicates (abi.mojo, support.mojo)."""

from std.testing import assert_equal, assert_false, assert_true

from featureflow_kernels.abi import (
    A_COUNT,
    A_DISTINCT,
    A_MAX,
    A_STD,
    A_SUM,
    Column,
    HEADER,
    i64p,
    read_columns,
    read_inputs,
)
from featureflow_kernels.support import (
    bucketed_supported,
    sessions_in_order_supported,
    stream_supported,
)


def test_descriptor_header_and_columns() raises:
    var words = List[Int64]()
    for w in range(HEADER):
        words.append(Int64(10 + w))  # n, ts addr, values addr, dtype, validity, offset, codes, keys
    for w in [A_SUM, 1000, 0, 0, A_COUNT, 2000, 3000, 2]:
        words.append(Int64(w))
    var d = i64p(Int(words.unsafe_ptr()))  # as the bindings see a descriptor
    var inp = read_inputs(d)
    assert_equal(inp.n, 10)
    assert_equal(Int(inp.ts), 11)
    assert_equal(inp.vaddr, 12)
    assert_equal(inp.codes, 16)
    assert_equal(inp.ngroups, 17)
    var cols = read_columns(d, HEADER, 2)
    assert_equal(len(cols), 2)
    assert_equal(cols[0].agg, A_SUM)
    assert_equal(cols[0].data, 1000)
    assert_equal(cols[1].valid, 3000)
    assert_equal(cols[1].dtype, 2)
    _ = len(words)  # the descriptor outlives its readers


def test_which_path_takes_which_aggregates() raises:
    var five = List[Column]()
    for a in range(A_COUNT, A_MAX + 1):
        five.append(Column(a, 1, 1, 0))
    assert_true(stream_supported(five))
    assert_true(bucketed_supported(five))
    assert_true(sessions_in_order_supported(five))
    var with_std = five.copy()
    with_std.append(Column(A_STD, 1, 1, 0))
    assert_true(stream_supported(with_std))
    assert_false(bucketed_supported(with_std))
    assert_false(sessions_in_order_supported(with_std))
    var distinct = List[Column]()
    distinct.append(Column(A_DISTINCT, 1, 1, 0))
    assert_false(stream_supported(distinct))


def main() raises:
    test_descriptor_header_and_columns()
    test_which_path_takes_which_aggregates()
    print("ok")
