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
    prune_runs: list[bool], spoil: bool = False,
) -> list[tuple[pa.Table, pa.Table]]:  # fmt: skip
    """Per batch: (resumed outputs, `rolling_at`'s outputs) over the same runs.
    ``spoil``: resume each batch from states kept over other values."""
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
        got, kept = ops.rolling_at_resuming(
            runs, windows, aggs, at_keys, at_ts, hop, frames=frames, clip_ns=cut,
            added_run=len(runs) - 1 if len(ts) else None,
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
        pruned = [prune(r, cut) if prune_runs[(b + i) % len(prune_runs)] else r
                  for i, r in enumerate(runs)]  # fmt: skip
        dropped = sum(len(r[1]) for r in pruned) < sum(len(r[1]) for r in runs)
        runs = [r for r in pruned if len(r[1])]
        if kept is not None and frames is not None and not dropped:
            # the untouched keys' states stay valid; the old ones are not needed again
            kept = frames.updated_by(kept, in_place=True)
        frames = kept
    return out


@settings(max_examples=120, deadline=None)
@given(
    stream=streams(),
    windows=st.sampled_from([[10], [1, 25], [7, 60, 400]]),
    aggs=st.sampled_from([RESUMABLE, ["count", "sum"], ["min", "max", "mean"]]),
    hop=st.sampled_from([None, None, 4]),
    prune_runs=st.lists(st.booleans(), min_size=1, max_size=3),
)
def test_resumed_frames_equal_frames_summed_from_their_rows(
    stream: tuple[list[Batch], int], windows: list[int], aggs: list[str], hop: int | None,
    prune_runs: list[bool],
) -> None:  # fmt: skip
    batches, delay = stream
    for got, want in replay(batches, delay, windows, aggs, hop, prune_runs):
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
@pytest.mark.parametrize("in_place", [False, True])
def test_updated_by_is_a_merge_by_key_where_the_newer_wins(
    old: set[int], new: set[int], in_place: bool
) -> None:
    """In place or not, the same merge; in place writes into the old arrays, and keeps
    writing into them when newer keys are added while spare rows are left (a copy
    leaves the old states as they were)."""

    def states(keys: set[int], tag: int) -> ops.FrameStates:
        ordered = np.array(sorted(keys), dtype=np.int64)
        words = np.stack([ordered * 10 + tag, ordered], axis=1).reshape(len(ordered), 1, 2)
        return ops.FrameStates(ordered, words, ())

    def check(merged: ops.FrameStates, old: set[int], new: set[int]) -> None:
        assert merged.keys.tolist() == sorted(old | new)
        in_key_order = merged.for_keys(merged.keys)
        expected = [k * 10 + (2 if k in new else 1) for k in sorted(old | new)]
        assert in_key_order[:, 0, 0].tolist() == expected
        assert in_key_order[:, 0, 1].tolist() == sorted(old | new)
        assert merged.for_keys(np.array([51], dtype=np.int64)).tolist() == [[[0, 0]]]

    before = states(old, 1)
    both = before.updated_by(states(new, 2), in_place=in_place)
    check(both, old, new)
    shared = np.shares_memory(both.words, before.words)
    if not in_place:
        assert not shared
        assert before.for_keys(before.keys)[:, 0, 0].tolist() == [k * 10 + 1 for k in sorted(old)]
    elif old and new and new <= old:
        assert shared  # only held keys: their rows are written where they are
    # a second in-place update over the first one's result (its rows may be out of key
    # order, with spare rows): the same merge again
    again = {k + 1 for k in new}
    later = both.updated_by(states(again, 2), in_place=in_place)
    merged_first = {k: (2 if k in new else 1) for k in old | new}
    assert later.keys.tolist() == sorted(old | new | again)
    expected_later = [k * 10 + (2 if k in again else merged_first[k]) for k in later.keys]
    assert later.for_keys(later.keys)[:, 0, 0].tolist() == expected_later
