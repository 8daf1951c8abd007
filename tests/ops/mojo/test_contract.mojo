"""The aggregation contract (agg/contract.mojo) and the sessions' typed key state
(sessions/_state.mojo) at the boundary they expose to the passes."""

from std.testing import assert_equal, assert_true

from featureflow_kernels.abi import DT_F64, DT_F32, f64p, i64p, u8p
from featureflow_kernels.agg.contract import Running, running_add, running_emit
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.agg.sums import two_sum
from featureflow_kernels.sessions._state import SREC, SessionKey, SessionKeys


def _values() -> List[Float64]:
    var vs = List[Float64]()
    var x = 0.1
    for i in range(1000):
        x = x * 1.7 + Float64(i % 13) * 1.0e-3
        if x > 1.0e6:
            x = x * 1.0e-12
        vs.append(x if i % 3 != 0 else -x * 1.0e8)
    return vs^


def test_running_add_is_the_written_out_update() raises:
    # the update every session pass wrote out: first value sets min/max, two_sum
    var vs = _values()
    var r = Running.empty()
    var count = 0
    var sm = 0.0
    var sc = 0.0
    var mn = 0.0
    var mx = 0.0
    for v in vs:
        if count == 0:
            mn = v
            mx = v
        else:
            mn = min(mn, v)
            mx = max(mx, v)
        count += 1
        two_sum(sm, sc, v)
        r.add(v)
    assert_equal(Int(r.count()), count)
    assert_equal(r.sum(), sm)  # bit for bit
    assert_equal(r.sum_c(), sc)
    assert_equal(r.min(), mn)
    assert_equal(r.max(), mx)
    assert_equal(r.total(), sm + sc)


def test_merge_of_two_halves() raises:
    var r = Running.empty()
    var a = Running.empty()
    var b = Running.empty()
    for i in range(100):
        var v = Float64(i * 7 % 31) - 12.0  # exact sums: merge equals one pass
        r.add(v)
        if i < 40:
            a.add(v)
        else:
            b.add(v)
    a.merge(b)
    assert_equal(a.count(), r.count())
    assert_equal(a.total(), r.total())
    assert_equal(a.min(), r.min())
    assert_equal(a.max(), r.max())
    var e = Running.empty()
    e.merge(a)  # into an empty state: takes min/max as they are
    assert_equal(e.min(), r.min())
    assert_equal(e.max(), r.max())
    a.merge(Running.empty())  # merging nothing changes nothing
    assert_equal(a.count(), r.count())


def test_emit_writes_values_and_levels() raises:
    var cnt = List[Int64](length=3, fill=-1)
    var sums = List[Float64](length=3, fill=-1.0)
    var means = List[Float64](length=3, fill=-1.0)
    var mins = List[Float32](length=3, fill=-1.0)  # a float32 column
    var maxs = List[Float64](length=3, fill=-1.0)
    var lev = List[UInt8](length=8, fill=9)
    var o = Outs(
        Int(cnt.unsafe_ptr()),
        Int(sums.unsafe_ptr()),
        Int(means.unsafe_ptr()),
        Int(mins.unsafe_ptr()),
        DT_F32,
        Int(maxs.unsafe_ptr()),
        DT_F64,
        0,
        0,
        0,
        0,
        0,
        0,
        Int(lev.unsafe_ptr()),
    )
    var lp = u8p(Int(lev.unsafe_ptr()))
    Running.empty().emit(o, 0, lp)  # no values: zeros, level 0 (null)
    var one = Running.empty()
    one.add(2.5)
    one.emit(o, 1, lp)
    var two = one
    two.add(-1.5)
    two.emit(o, 2, lp)
    assert_equal(cnt[0], 0)
    assert_equal(sums[0], 0.0)
    assert_equal(means[0], 0.0)
    assert_equal(mins[0], 0.0)
    assert_equal(Int(lev[0]), 0)
    assert_equal(cnt[1], 1)
    assert_equal(Int(lev[1]), 1)
    assert_equal(cnt[2], 2)
    assert_equal(sums[2], 1.0)
    assert_equal(means[2], 0.5)
    assert_equal(mins[2], Float32(-1.5))
    assert_equal(maxs[2], 2.5)
    assert_equal(Int(lev[2]), 2)
    assert_equal(Int(lev[3]), 9)  # only row j is written
    _ = len(cnt) + len(sums) + len(means) + len(mins) + len(maxs)


def test_session_key_names_the_words() raises:
    var words = List[Int64](length=3 * SREC, fill=0)
    var keys = SessionKeys.of(i64p(Int(words.unsafe_ptr())))
    var ks = keys.key(1)  # key 1: words SREC .. 2 * SREC - 1
    ks.set_head(7)
    ks.set_end(11)
    ks.set_closed(3)
    assert_equal(words[SREC + SessionKey.HEAD], 7)
    assert_equal(words[SREC + SessionKey.END], 11)
    assert_equal(words[SREC + SessionKey.AUX], 3)
    ks.set_last(0.25)  # word 7 as float64 in the two-pass pass
    assert_equal(f64p(Int(words.unsafe_ptr()))[unsafe_offset=SREC + SessionKey.AUX], 0.25)
    ks.set_counted_start(99)
    assert_equal(words[SREC + SessionKey.COUNT], 99)
    ks.open()
    assert_equal(words[SREC + SessionKey.COUNT], 0)
    for k in [0, 2]:  # the neighbours are untouched
        for w in range(SREC):
            assert_equal(words[k * SREC + w], 0)


def test_session_key_adds_as_running_does() raises:
    # the same contract on a key's words as on a register value: the same bits
    var words = List[Int64](length=2 * SREC, fill=0)
    var ks = SessionKeys.of(i64p(Int(words.unsafe_ptr()))).key(1)
    ks.open()
    var r = Running.empty()
    for v in _values():
        ks.add(v)
        running_add(r, v)
    assert_equal(ks.count(), r.count())
    assert_equal(ks.sum(), r.sum())
    assert_equal(ks.sum_c(), r.sum_c())
    assert_equal(ks.min(), r.min())
    assert_equal(ks.max(), r.max())
    var a = List[Float64](length=2, fill=0.0)
    var lev = List[UInt8](length=2, fill=0)
    var o = Outs(0, Int(a.unsafe_ptr()), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    ks.emit(o, 0, u8p(Int(lev.unsafe_ptr())))
    running_emit(r, o, 1, u8p(Int(lev.unsafe_ptr())))
    assert_equal(a[0], a[1])
    assert_equal(a[0], r.total())
    assert_true(lev[0] == 2 and lev[1] == 2)
    _ = len(words)  # the words outlive the view (no early destruction)


def main() raises:
    test_running_add_is_the_written_out_update()
    test_merge_of_two_halves()
    test_emit_writes_values_and_levels()
    test_session_key_names_the_words()
    test_session_key_adds_as_running_does()
    print("ok")
