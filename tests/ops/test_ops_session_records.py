"""Session records (`featureflow.ops.resume_sessions`) and the runs they are read from.

Every test runs under both backends (tests/ops/conftest.py). A session record is
the state the session kernel keeps of a session, so:

- resumed from nothing over a key's rows, records answer count, sum, mean, min and
  max as `ops.sessions` does (bit for bit on Mojo, whose kernel makes the same
  additions; the numpy reference of `sessions` sums by prefix differences);
- a call split at any time, resumed from the first part's last records or from
  any of its checkpoints, gives the words of one call over all rows;
- `sort_run`, `gather_runs`, `record_segments` and `splice_records` equal their
  numpy references (plain sorts, searches and masks).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import featureflow.ops as ops
from featureflow.ops import _resume as R

GAP = 50
FIXTURE = [HealthCheck.function_scoped_fixture]  # the autouse backend fixture
RECORD = R.record_words(1)


@st.composite
def rows(draw: st.DrawFn, *, nonfinite: bool = True) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """Keys 0..5 (or a wide range), times with ties and rows out of order, values with
    nulls, NaN, ±inf, signed zeros and magnitudes far apart."""
    n = draw(st.integers(0, 120))
    wide = draw(st.booleans())
    keys = np.array(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), np.int64)
    if wide:
        keys = keys * 10**12 - 3
    steps = draw(st.lists(st.sampled_from([0, 0, 1, 7, 40, 300]), min_size=n, max_size=n))
    ts = np.cumsum(np.array(steps, np.int64)) - draw(st.integers(-10**12, 10**12))
    late = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    ts = ts - np.where(np.arange(n) % 5 == draw(st.integers(0, 4)), np.array(late), 0)
    choices = [st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, -0.0, 1e22, -1e-8])]
    if nonfinite:
        choices.append(st.sampled_from([np.nan, np.inf, -np.inf]))
    values = draw(st.lists(st.one_of(*choices), min_size=n, max_size=n))
    nulls = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return keys, ts.astype(np.int64), pa.array(values, pa.float64(), mask=np.array(nulls, bool))


def _keyed(keys: np.ndarray, ts: np.ndarray, values: pa.Array) -> tuple[np.ndarray, R.KeyedRows]:
    """The rows as a run: (distinct keys, their rows in time order)."""
    order, distinct, offsets = ops.sort_run(keys, ts)
    floats = R.float_values(values.take(pa.array(order)))
    return distinct, R.KeyedRows(ts[order], [floats], offsets)


def _resume(keys: np.ndarray, start: R.InitialRecords, kept: R.KeyedRows, new: R.KeyedRows,
            max_length: int, every: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    return ops.resume_sessions(start, keys, kept, new, GAP, max_length, every)


def _nothing(n: int) -> R.InitialRecords:
    empty = np.zeros((0, RECORD), np.int64)
    return R.InitialRecords(empty, np.full(n, -1, np.int64), empty)


def _without_counter(records: np.ndarray) -> np.ndarray:
    return np.delete(records, R.R_AT, axis=1)


@settings(max_examples=80, deadline=None, suppress_health_check=FIXTURE)
@given(data=rows(), max_length=st.sampled_from([0, 30, 200]))
def test_records_from_nothing_answer_the_session_kernel(
    backend: str, data: tuple[np.ndarray, np.ndarray, pa.Array], max_length: int
) -> None:
    keys, ts, values = data
    distinct, new = _keyed(keys, ts, values)
    sessions, _, latest = _resume(
        distinct, _nothing(len(distinct)), R.KeyedRows.empty(len(distinct), 1), new,
        max_length, 0,
    )  # fmt: skip
    want = ops.sessions(ts, values, GAP, ["count", "sum", "mean", "min", "max"], keys=keys,
                        max_length=max_length or None)  # fmt: skip
    assert len(sessions) == want.num_rows
    assert np.array_equal(distinct[sessions[:, R.R_KEY]],
                          want.column("key").to_numpy() if want.num_rows else [])  # fmt: skip
    starts = want.column("session_start").cast(pa.int64()).to_numpy()
    np.testing.assert_array_equal(sessions[:, R.R_START], starts)
    np.testing.assert_array_equal(
        sessions[:, R.R_LAST] + GAP, want.column("session_end").cast(pa.int64()).to_numpy()
    )
    got = _table(sessions)
    for name in ("count", "min", "max", "sum", "mean"):
        expected = np.array(want.column(name).to_pylist(), dtype=float)
        actual = np.array(got[name], dtype=float)
        if backend == "mojo" or name in ("count", "min", "max"):
            np.testing.assert_array_equal(actual, expected, err_msg=name)
        else:  # the numpy reference of `sessions` sums by prefix differences over all
            # rows: exact to the rounding of the largest prefix
            finite = np.abs(R.float_values(values))
            scale = float(np.nanmax(np.where(np.isinf(finite), 0, finite), initial=1.0))
            np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-12 * scale * len(ts),
                                       err_msg=name)  # fmt: skip
    last_of_each = np.flatnonzero(np.r_[sessions[1:, 0] != sessions[:-1, 0], True])
    last_of_each = last_of_each[: len(sessions)]
    np.testing.assert_array_equal(latest[:, 1:], sessions[last_of_each, 1:])
    np.testing.assert_array_equal(latest[:, R.R_KEY], distinct)


def test_more_sessions_than_the_first_guess_are_all_returned(backend: str) -> None:
    """The kernel's output is sized by a guess of the sessions a row opens (learnt from
    earlier calls); a call that opens more (here every row of every key its own session,
    more than the guess's slack of records) is made again with room for all."""
    from featureflow.ops import _backend

    impl = _backend.current().backend
    n, nkeys = 6_000, 3
    keys = np.arange(n, dtype=np.int64) % nkeys
    ts = np.arange(n, dtype=np.int64) * (GAP + 1)  # each row past the gap of the one before
    values = pa.array(np.arange(n, dtype=np.float64))
    distinct, new = _keyed(keys, ts, values)
    before = getattr(impl, "_sessions_per_row", None)
    sessions, _, latest = _resume(distinct, _nothing(nkeys), R.KeyedRows.empty(nkeys, 1), new, 0, 0)
    assert len(sessions) == n
    np.testing.assert_array_equal(np.sort(sessions[:, R.R_START]), ts)
    np.testing.assert_array_equal(sessions[:, R.R_ROWS], np.ones(n))
    np.testing.assert_array_equal(latest[:, R.R_START], ts[-nkeys:])
    if backend == "mojo":  # the guess grew: the next such call fits at once
        assert before is not None and impl._sessions_per_row > before


def _table(records: np.ndarray) -> dict[str, list[float | None]]:
    """count/sum/mean/min/max of records, as `session_state.feature_rows` answers them."""
    from featureflow.session_state import _aggregates

    out = _aggregates(records, 0, {"sum", "mean"})
    return {name: column.to_pylist() for name, column in out.items()}


@settings(max_examples=80, deadline=None, suppress_health_check=FIXTURE)
@given(data=rows(), cut=st.integers(-50, 1000), max_length=st.sampled_from([0, 30]),
       every=st.sampled_from([1, 2, 5]))  # fmt: skip
def test_a_call_resumed_at_a_time_or_a_checkpoint_gives_the_words_of_one_call(
    data: tuple[np.ndarray, np.ndarray, pa.Array], cut: int, max_length: int, every: int
) -> None:
    """Rows before time ``cut`` in a first call (their newest session record kept); the
    rest in a second, as new rows: the same words as one call over all rows. And from a
    checkpoint at X of that one call, the rows at or after X as kept rows: the same."""
    keys, ts, values = data
    distinct, whole = _keyed(keys, ts, values)
    k = len(distinct)
    nothing = R.KeyedRows.empty(k, 1)
    one, checkpoints, _ = _resume(distinct, _nothing(k), nothing, whole, max_length, every)
    early = ts < ts.min() + cut if len(ts) else ts < 0
    d1, first = _keyed(keys[early], ts[early], values.filter(pa.array(early)))
    part1, _, last1 = _resume(d1, _nothing(len(d1)), R.KeyedRows.empty(len(d1), 1), first,
                              max_length, every)  # fmt: skip
    at = np.searchsorted(d1, distinct)
    found = at < len(d1)
    found[found] = d1[at[found]] == distinct[found]
    start = R.InitialRecords(last1, np.where(found, at, -1), last1[:0])
    _, second = _keyed(keys[~early], ts[~early], values.filter(pa.array(~early)))
    second = _spread(second, distinct, keys[~early])
    part2, _, _ = _resume(distinct, start, nothing, second, max_length, every)
    # one call = part 1's sessions of each key but its last, then part 2's
    keep = np.ones(len(part1), bool)
    keep[np.flatnonzero(np.r_[part1[1:, 0] != part1[:-1, 0], True])[: len(part1)]] = False
    both = np.concatenate([_keyed_by(part1[keep], d1), _keyed_by(part2, distinct)])
    both = both[np.argsort(both[:, R.R_KEY], kind="stable")]
    whole_call = _without_counter(_keyed_by(one, distinct))
    np.testing.assert_array_equal(_without_counter(both), whole_call)
    for cp in checkpoints:  # resumed from each checkpoint: its key's sessions from there on
        key = cp[R.R_KEY]
        lo, hi = whole.offsets[key], whole.offsets[key + 1]
        rest = whole.ts[lo:hi] >= cp[R.R_AT]
        kept = R.KeyedRows(whole.ts[lo:hi][rest], [whole.values[0][lo:hi][rest]],
                           np.array([0, int(rest.sum())], np.int64))  # fmt: skip
        at_cp = cp.copy()
        at_cp[R.R_AT] = 0
        start_cp = R.InitialRecords(at_cp[None], np.array([0]), at_cp[None][:0])
        again, _, _ = _resume(distinct[key : key + 1], start_cp, kept, R.KeyedRows.empty(1, 1),
                              max_length, every)  # fmt: skip
        mine = one[one[:, R.R_KEY] == key]
        mine = mine[mine[:, R.R_START] >= cp[R.R_START]]
        np.testing.assert_array_equal(_without_counter(again)[:, 1:], _without_counter(mine)[:, 1:])


def _spread(rows: R.KeyedRows, distinct: np.ndarray, keys: np.ndarray) -> R.KeyedRows:
    """``rows`` (of the distinct keys of ``keys``) re-indexed to every key of ``distinct``."""
    mine = np.unique(keys)
    counts = np.zeros(len(distinct), np.int64)
    counts[np.searchsorted(distinct, mine)] = np.diff(rows.offsets)
    return R.KeyedRows(rows.ts, rows.values, np.r_[0, np.cumsum(counts)].astype(np.int64))


def _keyed_by(records: np.ndarray, keys: np.ndarray) -> np.ndarray:
    out = records.copy()
    out[:, R.R_KEY] = keys[records[:, R.R_KEY]]
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE)
@given(data=rows(), splits=st.lists(st.integers(0, 120), max_size=4),
       wanted=st.lists(st.integers(0, 5), max_size=6),
       since=st.integers(-10**12, 10**12))  # fmt: skip
def test_runs_sorted_and_read_back_as_the_references_do(
    data: tuple[np.ndarray, np.ndarray, pa.Array],
    splits: list[int],
    wanted: list[int],
    since: int,
) -> None:
    keys, ts, values = data
    order, distinct, offsets = ops.sort_run(keys, ts)
    want = R.reference_sort_run(keys, ts)
    for got, expected in zip((order, distinct, offsets), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    runs = []  # the rows in arrival order, cut into runs
    for part in np.split(np.arange(len(keys)), sorted(s for s in splits if s <= len(keys))):
        o, _, _ = ops.sort_run(keys[part], ts[part])
        rows_ = part[o]
        runs.append((keys[rows_], ts[rows_], [values.take(pa.array(rows_))]))
    scale = 10**12 if len(keys) and abs(int(keys.max())) > 10 else 1
    query = np.unique(np.array(wanted, np.int64)) * scale - (3 if scale > 1 else 0)
    from_ns = np.full(len(query), since, np.int64)
    got = ops.gather_runs(runs, query, from_ns)
    ref = R.reference_gather_runs(runs, query, from_ns)
    np.testing.assert_array_equal(got.offsets, ref.offsets)
    np.testing.assert_array_equal(got.ts, ref.ts)
    assert got.rows is not None and ref.rows is not None
    np.testing.assert_array_equal(got.rows, ref.rows)
    np.testing.assert_array_equal(got.values[0], ref.values[0])
    short = ops.gather_runs(runs, query, from_ns, capacity=1)  # a hint too low: room made
    np.testing.assert_array_equal(short.ts, ref.ts)
    np.testing.assert_array_equal(short.values[0], ref.values[0])


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE)
@given(
    old_keys=st.lists(st.integers(0, 20), max_size=30),
    touched=st.lists(st.integers(0, 22), max_size=8, unique=True),
    data=st.data(),
    watermark=st.one_of(st.none(), st.integers(0, 400)),
)
def test_records_are_spliced_and_closed_as_the_reference_does(
    old_keys: list[int], touched: list[int], data: st.DataObject, watermark: int | None
) -> None:
    rng = np.random.default_rng(len(old_keys) + 7 * len(touched))
    old = rng.integers(0, 300, (len(old_keys), RECORD))
    old[:, R.R_KEY] = sorted(old_keys)
    keys = np.array(sorted(touched), np.int64)
    lo, hi = ops.record_segments(old[:, R.R_KEY].copy(), keys)
    ref_lo, ref_hi = R.reference_record_segments(old[:, R.R_KEY].copy(), keys)
    np.testing.assert_array_equal(lo, ref_lo)
    np.testing.assert_array_equal(hi, ref_hi)
    cut = np.array([data.draw(st.integers(a, b)) for a, b in zip(lo, hi, strict=True)], np.int64)
    counts = data.draw(st.lists(st.integers(0, 3), min_size=len(keys), max_size=len(keys)))
    new = rng.integers(0, 300, (sum(counts), RECORD))
    new[:, R.R_KEY] = np.repeat(np.arange(len(keys)), counts)
    mark = np.iinfo(np.int64).min if watermark is None else watermark
    got = ops.splice_records(old, cut, hi, new, keys, 20, 100, watermark)
    want = R.reference_splice_records(old, cut, hi, new, keys, 20, 100, mark)
    for name in ("open", "closed", "keys", "lasts", "first_keys", "first_starts"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert got.rows == want.rows


def test_a_wrong_capacity_is_an_error_not_a_wrong_answer(backend: str) -> None:
    """Mojo writes into buffers sized by Python: too small ones are refused. The numpy
    reference sizes its own, so the same call answers as with the right sizes."""
    from featureflow.ops import _backend

    impl = _backend.current().backend
    keys, ts = np.array([1, 1, 1], np.int64), np.array([0, 100, 200], np.int64)
    distinct, new = _keyed(keys, ts, pa.array([1.0, 2.0, 3.0]))

    def call() -> object:
        return impl.resume_sessions(_nothing(1), distinct, R.KeyedRows.empty(1, 1), new, 10, 0, 0)

    right = call() if backend == "numpy" else None
    original = R.pooled
    import featureflow.ops._mojo.backend as native

    try:
        R.pooled = lambda shape, dtype=np.int64: original((1, *shape[1:]), dtype)  # type: ignore[assignment]
        native.pooled = R.pooled  # type: ignore[attr-defined]
        if backend == "mojo":
            with pytest.raises(RuntimeError, match="capacity"):
                call()
        else:
            assert isinstance(right, tuple)
            for got, want in zip(call(), right, strict=True):  # type: ignore[call-overload]
                np.testing.assert_array_equal(got, want)
    finally:
        R.pooled = original  # type: ignore[assignment]
        native.pooled = original  # type: ignore[attr-defined]
