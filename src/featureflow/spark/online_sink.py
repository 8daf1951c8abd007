"""The executor side of the stream job: one view's features of a partition's events.

Runs inside the topic's ``mapInArrow`` (:mod:`featureflow.spark.topic_pass`) on
Spark's Python workers, once per view of the topic over the same Arrow
partition (all events of the entities hashed to it): :meth:`ViewTask.compute`
loads the view's state and computes its rolling or session features with
:mod:`featureflow.window_state` (Mojo kernels reading the Arrow buffers in
place); :func:`write_online` upserts every view's latest row per entity into
the online store in one write, while :meth:`ViewTask.write_history` appends the
history to the offline log beside it; :meth:`ViewTask.save_state` then saves the
new state. :class:`OnlineFeatureWriter` runs
one view alone, the same way (benchmarks replay it outside Spark).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent import futures
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from featureflow import ops, tiles
from featureflow.columns import EVENT_NS
from featureflow.repo import StreamViewSpec, cached_store
from featureflow.session_state import SessionStates
from featureflow.spark import allocators, failpoints
from featureflow.spark.metrics import freshness_histogram
from featureflow.spark.offline_sink import OfflineFeatureLog
from featureflow.spark.state import StateStore, carried_nbytes
from featureflow.state_delta import StateDelta, stack
from featureflow.window_state import (  # rolling_outputs, session_outputs: bench/stream.py
    rolling_outputs,  # noqa: F401
    rolling_step,
    session_outputs,  # noqa: F401
    session_step,
)

if TYPE_CHECKING:
    from feast import FeatureStore

    from featureflow.features import FrameStatesByColumn
    from featureflow.schema import FeatureSchema

log = logging.getLogger(__name__)

STATS_SCHEMA = (
    "rows long, entities long, state_rows long, state_bytes long, state_frame_bytes long, "
    "state_cold long, backend string, freshness array<long>, seconds array<double>"
)
"""Spark DDL of what :class:`OnlineFeatureWriter` reports per partition."""
EXECUTOR_PHASES = ("state_load", "compute", "online_write", "offline_write", "state_save")
"""The phases of a partition's work, in order: ``seconds`` of the stats row, one per phase.
``online_write`` is the one write shared by all views of the topic and, on the driver,
all partitions (the same seconds in each of their rows)."""


def write_online(store: FeatureStore, rows: Mapping[str, pa.Table]) -> None:
    """Upsert each view's ``rows`` (view name -> table) into the online store in one
    write (on Redis one hash write per entity for all views); per view, rows older
    than the stored ones are skipped."""
    from featureflow import online

    online.write_views(store, {view: table for view, table in rows.items() if table.num_rows})


def open_store(repo_path: str) -> FeatureStore:
    """The repo's Feast store for this process's online writes, with the writer's modules
    loaded. The first call in a worker imports Feast (:func:`~featureflow.repo.load_store`),
    ~80 MiB of modules: a topic task makes it before its views compute, so that they lie
    below the task's buffers in the heap rather than among them, where they kept freed
    pages from being returned (the workers' peak growth in 10 M-event runs: 744-793 MiB,
    against 801-840 MiB with the store opened at the write; docs/performance-log.md,
    *Workers import Feast only to write*)."""
    store = cached_store(repo_path)
    importlib.import_module("featureflow.online")
    return store


def write_online_of_batch(repo_path: str, batch_id: int, rows: Mapping[str, pa.Table]) -> None:
    """:func:`write_online` of micro-batch ``batch_id``, with its ``mid_online_write``
    failpoint (half of every view's rows written, then the process dies)."""
    if not any(table.num_rows for table in rows.values()):
        return
    store = open_store(repo_path)
    if failpoints.armed("mid_online_write", batch_id):
        write_online(store, {v: t.slice(0, t.num_rows // 2) for v, t in rows.items()})
        failpoints.reach("mid_online_write", batch_id)
    write_online(store, rows)


class _PhaseClock:
    """Wall seconds per phase of a partition's work (:data:`EXECUTOR_PHASES`)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(EXECUTOR_PHASES, 0.0)
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] += now - self._last
        self._last = now

    def restart(self) -> None:
        """Start timing anew (time since the last lap belongs to no phase of this view)."""
        self._last = time.perf_counter()


@dataclass
class ViewOutputs:
    """One view's results for one partition of a micro-batch, before anything is written."""

    rows: pa.Table
    """Online rows: each touched entity's latest features."""
    history: pa.Table
    """Offline rows: the features of each new event (sessions: of each closed session)."""
    kept: pa.Table
    """The events the state keeps."""
    kept_tiles: pa.Table | None
    new_ns: np.ndarray
    """Event times (epoch ns) of the new events."""
    clock: _PhaseClock = field(default_factory=_PhaseClock)
    delta: StateDelta | None = None
    """How ``kept`` follows from the state the task read (what the save writes)."""
    tiles_delta: StateDelta | None = None
    frames: FrameStatesByColumn | SessionStates | None = None
    """Frame states (rolling) or kept sessions (sessions) computed with ``kept``, held
    beside it in the worker."""
    cold: bool = False
    """The task found the view's state without the frame states (or open sessions) its
    last batch computed with it, and computed them anew from all its rows: the state was
    rebuilt from its files (a restart, or Spark handing the partition to another Python
    worker than the one that ran it last) — a cost that grows with the state."""

    @property
    def new_rows(self) -> int:
        return len(self.new_ns)

    @property
    def state_rows(self) -> int:
        return self.kept.num_rows + (0 if self.kept_tiles is None else self.kept_tiles.num_rows)

    @property
    def state_bytes(self) -> int:
        """Arrow bytes of the state kept (events and tiles), held resident in a worker."""
        return self.kept.nbytes + (0 if self.kept_tiles is None else self.kept_tiles.nbytes)

    @property
    def state_frame_bytes(self) -> int:
        """Bytes of :attr:`frames` (frame states or kept sessions), held resident beside
        the kept events: with :attr:`state_bytes`, all that the state holds in a worker."""
        return carried_nbytes(self.frames)


@dataclass(frozen=True)
class ViewTask:
    """What an executor needs to run one view of micro-batch ``batch_id``.

    The view's events from earlier batches (its ``state``) and the new ones are
    computed together, so windows and sessions span micro-batches; the state keeps
    what future on-time events (time >= ``watermark_ns``) still need. With a
    ``feature_schema`` every output passes the schema gate before anything is written.
    """

    spec: StreamViewSpec
    batch_id: int
    state: StateStore
    watermark_ns: int
    offline: OfflineFeatureLog
    feature_schema: FeatureSchema | None = None
    reads_before: int | None = None
    """Load the newest state version before this batch id (default ``batch_id``; the
    session closer reads the version ``batch_id`` itself wrote: ``batch_id + 1``)."""
    offline_suffix: str = ""
    """Appended to the offline file's name (the session closer's own file)."""

    @property
    def before(self) -> int:
        """The batch id the task's state is read before (:attr:`reads_before`)."""
        return self.batch_id if self.reads_before is None else self.reads_before

    def compute(self, partition: int, received: list[pa.RecordBatch]) -> ViewOutputs | None:
        """State load and compute of partition ``partition`` with its new events
        ``received`` (non-empty batches); None when the batch changes nothing for this
        view there (the newest state version stays valid, and held). With outputs, the
        version read is no longer held (:meth:`~featureflow.spark.state.StateStore.release`)."""
        clock = _PhaseClock()
        prior = self.state.load_events(partition, before_batch=self.before)
        if not received and prior is None:
            return None
        prior_tiles = (
            self.state.load_tiles(partition, before_batch=self.before)
            if tiles.compactable(self.spec)
            else None
        )
        new_events = pa.Table.from_batches(received) if received else None
        events = stack(prior, new_events)
        assert events is not None
        new_rows = 0 if new_events is None else new_events.num_rows
        clock.lap("state_load")
        carried = None if prior is None else self.state.take_frames(partition, prior)
        if self.spec.is_session_view:
            step = session_step(
                events, new_rows, self.spec, self.watermark_ns,
                states=carried if isinstance(carried, SessionStates) else None,
            )  # fmt: skip
        else:
            step = rolling_step(
                events, new_rows, self.spec, self.watermark_ns, prior_tiles,
                frames=None if isinstance(carried, SessionStates) else carried,
                frames_owned=True,
            )  # fmt: skip
        clock.lap("compute")
        if not new_rows and not step.history.num_rows:
            return None  # no session closed: the newest state version stays valid
        if self.feature_schema is not None:
            from featureflow.schema import check_batch

            check_batch(step.rows.schema, self.feature_schema)
            check_batch(step.history.schema, self.feature_schema)
        new_ns = events.column(EVENT_NS).slice(events.num_rows - new_rows).to_numpy()
        # the version read is not needed past here: free the runs the batch merged away
        if prior is not None:
            self.state.release(partition, prior)
        if prior_tiles is not None:
            self.state.release(partition, prior_tiles, tiles=True)
        return ViewOutputs(
            step.rows, step.history, step.kept, step.kept_tiles, new_ns, clock,
            step.delta, step.tiles_delta, step.frames, cold=prior is not None and carried is None,
        )  # fmt: skip

    def finish(self, partition: int, outputs: ViewOutputs) -> None:
        """Offline write and state save of ``outputs`` (after the online write)."""
        self.write_history(partition, outputs)
        self.save_state(partition, outputs)

    def write_history(self, partition: int, outputs: ViewOutputs) -> None:
        """The offline write of ``outputs``: its history file, rewritten identically by a
        replay, so it may run beside the online write (any thread; its seconds go to the
        ``offline_write`` phase)."""
        started = time.perf_counter()
        if outputs.history.num_rows:
            self.offline.write(
                self.batch_id, partition, outputs.history, suffix=self.offline_suffix
            )
        outputs.clock.seconds["offline_write"] += time.perf_counter() - started

    def save_state(self, partition: int, outputs: ViewOutputs) -> None:
        """The state save of ``outputs``, after every other write of the batch (a crash
        before it leaves the version the replay reads): each state table as its delta
        from the version the task read."""
        clock = outputs.clock
        clock.restart()
        if outputs.kept_tiles is not None:  # before the events: a reader takes both
            self.state.save_tiles(
                partition, self.batch_id, outputs.kept_tiles, outputs.tiles_delta,
                read_before=self.before,
            )  # fmt: skip
        self.state.save_events(
            partition, self.batch_id, outputs.kept, outputs.delta, read_before=self.before,
            frames=outputs.frames,
        )  # fmt: skip
        clock.lap("state_save")

    @staticmethod
    def stats(outputs: ViewOutputs, freshness: list[int]) -> dict[str, object]:
        """The stats of ``outputs`` (:data:`STATS_SCHEMA`'s columns, one value each)."""
        return {
            "rows": outputs.new_rows,
            "entities": outputs.rows.num_rows,
            "state_rows": outputs.state_rows,
            "state_bytes": outputs.state_bytes,
            "state_frame_bytes": outputs.state_frame_bytes,
            "state_cold": int(outputs.cold),
            "backend": ops.backend(),
            "freshness": freshness,
            "seconds": [outputs.clock.seconds[phase] for phase in EXECUTOR_PHASES],
        }


_Received = Mapping[str, list[pa.RecordBatch]]
"""A partition's new events of each view (by view name)."""


def run_views(
    tasks: list[ViewTask], repo_path: str, batch_id: int,
    received: dict[int, _Received],
    threads: Executor | None = None,
) -> list[tuple[int, ViewTask, dict[str, object]]]:  # fmt: skip
    """Every view of ``tasks`` over each shuffle partition of ``received``: state loads
    and computes, one online write for all of them with every (partition, view)'s
    offline write beside it (on the history threads), then per (partition, view) the
    state save.

    ``received`` holds, per shuffle partition, each view's new events (by view name;
    none: the views run on their state alone, as the session closer does). Returns
    (partition, task, stats) of each view that changed something in a partition
    (:meth:`ViewTask.stats`). The states are saved last, so a crash before leaves
    the previous versions for the replay. Partitions hold distinct entities, so one
    write of all their rows equals a write per partition (and costs its fixed part
    once). ``threads``: where the (partition, view) computes and state saves run side by
    side (the kernels, Arrow and Parquet release the GIL); None: one after the other.
    ``received`` is emptied once the computes are done: the new events are in the views'
    states by then, and the writes need not hold the batches they came in.
    """
    pairs = [(partition, task, views) for partition, views in received.items() for task in tasks]

    def compute(pair: tuple[int, ViewTask, _Received]) -> ViewOutputs | None:
        partition, task, views = pair
        return task.compute(partition, views.get(task.spec.name, []))

    computed = map(compute, pairs) if threads is None else threads.map(compute, pairs)
    done = [
        (partition, task, outputs)
        for (partition, task, _), outputs in zip(pairs, computed, strict=True)
        if outputs is not None
    ]
    received.clear()
    del pairs, computed
    if not done:
        return []
    rows: dict[str, list[pa.Table]] = {}
    for _, task, outputs in done:
        rows.setdefault(task.spec.name, []).append(outputs.rows)
    # the history files go beside the online write: the write mostly waits on the store,
    # the Parquet encoding is CPU, and both may happen in either order (a replay rewrites
    # both identically); only the state saves must wait for every other write
    histories = [
        _history_threads().submit(task.write_history, partition, outputs)
        for partition, task, outputs in done
    ]
    try:
        started = time.perf_counter()
        write_online_of_batch(
            repo_path, batch_id, {view: pa.concat_tables(tables) for view, tables in rows.items()}
        )
        written_at = time.time_ns()
        online_s = time.perf_counter() - started
    finally:
        futures.wait(histories)
    for written in histories:
        written.result()  # raises what a history write raised

    def finish(item: tuple[int, ViewTask, ViewOutputs]) -> tuple[int, ViewTask, dict[str, object]]:
        partition, task, outputs = item
        outputs.clock.seconds["online_write"] = online_s
        freshness = freshness_histogram(outputs.new_ns, written_at)
        task.save_state(partition, outputs)
        return partition, task, task.stats(outputs, freshness)

    return list(map(finish, done) if threads is None else threads.map(finish, done))


_HISTORY_THREADS: ThreadPoolExecutor | None = None
_HISTORY_THREADS_LOCK = threading.Lock()


def _history_threads() -> ThreadPoolExecutor:
    """The threads that write the history files beside the online write (pyarrow's Parquet
    writer releases the GIL); a pool of its own, as the callers' pools wait on these
    writes. One per two cores: each thread's allocations come from its own arena, and
    with two threads on two cores the arenas took turns, each returning its pages to the
    system between batches and faulting them in again (two tasks at once, in-process:
    0.41-0.43 s with one thread, 0.44-0.47 s before the writes overlapped, ~10 % more
    system CPU than before with two threads)."""
    global _HISTORY_THREADS
    with _HISTORY_THREADS_LOCK:
        if _HISTORY_THREADS is None:
            _HISTORY_THREADS = ThreadPoolExecutor(
                max_workers=max(1, (os.cpu_count() or 2) // 2),
                thread_name_prefix="featureflow-history",
            )
        return _HISTORY_THREADS


@dataclass(frozen=True)
class OnlineFeatureWriter:
    """``mapInArrow`` function of one view alone in batch ``batch_id``: its partition's
    features -> online store, offline log and state (what :func:`run_views` does for a
    topic's views, for one view)."""

    spec: StreamViewSpec
    repo_path: str
    batch_id: int
    state: StateStore
    watermark_ns: int
    offline: OfflineFeatureLog
    feature_schema: FeatureSchema | None = None

    def _task(self) -> ViewTask:
        return ViewTask(
            self.spec, self.batch_id, self.state, self.watermark_ns, self.offline,
            self.feature_schema,
        )  # fmt: skip

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        allocators.use_returning_allocators()
        received = [batch for batch in batches if batch.num_rows]
        # A session view also runs without new events: the watermark may close sessions.
        if not received and not self.spec.is_session_view:
            return  # nothing new: the newest state version stays valid
        context = TaskContext.get()
        assert context is not None, "runs inside a Spark task"
        stats = self.run_partition(context.partitionId(), received)
        if stats is not None:
            yield stats

    def run_partition(
        self, partition: int, received: list[pa.RecordBatch]
    ) -> pa.RecordBatch | None:
        """Shuffle partition ``partition``'s work in this batch, outside any Spark task.

        ``received`` are its non-empty record batches of new events. Returns the
        stats row (:data:`STATS_SCHEMA`, ``seconds`` per :data:`EXECUTOR_PHASES`),
        or None when the batch changed nothing (the newest state version stays valid).
        """
        done = run_views(
            [self._task()], self.repo_path, self.batch_id, {partition: {self.spec.name: received}}
        )
        if not done:
            return None
        return pa.RecordBatch.from_pylist([done[0][2]])
