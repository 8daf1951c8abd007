"""The deletable half of the contract (agg/deletable.mojo) and the rolling passes'
typed key states (rolling/_inorder.InorderKey, ...): the updates the passes wrote
out, bit for bit, on registers and on a key's words alike."""

from std.testing import assert_equal, assert_false, assert_true

from featureflow_kernels.abi import I32P, f64p, i64p
from featureflow_kernels.agg.deletable import (
    Moments,
    Sums,
    moments_add,
    moments_remove,
    moments_variance,
    sum_add,
    sum_clear,
    sum_emit,
    sum_remove,
    sum_remove_or_clear,
    sum_start,
    sum_total,
)
from featureflow_kernels.agg.outputs import Outs
from featureflow_kernels.agg.sums import add_square, sample_variance, two_sum
from featureflow_kernels.rolling._inorder import ISTATE, InorderKey, InorderKeys
from featureflow_kernels.rolling._region import KREC, RegionKey, RegionKeys
from featureflow_kernels.rolling._slots import SLOTS, SLOT_WORDS, SlotKey, WRec, WRecs
from featureflow_kernels.rolling._stream import REC, SQ, SqKey, StreamKey, StreamKeys


def _values() -> List[Float64]:
    var vs = List[Float64]()
    var x = 0.1
    for i in range(600):
        x = x * 1.7 + Float64(i % 13) * 1.0e-3
        if x > 1.0e6:
            x = x * 1.0e-12
        vs.append(x if i % 3 != 0 else -x * 1.0e8)
    return vs^


def test_sums_add_and_remove_are_the_written_out_updates() raises:
    # a frame of 50 rows sliding over the values: count, then two_sum of +x / -x
    var vs = _values()
    var r = Sums.empty()
    var count = 0
    var sm = 0.0
    var sc = 0.0
    for i in range(len(vs)):
        count += 1
        two_sum(sm, sc, vs[i])
        sum_add[True](r, vs[i])
        if i >= 50:
            count -= 1
            two_sum(sm, sc, -vs[i - 50])
            sum_remove[True](r, vs[i - 50])
        assert_equal(Int(r.count()), count)
        assert_equal(r.sum(), sm)  # bit for bit
        assert_equal(r.sum_c(), sc)
    assert_equal(sum_total(r), sm + sc)
    var c = Sums.empty()  # SUM=False keeps the count only
    sum_add[False](c, 1.0)
    sum_add[False](c, 2.0)
    sum_remove[False](c, 1.0)
    assert_equal(Int(c.count()), 1)
    assert_equal(c.sum(), 0.0)


def test_remove_or_clear_restarts_exactly() raises:
    var r = Sums.empty()
    sum_add[True](r, 0.1)
    sum_add[True](r, 1.0e16)
    assert_false(sum_remove_or_clear[True](r, 1.0e16))
    assert_true(sum_remove_or_clear[True](r, 0.1))
    assert_equal(Int(r.count()), 0)
    assert_equal(r.sum(), 0.0)
    assert_equal(r.sum_c(), 0.0)
    sum_start(r, -0.0)  # exactly the value, sign of zero included
    assert_equal(Int(r.count()), 1)
    assert_true(r.sum() == 0.0 and (1.0 / r.sum()) < 0.0)


def test_moments_are_the_written_out_updates() raises:
    var vs = _values()
    var m = Moments.empty()
    var shift = 0.0
    var shift_set = False
    var s1 = 0.0
    var s1c = 0.0
    var s2 = 0.0
    var s2c = 0.0
    for i in range(len(vs)):
        var v = vs[i]
        if not shift_set:
            shift = v
            shift_set = True
        var d = v - shift
        two_sum(s1, s1c, d)
        add_square(s2, s2c, d, 1.0)
        moments_add(m, v)
        if i >= 40:
            var x = vs[i - 40]
            var dx = x - shift
            two_sum(s1, s1c, -dx)
            add_square(s2, s2c, dx, -1.0)
            moments_remove(m, x)
        assert_equal(m.s1(), s1)
        assert_equal(m.s1_c(), s1c)
        assert_equal(m.s2(), s2)
        assert_equal(m.s2_c(), s2c)
    assert_equal(moments_variance(m, 40), sample_variance(s1, s1c, s2, s2c, 40))
    m.clear()
    assert_false(m.shift_set())
    assert_equal(m.s2(), 0.0)


def test_inorder_key_names_the_words() raises:
    var words = List[Int32](length=3 * ISTATE, fill=0)
    var base = Int(words.unsafe_ptr())
    var keys = InorderKeys(I32P(unsafe_from_address=base), f64p(base))
    var ks = keys.key(1)  # key 1: words ISTATE .. 2 * ISTATE - 1
    ks.set_lo(5)
    ks.set_tail(9)
    ks.set_min_head(6)
    ks.set_max_head(7)
    sum_start(ks, 2.5)
    sum_add[True](ks, 0.25)
    ks.set_min(0.25)
    ks.set_max(2.5)
    assert_equal(Int(words[ISTATE + InorderKey.LO]), 5)
    assert_equal(Int(words[ISTATE + InorderKey.TAIL]), 9)
    assert_equal(Int(words[ISTATE + InorderKey.COUNT]), 2)
    assert_equal(Int(words[ISTATE + InorderKey.MIN_HEAD]), 6)
    assert_equal(Int(words[ISTATE + InorderKey.MAX_HEAD]), 7)
    var f = f64p(base)
    assert_equal(f[unsafe_offset=ISTATE // 2 + InorderKey.SUM], 2.75)
    assert_equal(f[unsafe_offset=ISTATE // 2 + InorderKey.SUM_C], 0.0)
    assert_equal(f[unsafe_offset=ISTATE // 2 + InorderKey.MIN], 0.25)
    assert_equal(f[unsafe_offset=ISTATE // 2 + InorderKey.MAX], 2.5)
    var out = List[Float64](length=2, fill=-1.0)
    var cnt = List[Int64](length=2, fill=-1)
    var o = Outs(Int(cnt.unsafe_ptr()), Int(out.unsafe_ptr()), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    sum_emit[True](ks, Int(ks.count()), o, 1)
    assert_equal(Int(cnt[1]), 2)
    assert_equal(out[1], 2.75)
    sum_clear(ks)
    assert_equal(Int(words[ISTATE + InorderKey.COUNT]), 0)
    for k in [0, 2]:  # the neighbours are untouched
        for w in range(ISTATE):
            assert_equal(Int(words[k * ISTATE + w]), 0)
    _ = len(words) + len(out) + len(cnt)  # the words outlive the views


def test_stream_and_region_keys_name_the_words() raises:
    var words = List[Int64](length=2 * REC + 2 * SQ, fill=0)
    var base = Int(words.unsafe_ptr())
    var sq = f64p(base + 8 * 2 * REC)
    var keys = StreamKeys(i64p(base), f64p(base), I32P(unsafe_from_address=base), sq)
    var ks = keys.key(1)
    ks.clear_links()
    for w in range(StreamKey.LINKS, StreamKey.LINKS + 3):
        assert_equal(Int(words[REC + w]), -1)  # both int32 halves -1
    ks.set_link(StreamKey.LAST, 4)
    assert_equal(Int(I32P(unsafe_from_address=base)[unsafe_offset=2 * REC + StreamKey.LAST]), 4)
    sum_add[True](ks, 1.5)
    assert_equal(Int(words[REC + StreamKey.COUNT]), 1)
    assert_equal(f64p(base)[unsafe_offset=REC + StreamKey.SUM], 1.5)
    var m = keys.moments(1)
    moments_add(m, 10.0)
    moments_add(m, 12.0)
    assert_equal(sq[unsafe_offset=SQ + SqKey.SHIFT], 10.0)
    assert_equal(sq[unsafe_offset=SQ + SqKey.SHIFT_SET], 1.0)
    assert_equal(sq[unsafe_offset=SQ + SqKey.S1], 2.0)
    assert_equal(sq[unsafe_offset=SQ + SqKey.S2], 4.0)
    m.clear()
    for w in range(SQ):
        assert_equal(sq[unsafe_offset=SQ + w], 0.0)
    for w in range(REC):  # key 0 untouched
        assert_equal(Int(words[w]), 0)
    var rw = List[Int64](length=2 * KREC, fill=0)
    var rb = Int(rw.unsafe_ptr())
    var rkeys = RegionKeys(i64p(rb), I32P(unsafe_from_address=rb), f64p(rb), sq)
    rkeys.count_slot(1)
    rkeys.count_slot(1)
    assert_equal(rkeys.slots_counted(1), 2)
    rkeys.key(1).open(7)
    var rk = rkeys.key(1)
    assert_equal(rk.hi(), 7)
    assert_equal(rk.lo(), 7)
    assert_equal(Int(rk.count()), 0)
    assert_equal(rk.word(RegionKey.MAX_TAIL), 7)
    assert_equal(rk.word(RegionKey.LAST), -1)
    _ = len(words) + len(rw)  # the words outlive the views


def test_slot_key_and_results_name_the_words() raises:
    var words = List[Int32](length=SLOT_WORDS, fill=0)
    var ks = SlotKey(I32P(unsafe_from_address=Int(words.unsafe_ptr())))
    ks.set_head(3)
    ks.set_rows(SIMD[DType.int32, SLOTS](1, 2, 3, 0, 0, 0, 0, 0))
    assert_equal(Int(words[SlotKey.HEAD]), 3)
    assert_equal(Int(ks.row(2)), 3)
    assert_equal(Int(words[SlotKey.ROWS + 1]), 2)
    var out = List[Float64](length=8, fill=0.0)
    var recs = WRecs(f64p(Int(out.unsafe_ptr())))
    recs.row(1).write(2.0, 3.5, -1.0, 4.0)
    assert_equal(out[4 + WRec.COUNT], 2.0)
    assert_equal(out[4 + WRec.SUM], 3.5)
    assert_equal(recs.row(1).min(), -1.0)
    assert_equal(recs.row(1).max(), 4.0)
    _ = len(words) + len(out)


def main() raises:
    test_sums_add_and_remove_are_the_written_out_updates()
    test_remove_or_clear_restarts_exactly()
    test_moments_are_the_written_out_updates()
    test_inorder_key_names_the_words()
    test_stream_and_region_keys_name_the_words()
    test_slot_key_and_results_name_the_words()
    print("ok")
