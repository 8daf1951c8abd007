"""How one version of a view's state table follows from the one before: a delta.

A micro-batch turns the state table it read (version ``b - 1``) and its new
events into version ``b``. :class:`StateDelta` is that step, as small as the
batch: the rows it appends and a rule for the rows that leave, never the rows
that stay. :meth:`StateDelta.apply` rebuilds version ``b`` from version ``b - 1``
with the very functions the batch used to compute it (:func:`stack`,
:func:`in_time_order`, :meth:`StateDelta.evict`, :func:`runs_with` and the runs'
compaction), so a rebuilt version equals the one the batch held: the same rows,
in the same order, with the same schema (and, for runs, the same record batches).

A delta's parts:

- ``appended``: the rows the batch adds, in the state's schema — its new events in
  arrival order, or for a tile table the partials of the tiles it closed;
- ``order``, how the table is arranged after appending: :data:`APPEND` (version
  ``b - 1``'s rows, then the appended ones), :data:`TIME` (that, stably sorted by
  event time: :func:`in_time_order`), :data:`RUNS` (the appended rows become a
  new run, then runs merge and are pruned: :func:`featureflow.state_runs.compact`)
  or :data:`SESSIONS` (a session view's runs, :mod:`featureflow.session_runs`: the
  appended rows become a new run);
- what leaves: for :data:`APPEND` and :data:`TIME`, the rows whose ``cut_column``
  is before ``cut`` (epoch ns; None: none leave by time) and, per key of
  ``keep_from`` (columns ``key`` and :data:`KEEP_FROM`), that key's rows with an
  event time before its bound (int64 max: all of them). For :data:`RUNS` ``cut``
  is the pruning cut of the compaction, which drops rows before it lazily. For
  :data:`SESSIONS`, ``closed`` is the watermark the state has closed its sessions
  under (whose rows leave lazily), and a ``keep_from`` compacts the runs into one
  holding only the rows of its keys at or after their bounds
  (:func:`featureflow.session_runs.compact`).

Pure functions of Arrow tables: the stream job's state store
(:mod:`featureflow.spark.state`) writes and reads deltas, the window-state
functions (:mod:`featureflow.window_state`) make them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow import session_runs, state_runs
from featureflow.columns import EVENT_NS

APPEND: Final = "append"
TIME: Final = "time"
RUNS: Final = "runs"
SESSIONS: Final = "sessions"
ORDERS: Final = (APPEND, TIME, RUNS, SESSIONS)
KEEP_FROM: Final = "keep_from_ns"
"""Column of a delta's ``keep_from`` table: the key's first event time that stays (ns)."""


def stack(prior: pa.Table | None, new: pa.Table | None) -> pa.Table | None:
    """``prior``'s rows then ``new``'s, in ``prior``'s schema (None or no rows: absent)."""
    if new is None or (new.num_rows == 0 and prior is not None):
        return prior
    if prior is None:
        return new
    return pa.concat_tables([prior, new.cast(prior.schema)])


def in_time_order(events: pa.Table, new_rows: int) -> tuple[pa.Table, np.ndarray]:
    """``events`` (state, then ``new_rows`` new events) sorted by event time, and which
    rows are new (bool per sorted row).

    The sort is stable: equal times keep their order, state before new events.
    The kernels take their in-order passes on time-ordered input, and state saved
    from sorted events stays sorted, so the next batch's sort only merges it with
    the (nearly sorted) new events.
    """
    ts = events.column(EVENT_NS).to_numpy()
    first_new = events.num_rows - new_rows
    if len(ts) < 2 or bool(np.all(ts[1:] >= ts[:-1])):
        return events, np.arange(events.num_rows) >= first_new
    order = np.argsort(ts, kind="stable")
    return events.take(order), order >= first_new


def runs_with(prior: pa.Table | None, new: pa.Table, join_key: str) -> list[pa.Table]:
    """The runs of state ``prior`` (:func:`featureflow.state_runs.runs_of`) and ``new``'s
    rows as one more run, oldest first: what a runs-ordered batch compacts."""
    runs = [] if prior is None else state_runs.runs_of(prior, join_key)
    if new.num_rows:
        runs.append(state_runs.sorted_run(new, join_key))
    return runs


@dataclass(frozen=True)
class StateDelta:
    """Version ``b`` of a state table as a change of version ``b - 1`` (module docstring)."""

    appended: pa.Table
    order: str
    cut: int | None = None
    cut_column: str = EVENT_NS
    key: str | None = None
    """The join key (runs, ``keep_from``)."""
    keep_from: pa.Table | None = None
    closed: int | None = None
    """:data:`SESSIONS`: the watermark (ns) the state closed its sessions under."""

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            msg = f"order {self.order!r} is none of {ORDERS}"
            raise ValueError(msg)
        runs = self.order in (RUNS, SESSIONS)
        if (runs or self.keep_from is not None) and self.key is None:
            msg = "a runs-ordered delta or one with keep_from needs the join key"
            raise ValueError(msg)

    def apply(self, prior: pa.Table | None) -> pa.Table:
        """Version ``b`` from version ``b - 1`` (``prior``; None: no earlier version)."""
        if self.order == SESSIONS:
            assert self.key is not None
            runs = session_runs.runs_of(prior, self.key)
            if self.appended.num_rows:
                runs.append(session_runs.sorted_run(self.appended, self.key)[0])
            return self.from_session_runs(runs)
        if self.order == RUNS:
            assert self.key is not None
            return self.from_runs(runs_with(prior, self.appended, self.key))
        stacked = stack(prior, self.appended)
        assert stacked is not None
        if self.order == TIME:
            appended = 0 if stacked is prior else self.appended.num_rows
            stacked, _ = in_time_order(stacked, appended)
        return self.evict(stacked)

    def evict(self, arranged: pa.Table) -> pa.Table:
        """``arranged`` (version ``b - 1`` with the rows appended, in ``order``) without
        the rows that leave (:data:`APPEND` and :data:`TIME` orders)."""
        keep: pa.ChunkedArray | pa.Array | None = None
        if self.cut is not None:
            keep = pc.greater_equal(arranged.column(self.cut_column), self.cut)
        if self.keep_from is not None and self.keep_from.num_rows:
            assert self.key is not None
            bounds = self.keep_from.column(KEEP_FROM).combine_chunks()
            at = pc.index_in(arranged.column(self.key), self.keep_from.column(self.key))
            bound = pc.take(bounds, at)  # null: a key the rule leaves alone
            stays = pc.fill_null(pc.greater_equal(arranged.column(EVENT_NS), bound), True)
            keep = stays if keep is None else pc.and_(keep, stays)
        return arranged if keep is None else arranged.filter(keep)

    def from_runs(self, runs: list[pa.Table]) -> pa.Table:
        """The state table of :data:`RUNS` order: ``runs`` (:func:`runs_with`) compacted
        at ``cut``, in the appended rows' schema marked as runs."""
        assert self.key is not None
        cut = np.iinfo(np.int64).min if self.cut is None else self.cut
        return state_runs.state_table(
            state_runs.compact(runs, self.key, cut), self.appended.schema
        )

    def from_session_runs(self, runs: list[pa.Table]) -> pa.Table:
        """The state table of :data:`SESSIONS` order: ``runs`` (the prior's and the
        appended rows' run), compacted when ``keep_from`` is set, marked with ``closed``."""
        assert self.key is not None
        if self.keep_from is not None:
            columns = session_runs.run_columns(runs, self.key, [])
            keys = np.asarray(self.keep_from.column(self.key).to_numpy(), dtype=np.int64)
            bounds = np.asarray(self.keep_from.column(KEEP_FROM).to_numpy(), dtype=np.int64)
            runs = session_runs.compact(runs, columns, keys, bounds)
        return session_runs.state_table(runs, self.appended.schema, self.closed)


def keep_from_table(keys: pa.Array | pa.ChunkedArray, bounds: np.ndarray, key: str) -> pa.Table:
    """A ``keep_from`` rule: per key (unique), the first event time of it that stays (ns)."""
    return pa.table({key: keys, KEEP_FROM: pa.array(bounds, pa.int64())})
