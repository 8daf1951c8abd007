"""rolling_at_resuming(): frames resumed from the states an earlier call kept.

The stream job's use, batch after batch: the state's runs plus the batch's rows
as the newest run; queries at every new row and at each touched key's latest
row; states clipped at the watermark minus the widest window, the runs then
pruned before that cut (only some runs, as the job's lazy compaction does).
Rows arrive out of order (behind the newest row but not behind the watermark),
with ties, nulls, NaN and few distinct values, so min and max leave often. Every
batch's outputs must equal `rolling_at`'s over the same runs (which sums each
frame from its rows), and the states must be used (wrong states change them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ops_rolling import assert_matches

import featureflow.ops as ops

RESUMABLE = ["count", "sum", "mean", "min", "max", "std", "var"]


@dataclass
class Batch:
    keys: np.ndarray
    ts: np.ndarray
    values: pa.Array


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Batch], int]:
    """Batches of rows (keys 0..4, times moving forward with some rows late by up to
    ``delay``) and that watermark delay."""
    delay = draw(st.sampled_from([0, 5, 40]))
    batches, clock = [], 0
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(0, 25))
        clock += draw(st.sampled_from([0, 3, 20, 200]))
        offsets = draw(st.lists(st.integers(-delay, 30), min_size=n, max_size=n))
        ts = np.array([clock + o for o in offsets], dtype=np.int64)
        clock = max(clock, int(ts.max()) if n else clock)
        keys = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.int64)
        raw = draw(st.lists(st.one_of(st.integers(-3, 3), st.integers(-10**6, 10**6)),
                            min_size=n, max_size=n))  # fmt: skip
        vals = np.array(raw, dtype=np.float64) / draw(st.sampled_from([1.0, 8.0]))
        nan = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
        vals[nan & (np.arange(n) % 3 == 0)] = np.nan
        nulls = nan & (np.arange(n) % 3 == 1)
        batches.append(Batch(keys, ts, pa.array(vals, mask=nulls)))
    return batches, delay


def run_of(keys: np.ndarray, ts: np.ndarray, values: pa.Array) -> tuple[np.ndarray, ...]:
    order = np.lexsort((ts, keys))
    return keys[order], ts[order], values.take(pa.array(order))


def prune(run: tuple, cut: int) -> tuple:
    keys, ts, values = run
    keep = ts >= cut
    return keys[keep], ts[keep], values.filter(pa.array(keep))


def replay(
    batches: list[Batch], delay: int, windows: list[int], aggs: list[str], hop: int | None,
    prune_runs: list[bool], spoil: bool = False, in_place: bool = False,
) -> list[tuple[pa.Table, pa.Table]]:  # fmt: skip
    """Per batch: (resumed outputs, `rolling_at`'s outputs) over the same runs.
    ``spoil``: resume each batch from states kept over other values. ``in_place``: as
    the job does, the kernel writes the states into the held ones' array when no row
    leaves the runs after the batch (else the batch's states are kept alone)."""
    runs: list[tuple] = []
    frames: ops.FrameStates | None = None
    mark = np.iinfo(np.int64).min // 2
    out = []
    for b, batch in enumerate(batches):
        on_time = batch.ts >= mark  # the job dead-letters the rest
        keys, ts = batch.keys[on_time], batch.ts[on_time]
        values = batch.values.filter(pa.array(on_time))
        if len(ts):
            runs.append(run_of(keys, ts, values))
        touched = np.unique(keys)
        latest = np.array([max(int(r[1][r[0] == k].max()) for r in runs if (r[0] == k).any())
                           for k in touched], dtype=np.int64)  # fmt: skip
        at_keys, at_ts = np.concatenate([keys, touched]), np.concatenate([ts, latest])
        cut = mark - max(windows)
        if hop:
            cut = cut // hop * hop
        pruned = [prune(r, cut) if prune_runs[(b + i) % len(prune_runs)] else r
                  for i, r in enumerate(runs)]  # fmt: skip
        dropped = sum(len(r[1]) for r in pruned) < sum(len(r[1]) for r in runs)
        placing = in_place and not dropped and frames is not None
        got, kept = ops.rolling_at_resuming(
            runs, windows, aggs, at_keys, at_ts, hop, frames=frames, clip_ns=cut,
            added_run=len(runs) - 1 if len(ts) else None, in_place=placing,
        )  # fmt: skip
        want = ops.rolling_at(runs, windows, aggs, at_keys, at_ts, hop)
        out.append((got, want))
        if ops.backend() == "numpy":
            assert kept is None
        elif not any(np.isinf(np.asarray(r[2].to_numpy(zero_copy_only=False))).any() for r in runs):
            assert kept is not None
        if spoil and kept is not None:  # the same keys' states over doubled values
            doubled = [(k, t, pa.compute.multiply(v, 2.0)) for k, t, v in runs]
            _, kept = ops.rolling_at_resuming(doubled, windows, aggs, at_keys, at_ts, hop,
                                              clip_ns=cut)  # fmt: skip
        mark = max(mark, int(ts.max()) - delay if len(ts) else mark)
        runs = [r for r in pruned if len(r[1])]
        if kept is not None and frames is not None and not dropped and not placing:
            kept = frames.updated_by(kept)  # the untouched keys' states stay valid
        frames = kept
    return out


@settings(max_examples=120, deadline=None)
@given(
    stream=streams(),
    windows=st.sampled_from([[10], [1, 25], [7, 60, 400]]),
    aggs=st.sampled_from([RESUMABLE, ["count", "sum"], ["min", "max", "mean"]]),
    hop=st.sampled_from([None, None, 4]),
    prune_runs=st.lists(st.booleans(), min_size=1, max_size=3),
    in_place=st.booleans(),
)
def test_resumed_frames_equal_frames_summed_from_their_rows(
    stream: tuple[list[Batch], int], windows: list[int], aggs: list[str], hop: int | None,
    prune_runs: list[bool], in_place: bool,
) -> None:  # fmt: skip
    batches, delay = stream
    for got, want in replay(batches, delay, windows, aggs, hop, prune_runs, in_place=in_place):
        assert got.num_rows == want.num_rows
        for name in want.column_names:
            assert_matches(got[name], want[name], name.split("_")[0])


def test_states_kept_over_other_values_change_the_outputs(backend: str) -> None:
    """The states are used: resuming from states kept over doubled values doubles the
    sums of in-order keys (the numpy backend keeps none, so nothing changes)."""
    rng = np.random.default_rng(3)
    batches = []
    for b in range(4):
        ts = np.sort(rng.integers(b * 100, b * 100 + 100, 40)).astype(np.int64)
        batches.append(Batch(rng.integers(0, 3, 40), ts, pa.array(rng.normal(10, 1, 40))))
    results = replay(batches, 0, [1000], ["sum", "count"], None, [False], spoil=True)
    last_got, last_want = results[-1]
    got = np.asarray(last_got["sum_1000"].to_numpy(zero_copy_only=False))
    want = np.asarray(last_want["sum_1000"].to_numpy(zero_copy_only=False))
    if backend == "numpy":
        np.testing.assert_allclose(got, want)
    else:
        assert not np.allclose(got, want)
        assert last_got["count_1000"].equals(last_want["count_1000"])


def test_no_states_for_rows_only_a_walk_answers(backend: str) -> None:
    """first/last/count_distinct need the rows, ±inf splits the sums: no states kept;
    states of another call's windows are not resumed."""
    runs = [(np.array([1, 1]), np.array([1, 2]), pa.array([1.0, 2.0]))]
    _, none = ops.rolling_at_resuming(runs, [10], ["sum", "last"], [1], [2], clip_ns=0)
    assert none is None
    inf = [(np.array([1, 1]), np.array([1, 2]), pa.array([1.0, np.inf]))]
    assert ops.rolling_at_resuming(inf, [10], ["sum"], [1], [2], clip_ns=0)[1] is None
    assert ops.rolling_at_resuming(runs, [10], ["sum"], [1], [2])[1] is None  # no clip
    _, kept = ops.rolling_at_resuming(runs, [10], ["sum"], [1], [2], clip_ns=0)
    assert (kept is None) == (backend == "numpy")
    if kept is not None:
        more = [*runs, (np.array([1]), np.array([3]), pa.array([5.0]))]
        got, _ = ops.rolling_at_resuming(more, [20], ["sum"], [1], [3], frames=kept,
                                         clip_ns=0, added_run=1)  # fmt: skip
        assert got["sum_20"].to_pylist() == [8.0]


def test_frame_states_merge_by_key() -> None:
    words = np.arange(2 * 1 * 3, dtype=np.int64).reshape(2, 1, 3)
    old = ops.FrameStates(np.array([1, 5]), words, ("sig",))
    new = ops.FrameStates(np.array([3, 5]), words + 100, ("sig",))
    both = old.updated_by(new)
    assert both.keys.tolist() == [1, 3, 5]
    assert both.for_keys(both.keys)[:, 0, 0].tolist() == [0, 100, 103]
    picked = both.for_keys(np.array([2, 3]))
    assert picked[:, 0, 0].tolist() == [0, 100]  # no state for 2: zeros


@settings(max_examples=60, deadline=None)
@given(
    old=st.sets(st.integers(-50, 50), max_size=20),
    new=st.sets(st.integers(-50, 50), max_size=20),
)
def test_updated_by_is_a_merge_by_key_where_the_newer_wins(old: set[int], new: set[int]) -> None:
    """A copy: the old states stay as they were."""
    before = _tagged_states(old, 1)
    both = before.updated_by(_tagged_states(new, 2))
    assert both.keys.tolist() == sorted(old | new)
    expected = [k * 10 + (2 if k in new else 1) for k in sorted(old | new)]
    assert both.for_keys(both.keys)[:, 0, 0].tolist() == expected
    assert both.for_keys(np.array([51], dtype=np.int64)).tolist() == [[[0, 0]]]
    assert not np.shares_memory(both.words, before.words)
    assert before.for_keys(before.keys)[:, 0, 0].tolist() == [k * 10 + 1 for k in sorted(old)]


def _tagged_states(keys: set[int], tag: int) -> ops.FrameStates:
    """One state of two words per key: key * 10 + tag, and the key."""
    ordered = np.array(sorted(keys), dtype=np.int64)
    words = np.stack([ordered * 10 + tag, ordered], axis=1).reshape(len(ordered), 1, 2)
    return ops.FrameStates(ordered, words, ())


@settings(max_examples=60, deadline=None)
@given(
    old=st.sets(st.integers(-50, 50), max_size=20),
    writes=st.lists(st.sets(st.integers(-50, 50), max_size=20), min_size=1, max_size=3),
)
def test_placed_states_give_each_key_one_row_and_keep_the_held_ones(
    old: set[int], writes: list[set[int]]
) -> None:
    """What `placed` hands the kernel, over placements one after another (rows out of
    key order, spare rows, growth): every held key is written in its own row and keeps
    it, every new key gets a row no other key holds, and the states returned hold the
    held keys' words and a row for each new key."""
    states = _tagged_states(old, 1)
    holds = {k: k * 10 + 1 for k in old}
    for tag, keys in enumerate(writes, start=2):
        ordered = np.array(sorted(keys), dtype=np.int64)
        rows_before = dict(zip(states.keys.tolist(), states.rows().tolist(), strict=True))
        placed, held_rows, out_rows = states.placed(ordered)
        assert placed.keys.tolist() == sorted(holds.keys() | keys)
        assert held_rows.tolist() == [rows_before.get(k, -1) for k in ordered.tolist()]
        fresh = held_rows < 0
        assert (out_rows[~fresh] == held_rows[~fresh]).all()
        assert sorted(placed.rows().tolist()) == list(range(len(placed.keys)))
        assert set(out_rows[fresh].tolist()).isdisjoint(rows_before.values())
        if not fresh.any() or len(states.words) >= len(placed.keys):
            assert placed.words is states.words  # no growth: the same array
        # the kernel's part: each key's words written in its row
        placed.words[out_rows, 0, 0] = ordered * 10 + tag
        placed.words[out_rows, 0, 1] = ordered
        holds.update({k: k * 10 + tag for k in keys})
        got = placed.for_keys(placed.keys)
        assert got[:, 0, 0].tolist() == [holds[k] for k in placed.keys.tolist()]
        assert got[:, 0, 1].tolist() == placed.keys.tolist()
        states = placed


def test_states_written_in_place_resume_as_merged_ones_do(backend: str) -> None:
    """Many keys, a few new each batch, late rows, no row leaving: the kernel writes
    each batch's states into the held array (spare rows, growth) and the outputs stay
    `rolling_at`'s, batch after batch, as with states merged from a fresh array."""
    rng = np.random.default_rng(11)
    batches = []
    for b in range(6):
        n = 300
        ts = (b * 50 + rng.integers(-30, 50, n)).astype(np.int64)
        keys = rng.integers(0, 40 + 25 * b, n).astype(np.int64)
        values = np.round(rng.normal(0, 3, n), 1)
        batches.append(Batch(keys, ts, pa.array(values, mask=rng.random(n) < 0.05)))
    for in_place in (False, True):
        results = replay(batches, 40, [25, 400], RESUMABLE, None, [False], in_place=in_place)
        for got, want in results:
            for name in want.column_names:
                assert_matches(got[name], want[name], name.split("_")[0])


def test_the_kernel_writes_the_states_where_they_are_held(backend: str) -> None:
    """In place, a held key's state is rewritten in its row of the array it was given,
    and a new key's goes to a spare row of it."""
    first = [(np.array([1, 2, 3]), np.array([1, 1, 1]), pa.array([1.0, 2.0, 3.0]))]
    _, held = ops.rolling_at_resuming(first, [10], ["sum"], [1, 2, 3], [1, 1, 1], clip_ns=0)
    if backend == "numpy":
        assert held is None  # it keeps no frame states: nothing to write in place
        return
    assert held is not None
    spare = np.zeros((5, *held.words.shape[1:]), dtype=np.int64)
    spare[:3] = held.words
    held = ops.FrameStates(held.keys, spare, held.signature)
    more = [*first, (np.array([2, 4]), np.array([2, 2]), pa.array([5.0, 7.0]))]
    got, placed = ops.rolling_at_resuming(more, [10], ["sum"], [2, 4], [2, 2], frames=held,
                                          clip_ns=0, added_run=1, in_place=True)  # fmt: skip
    assert got["sum_10"].to_pylist() == [7.0, 7.0]
    assert placed is not None and placed.words is spare
    assert placed.keys.tolist() == [1, 2, 3, 4]
    assert placed.rows().tolist() == [0, 1, 2, 3]
    later = [*more, (np.array([1, 2, 4]), np.array([3, 3, 3]), pa.array([1.0, 1.0, 1.0]))]
    again, _ = ops.rolling_at_resuming(later, [10], ["sum"], [1, 2, 4], [3, 3, 3],
                                       frames=placed, clip_ns=0, added_run=2)  # fmt: skip
    assert again["sum_10"].to_pylist() == [2.0, 8.0, 8.0]


def test_the_kernel_writes_only_rows_of_the_states_it_is_given(backend: str) -> None:
    """A row to write outside the states is refused before the kernel runs (it writes
    through raw addresses); a row inside is written and the others are left alone."""
    from featureflow.ops import _backend, _query, _tables

    impl = _backend.current().backend
    parsed = [_query.Run(np.array([4, 4]), np.array([1, 2]), pa.array([1.0, 2.0]))]
    plan = _query.plan(parsed, np.array([4]), np.array([2]), impl.run_segments,
                       impl.merge_runs)  # fmt: skip

    def call(states: np.ndarray, row: int) -> bool:
        columns = _tables.allocate([("sum_10", "sum")], pa.float64(), plan.nq)
        return impl.rolling_at(parsed, plan, [10], None, ["sum"], columns,
                               frames_out=(states, np.array([row])), clip_ns=0)  # fmt: skip

    states = np.zeros((2, 1, max(getattr(impl, "frame_words", 0), 1)), dtype=np.int64)
    if backend == "numpy":
        assert call(states, 5) is False  # it keeps no states and reads no rows
        return
    for outside in (-1, 2):
        with pytest.raises(ValueError, match="frames_out: expected 1 int64 rows"):
            call(states, outside)
    assert not states.any()
    assert call(states, 1) is True
    assert not states[0].any() and states[1, 0, 0] != 0
