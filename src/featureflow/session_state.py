"""A session view's open sessions kept as running aggregates between micro-batches.

:class:`SessionStates` is what a worker carries beside a session view's state
version (:mod:`featureflow.session_runs`), like the rolling view's frame states:
every open session as a record (:mod:`featureflow.ops._resume`: start, last
event time, rows, and per value column count, compensated sum, min and max),
plus *checkpoints* of long sessions (the session over its rows before some time
X, every :data:`CHECKPOINT_EVERY` rows). A micro-batch then costs its own
events (:func:`advance`):

- an entity whose new events all come at or after its latest event extends
  its latest session from the record, or closes it and opens the next, in
  O(its new events);
- an entity with an out-of-order event resumes from the latest point at or
  before that event — a checkpoint, or the start of one of its open sessions —
  reading back from the runs only its events after that point (the whole open
  sessions when the event comes before all of them);
- every open session is tested against the watermark in one vectorised pass
  over the records (start and last event time), touched or not: a session is
  final when last + gap < watermark or start + max length < watermark; its
  record becomes its offline row.

The records hold the additions the session kernel makes, in its order, so the
features equal a pass over the sessions' events bit for bit (on the Mojo backend;
the numpy reference makes the same additions in Python, where its own session
kernel sums by prefix differences, equal to rounding). A batch on a worker
without the states (a replay, a restart, another executor) first builds them
from the runs (:func:`build`, one pass over the state), which gives the same
records. The states are worker memory only: never written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa

from featureflow import ops
from featureflow.features import aggregated_columns
from featureflow.ops import InitialRecords, KeyedRows, Spliced
from featureflow.ops._resume import (
    C_COUNT,
    C_FINITE,
    C_MAX,
    C_MIN,
    C_SUM,
    R_AT,
    R_COL,
    R_HEAD,
    R_KEY,
    R_LAST,
    R_ROWS,
    R_START,
    record_words,
)
from featureflow.repo import SESSION_DURATION, SESSION_START, StreamViewSpec

CHECKPOINT_EVERY: Final = 64
"""Rows of an entity between two checkpoints: what an out-of-order event costs at most
beyond the events after it."""
RUNNING_AGGS: Final = frozenset({"count", "sum", "mean", "min", "max"})
"""The aggregates a session record answers."""
_NONE: Final = np.iinfo(np.int64).max


def supported(spec: StreamViewSpec, schema: pa.Schema) -> bool:
    """Whether the view's state can be runs with kept sessions: an integer join key,
    float64 value columns and aggregates among :data:`RUNNING_AGGS`."""
    if spec.session_gap_ns is None or not pa.types.is_integer(schema.field(spec.join_key).type):
        return False
    if not {agg.function for agg in spec.aggregations} <= RUNNING_AGGS:
        return False
    return all(schema.field(c).type == pa.float64() for c in aggregated_columns(spec))


@dataclass(frozen=True)
class SessionStates:
    """Open sessions and checkpoints of a session view's entities, as records.

    ``sessions``: every open session (int64 records, word :data:`R_KEY` the entity),
    sorted by entity then start; ``keys`` and ``lasts``: each one's entity and last
    event time, and ``first_keys``/``first_starts`` each entity's first open start
    (kept apart: read from the records column by column, each would cost a pass over
    them); ``live_rows``: the events they hold; ``checkpoints``: sorted by entity then
    time, each inside one of the open sessions, and ``checkpoint_keys`` their entities;
    ``signature``: the gap, max length (ns) and value columns the records answer.
    """

    sessions: np.ndarray
    keys: np.ndarray
    lasts: np.ndarray
    first_keys: np.ndarray
    first_starts: np.ndarray
    live_rows: int
    checkpoints: np.ndarray
    checkpoint_keys: np.ndarray
    signature: tuple[int, int, tuple[str, ...]]

    @property
    def nbytes(self) -> int:
        arrays = (self.sessions, self.keys, self.lasts, self.first_keys, self.first_starts,
                  self.checkpoints, self.checkpoint_keys)  # fmt: skip
        return sum(int(a.nbytes) for a in arrays)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(entities, first open session's start): each entity's first live event time."""
        return self.first_keys, self.first_starts


def signature(spec: StreamViewSpec) -> tuple[int, int, tuple[str, ...]]:
    """What a view's records are computed with: gap, max length (ns), value columns."""
    assert spec.session_gap_ns is not None
    return spec.session_gap_ns, spec.session_max_length_ns, tuple(aggregated_columns(spec))


def _last_at_or_before(
    values: np.ndarray, lo: np.ndarray, hi: np.ndarray, limit: np.ndarray
) -> np.ndarray:
    """Per segment [lo, hi) of ``values`` (sorted within it), the last position whose
    value is <= ``limit``, or lo - 1 (a vectorised binary search)."""
    a, b = lo.copy(), hi.copy()
    last = max(len(values) - 1, 0)
    while True:
        active = a < b
        if not active.any():
            return a - 1
        mid = (a + b) // 2
        right = values[np.minimum(mid, last)] <= limit if len(values) else active & False
        a = np.where(active & right, mid + 1, a)
        b = np.where(active & ~right, mid, b)


def _states(
    opened: Spliced, checkpoints: np.ndarray, ckeys: np.ndarray, spec: StreamViewSpec,
    watermark_ns: int | None,
) -> SessionStates:  # fmt: skip
    """The states of ``opened`` sessions with the checkpoints still worth keeping: inside
    an open session (closed sessions come before open ones), and per entity only the
    newest at or before the watermark (no later event comes before it) with those
    after."""
    if len(checkpoints):
        keys, starts = opened.first_keys, opened.first_starts
        at = np.searchsorted(keys, ckeys)
        found = at < len(keys)
        found[found] &= keys[at[found]] == ckeys[found]
        keep = found.copy()
        keep[found] = checkpoints[found, R_START] >= starts[at[found]]
        if watermark_ns is not None:
            old = checkpoints[:, R_AT] <= watermark_ns
            newest_old = old & ~np.r_[(ckeys[1:] == ckeys[:-1]) & old[1:], False]
            keep &= ~old | newest_old
        checkpoints, ckeys = checkpoints[keep], ckeys[keep]
    return SessionStates(
        opened.open, opened.keys, opened.lasts, opened.first_keys, opened.first_starts,
        opened.rows, checkpoints, ckeys, signature(spec),
    )  # fmt: skip


def build(
    runs: list[ops.RunColumns], spec: StreamViewSpec, closed_ns: int | None
) -> SessionStates:
    """The states of a state table's runs: every entity's sessions over its rows in the
    runs, those closed under ``closed_ns`` (the rows the state has closed) left out."""
    assert spec.session_gap_ns is not None
    keys = _entity_keys(runs)
    ncols = len(signature(spec)[2])
    width = record_words(ncols)
    none = _no_records(len(keys), width)
    kept = _read_all(runs, keys)
    sessions, checkpoints, _ = _resume(none, keys, kept, KeyedRows.empty(len(keys), ncols), spec)
    nowhere = np.zeros(len(keys), np.int64)
    opened = ops.splice_records(
        np.zeros((0, width), np.int64), nowhere, nowhere, sessions, keys, spec.session_gap_ns,
        spec.session_max_length_ns, closed_ns,
    )  # fmt: skip
    checkpoints[:, R_KEY] = keys[checkpoints[:, R_KEY]]
    return _states(opened, checkpoints, checkpoints[:, R_KEY].copy(), spec, closed_ns)


def _entity_keys(runs: list[ops.RunColumns]) -> np.ndarray:
    parts = [np.unique(keys) for keys, _, _ in runs]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def _read_all(runs: list[ops.RunColumns], keys: np.ndarray) -> KeyedRows:
    ncols = len(runs[0][2]) if runs else 0
    if not runs or not len(keys):
        return KeyedRows.empty(len(keys), ncols)
    return ops.gather_runs(runs, keys, np.full(len(keys), np.iinfo(np.int64).min, np.int64))


def _no_records(keys: int, width: int) -> InitialRecords:
    """Every key starts without a session."""
    nothing = np.zeros((0, width), np.int64)
    return InitialRecords(nothing, np.full(keys, -1, np.int64), nothing)


def _resume(
    init: InitialRecords, keys: np.ndarray, kept: KeyedRows, new: KeyedRows,
    spec: StreamViewSpec,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    assert spec.session_gap_ns is not None
    if not len(keys):
        nothing = np.zeros((0, init.records.shape[1]), np.int64)
        return nothing, nothing, nothing
    return ops.resume_sessions(
        init, keys, kept, new, spec.session_gap_ns, spec.session_max_length_ns,
        CHECKPOINT_EVERY,
    )  # fmt: skip


@dataclass(frozen=True)
class Advanced:
    """A batch's sessions: the states after it, each touched entity's latest session
    (in entity order) and the sessions the watermark closed (by entity, then start)."""

    states: SessionStates
    latest: np.ndarray
    closed: np.ndarray


def advance(
    states: SessionStates,
    runs: list[ops.RunColumns],
    touched: np.ndarray,
    new: KeyedRows,
    spec: StreamViewSpec,
    watermark_ns: int,
) -> Advanced:
    """The sessions after a batch whose new events (``new``: per entity of ``touched``,
    sorted and distinct, its events in time order, ties in arrival order) follow the
    events ``states`` were computed over (the rows of ``runs``), closed under
    ``watermark_ns`` (see the module docstring)."""
    assert spec.session_gap_ns is not None
    width = states.sessions.shape[1]
    sessions, checkpoints = states.sessions, states.checkpoints
    lo, hi = ops.record_segments(states.keys, touched)
    has = hi > lo
    first_new = new.ts[new.offsets[:-1]]
    latest = np.maximum(hi - 1, 0)
    last_ns = states.lasts[latest] if len(sessions) else np.zeros(len(touched), np.int64)
    extend = has & (first_new >= last_ns)
    start_at = np.where(extend, latest, -1)  # the record each entity starts from
    cut = np.where(extend, hi - 1, hi)  # an entity's sessions from cut on are recomputed
    resume_ns = np.full(len(touched), _NONE, np.int64)
    clo, chi = ops.record_segments(states.checkpoint_keys, touched)
    ccut = chi.copy()  # and its checkpoints from ccut on
    back = np.flatnonzero(has & ~extend)  # out of order: resume from an earlier point
    extra = np.zeros((0, width), np.int64)
    if len(back):
        extra = _plan_back(back, sessions, checkpoints, lo, hi, clo, chi, first_new,
                           start_at, cut, ccut, resume_ns)  # fmt: skip
    read = np.flatnonzero(resume_ns != _NONE)
    # rows at or after a resume point are those of the sessions from `cut` on, at most
    expected = int(sessions[:, R_ROWS][_ranges(cut[read], hi[read])].sum()) if len(read) else 0
    kept = _read_back(runs, touched, read, resume_ns, len(new.values), expected)
    init = InitialRecords(sessions, start_at, extra)
    out, new_cps, latest_records = _resume(init, touched, kept, new, spec)
    spliced = ops.splice_records(
        sessions, cut, hi, out, touched, spec.session_gap_ns, spec.session_max_length_ns,
        watermark_ns,
    )  # fmt: skip
    cps = ops.splice_records(checkpoints, ccut, chi, new_cps, touched, 0, 0, None)
    return Advanced(
        _states(spliced, cps.open, cps.keys, spec, watermark_ns), latest_records, spliced.closed
    )


def _plan_back(
    back: np.ndarray, sessions: np.ndarray, checkpoints: np.ndarray, lo: np.ndarray,
    hi: np.ndarray, clo: np.ndarray, chi: np.ndarray, first_new: np.ndarray,
    start_at: np.ndarray, cut: np.ndarray, ccut: np.ndarray, resume_ns: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Where the entities ``back`` (an event before their latest one) resume: from the
    latest of their checkpoints and open sessions' starts at or before their first new
    event (from their first open session when none is): fills their ``start_at``
    (-1: no session; -2 - i: row i of the records returned, their checkpoints), ``cut``
    (first session recomputed), ``ccut`` (first checkpoint recomputed) and ``resume_ns``
    (the first time read back from the runs)."""
    blo, bhi, limit = lo[back], hi[back], first_new[back]
    s_at = _last_at_or_before(sessions[:, R_START], blo, bhi, limit)
    c_at = _last_at_or_before(checkpoints[:, R_AT], clo[back], chi[back], limit)
    s_ns = np.where(s_at >= blo, sessions[np.maximum(s_at, 0), R_START], np.iinfo(np.int64).min)
    c_ns = checkpoints[np.maximum(c_at, 0), R_AT] if len(checkpoints) else s_ns
    use_cp = (c_at >= clo[back]) & (c_ns > s_ns)
    s_at = np.where(s_at >= blo, s_at, blo)  # none before the event: every open session
    cp = np.take(checkpoints, c_at[use_cp], axis=0)
    if len(cp):
        s_at[use_cp] = _last_at_or_before(
            sessions[:, R_START], blo[use_cp], bhi[use_cp], cp[:, R_START]
        )
        cp[:, R_AT] = 0
    start_at[back] = -1
    start_at[back[use_cp]] = -2 - np.arange(len(cp))
    cut[back] = s_at
    resume_ns[back] = np.where(use_cp, c_ns, sessions[s_at, R_START])
    ccut[back] = _last_at_or_before(checkpoints[:, R_AT], clo[back], chi[back], resume_ns[back]) + 1
    return cp


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The positions of the ranges [lo, hi) (few, short), concatenated."""
    parts = [np.arange(a, b, dtype=np.int64) for a, b in zip(lo, hi, strict=True)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _read_back(
    runs: list[ops.RunColumns], touched: np.ndarray, read: np.ndarray, from_ns: np.ndarray,
    ncols: int, expected: int,
) -> KeyedRows:  # fmt: skip
    """The runs' rows of the entities ``touched[read]`` from ``from_ns`` on (about
    ``expected`` of them), as the kept rows of every touched entity (none for the
    others)."""
    if not len(read) or not runs:
        return KeyedRows.empty(len(touched), ncols)
    found = ops.gather_runs(runs, touched[read], from_ns[read], capacity=expected)
    counts = np.zeros(len(touched), np.int64)
    counts[read] = np.diff(found.offsets)
    return KeyedRows(found.ts, found.values, np.r_[0, np.cumsum(counts)].astype(np.int64))


def feature_rows(records: np.ndarray, spec: StreamViewSpec, key_type: pa.DataType) -> pa.Table:
    """The sessions of ``records`` as the online store and offline log take them: the join
    key, the view's timestamp field (the last event's time, timestamp[us, UTC]), then
    :func:`featureflow.features.session_features`' columns (start, duration, aggregates);
    what :func:`featureflow.window_state.with_event_timestamp` makes of those."""
    start, last = records[:, R_START], records[:, R_LAST]
    stamps = pa.array(last, pa.timestamp("ns", tz="UTC"))
    table: dict[str, pa.Array] = {
        spec.join_key: pa.array(records[:, R_KEY]).cast(key_type),
        spec.timestamp_field: stamps.cast(pa.timestamp("us", tz="UTC"), safe=False),
        SESSION_START: pa.array(start // 1_000, pa.timestamp("us", tz="UTC")),
        SESSION_DURATION: pa.array((last - start) / 1e9, pa.float64()),
    }
    columns = list(signature(spec)[2])
    functions = {agg.function for agg in spec.aggregations}
    computed = [_aggregates(records, c, functions) for c in range(len(columns))]
    for agg in spec.aggregations:
        table[agg.output_name] = computed[columns.index(agg.column)][agg.function]
    return pa.table(table)


def _aggregates(records: np.ndarray, column: int, functions: set[str]) -> dict[str, pa.Array]:
    """The aggregates of value column ``column`` per record, with the session kernel's
    IEEE results where a session holds ±inf (`featureflow.ops._nonfinite`): sum and mean
    +inf, -inf, or NaN when it holds both; count, min and max take them as values."""
    base = R_HEAD + R_COL * column
    words = np.ascontiguousarray(records[:, base : base + R_COL].T)  # one row a word
    count, finite = words[C_COUNT], words[C_FINITE]
    floats = words[C_SUM:].view(np.float64)
    empty = count == 0
    out = {"count": pa.array(count, pa.int64())}
    out["min"] = pa.array(floats[C_MIN - C_SUM], pa.float64(), mask=empty)
    out["max"] = pa.array(floats[C_MAX - C_SUM], pa.float64(), mask=empty)
    if not functions & {"sum", "mean"}:
        return out
    total = floats[0] + floats[1]
    mean = np.divide(total, finite, out=np.zeros_like(total), where=finite > 0)
    valid = finite > 0
    positive = ~empty & (floats[C_MAX - C_SUM] == np.inf)
    negative = ~empty & (floats[C_MIN - C_SUM] == -np.inf)
    if positive.any() or negative.any():
        infinite = positive | negative
        signed = np.where(positive & negative, np.nan, np.where(positive, np.inf, -np.inf))
        total, mean = np.where(infinite, signed, total), np.where(infinite, signed, mean)
        valid = valid | infinite
    out["sum"] = pa.array(total, pa.float64(), mask=~valid)
    out["mean"] = pa.array(mean, pa.float64(), mask=~valid)
    return out
