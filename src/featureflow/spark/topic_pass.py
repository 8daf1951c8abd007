"""The executor side of a topic's micro-batch: one Arrow pass for all the topic's views.

The driver (:mod:`featureflow.spark.pipeline`) hash partitions the checked
batch (every record: events and bad records) by the entity key once, and
``mapInArrow`` hands each partition's Arrow batches to :class:`TopicPass`, which
in one pass over them:

1. counts records per (Kafka partition, reason; null: usable) with the largest
   usable event time (ns) per Kafka partition — what the driver advances the
   watermarks with, so no summary job runs;
2. returns the bad records (reason set) as dead-letter rows carrying the raw
   key and value bytes, Kafka coordinates, field and reason, for the driver to
   send to the dead-letter topic;
3. runs every view of the topic over the usable events
   (:func:`~featureflow.spark.online_sink.run_views`: state loads and computes,
   one online write for all views, offline writes, state saves).

A small micro-batch skips the shuffle: the driver collects its checked records with
each one's shuffle partition (Spark's own hash partition of the entity key,
:func:`shuffle_partition`) and :func:`run_on_driver` runs the same steps for every
partition, the partitions side by side on threads, with the same results.

Everything comes back as rows of :data:`OUTPUT_SCHEMA`, told apart by ``kind``
(:data:`VIEW`, :data:`COUNT`, :data:`DEAD`).

The views judge their state against the watermark *before* the batch (the one
its late events were judged by): the watermark after the batch needs every
partition's event times, which no partition knows. So, as in Spark's own
stateful operators (the watermark of batch ``b`` comes from batch ``b - 1``),
a session that the watermark after batch ``b`` finalises is closed by the pass
of batch ``b + 1``, which judges against that watermark: its offline row comes
one micro-batch later, its online row is the same (closing changes no
session's features). Where Spark would run a no-data batch, featureflow runs
:class:`SessionCloser`, a pass over the state alone (no source records), only
when no next batch may come: at the end of a run, and at the start of one whose
previous run was cut short in that close. A per-batch closer cost a second
Spark job in every micro-batch (a third of a small batch's time). Rolling
views keep the events from ``watermark_before - window`` on, a superset of
what they need.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from featureflow.columns import EVENT_NS
from featureflow.spark import allocators, failpoints, state, state_host, worker_gc
from featureflow.spark.online_sink import ViewTask, open_store, run_views
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON

if TYPE_CHECKING:
    from pyspark.sql import Column

    from featureflow.repo import StreamViewSpec

VIEW, COUNT, DEAD = "view", "count", "dead"
"""Kinds of output rows: a view's stats for one shuffle partition; the records of one
(Kafka partition, reason); one dead letter."""

OUTPUT_SCHEMA = (
    "kind string, view string, shuffle_partition int, rows long, entities long, "
    "state_rows long, state_bytes long, state_frame_bytes long, state_cold long, "
    "backend string, freshness array<long>, "
    "seconds array<double>, partition int, reason string, max_ns long, key binary, "
    "value binary, topic string, offset long, field string"
)
"""Spark DDL of the pass's output rows; the columns a kind does not use are null.

- ``view``: ``view``, ``shuffle_partition``, ``rows`` (new events), ``entities``
  (online rows written), ``state_rows``/``state_bytes`` (state kept by the partition,
  Arrow bytes), ``state_frame_bytes`` (its frame states or kept sessions, held beside
  it), ``state_cold`` (1: its frame states were computed anew, see
  :attr:`~featureflow.spark.online_sink.ViewOutputs.cold`), ``backend``, ``freshness``
  (histogram), ``seconds`` (per :data:`~featureflow.spark.online_sink.EXECUTOR_PHASES`);
- ``count``: ``partition`` (Kafka), ``reason`` (null: usable), ``rows``, ``max_ns``
  (largest event time of the usable ones, ns);
- ``dead``: ``key``, ``value``, ``topic``, ``partition``, ``offset``, ``field``, ``reason``.
"""

ARROW_SCHEMA = pa.schema(
    [
        ("kind", pa.string()), ("view", pa.string()), ("shuffle_partition", pa.int32()),
        ("rows", pa.int64()), ("entities", pa.int64()), ("state_rows", pa.int64()),
        ("state_bytes", pa.int64()), ("state_frame_bytes", pa.int64()),
        ("state_cold", pa.int64()), ("backend", pa.string()),
        ("freshness", pa.list_(pa.int64())), ("seconds", pa.list_(pa.float64())),
        ("partition", pa.int32()), ("reason", pa.string()), ("max_ns", pa.int64()),
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
        ("offset", pa.int64()), ("field", pa.string()),
    ]
)  # fmt: skip
""":data:`OUTPUT_SCHEMA` in Arrow."""


def output_rows(kind: str, n: int, **columns: Any) -> pa.RecordBatch:
    """``n`` rows of ``kind``: the given columns (arrays or lists of ``n``), nulls elsewhere."""
    arrays = []
    for field in ARROW_SCHEMA:
        if field.name == "kind":
            arrays.append(pa.array([kind] * n, pa.string()))
        elif field.name in columns:
            value = columns[field.name]
            array = value if isinstance(value, pa.Array | pa.ChunkedArray) else pa.array(value)
            arrays.append(pc.cast(array, field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def count_rows(records: pa.Table) -> pa.RecordBatch:
    """Records per (Kafka partition, reason) and the largest usable event time of each."""
    usable = pc.is_null(records.column(ERROR_REASON))
    counted = pa.table(
        {
            "partition": records.column("partition"),
            "reason": records.column(ERROR_REASON),
            "ns": pc.if_else(usable, records.column(EVENT_NS), pa.scalar(None, pa.int64())),
        }
    ).group_by(["partition", "reason"]).aggregate([("ns", "max"), ([], "count_all")])
    return output_rows(
        COUNT, counted.num_rows, partition=counted.column("partition"),
        reason=counted.column("reason"), rows=counted.column("count_all"),
        max_ns=counted.column("ns_max"),
    )  # fmt: skip


def dead_letter_rows(bad: pa.Table) -> pa.RecordBatch:
    """The dead letters of ``bad`` records, untouched bytes and their coordinates."""
    return output_rows(
        DEAD, bad.num_rows, key=bad.column("key"), value=bad.column("value"),
        topic=bad.column("topic"), partition=bad.column("partition"),
        offset=bad.column("offset"), field=bad.column(ERROR_FIELD),
        reason=bad.column(ERROR_REASON),
    )  # fmt: skip


def view_row(view: str, partition: int, stats: dict[str, object]) -> pa.RecordBatch:
    return output_rows(
        VIEW, 1, view=[view], shuffle_partition=[partition],
        **{name: [value] for name, value in stats.items()},
    )  # fmt: skip


def after_task(batch_id: int) -> None:
    """What a worker sheds once a task of micro-batch ``batch_id`` is done: the state
    versions other workers replaced (:func:`~featureflow.spark.state.drop_superseded`).

    No sweep of the allocators' free pages here: they return freed pages as they go
    (:mod:`~featureflow.spark.allocators`). Sweeping after each task instead
    (``malloc_trim``, Arrow's ``release_unused``) lowered the workers' RSS between
    tasks but not their peak, and cost a topic batch of 200 k events over 24 h of
    state 1.304 s against 1.155 s.

    The first task of a process also freezes what it holds for the collector
    (:func:`~featureflow.spark.worker_gc.settle`): PySpark collects garbage after
    every task of a reused worker.
    """
    state.drop_superseded(batch_id)
    worker_gc.settle()


def _partition_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "runs inside a Spark task"
    return context.partitionId()


@dataclass(frozen=True)
class TopicPass:
    """``mapInArrow`` function of a topic's micro-batch ``batch_id`` (see the module).

    Its input: the checked records of one shuffle partition, with every view's
    columns, the Kafka coordinates, ``error_field``/``error_reason`` and the raw key
    and value bytes (set on bad records only).
    """

    tasks: tuple[ViewTask, ...]
    repo_path: str
    batch_id: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        allocators.use_returning_allocators()
        received = [batch for batch in batches if batch.num_rows]
        if received:
            handed = [pa.Table.from_batches(received)]  # see run_records: freed once computed
            received.clear()
            yield from state_host.run(partition_outputs, self, _partition_id(), handed)
        worker_gc.settle()

    def run_partition(
        self, partition: int, records: pa.Table | list[pa.Table]
    ) -> Iterator[pa.RecordBatch]:
        """The output rows of shuffle partition ``partition``'s ``records`` (outside Spark
        too; a one-element list: handed over, see :func:`run_records`)."""
        yield from run_records(self.tasks, self.repo_path, self.batch_id, records, partition)


def partition_outputs(
    topic: TopicPass, partition: int, records: pa.Table | list[pa.Table]
) -> list[pa.RecordBatch]:
    """:meth:`TopicPass.run_partition`, then :func:`after_task`: a shuffled task's work
    where the executor's state host runs it (:mod:`~featureflow.spark.state_host`)."""
    return _task_outputs(topic, topic.run_partition(partition, records))


def usable_outputs(
    topic: TopicPass, partition: int, usable: pa.Table | list[pa.Table]
) -> list[pa.RecordBatch]:
    """:func:`partition_views` of state partition ``partition``'s usable records (their
    counts and dead letters returned by the caller), then :func:`after_task`: one slice
    of a keyed task (:func:`slices_in_turn`) where the executor's state host runs it."""
    return _task_outputs(
        topic, partition_views(topic.tasks, topic.repo_path, topic.batch_id, usable, partition)
    )


def _task_outputs(topic: TopicPass, rows: Iterator[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The rows of a task's ``rows`` (not yet started), then :func:`after_task`. The store
    is opened (:func:`~featureflow.spark.online_sink.open_store`) before the views
    compute, though only the online write uses it."""
    open_store(topic.repo_path)
    out = list(rows)
    after_task(topic.batch_id)
    return out


def slices_in_turn(
    topic: TopicPass, by_partition: dict[int, list[pa.Table]]
) -> Iterator[pa.RecordBatch]:
    """The views' rows of each state partition's usable records (tables of view columns,
    which this empties), one partition after the other through the state host
    (:func:`usable_outputs`): each partition's views, online write and state saves before
    the next, so that a task's memory above the state follows its largest partition, not
    all of its records (a keyed task's slices)."""
    for partition in sorted(by_partition):
        handed = [pa.concat_tables(by_partition.pop(partition))]  # freed once computed
        yield from state_host.run(usable_outputs, topic, partition, handed)


def run_records(
    tasks: tuple[ViewTask, ...], repo_path: str, batch_id: int,
    records: pa.Table | list[pa.Table], partition: int,
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The output rows of shuffle partition ``partition``'s checked ``records`` (see
    :class:`TopicPass`): counts, dead letters, then every view.

    Args:
        records: the records, or a one-element list of them, which this empties: handed
            over so, they are freed once the views have computed (the views' new events
            are in their states by then), not held through the writes, where the state
            host's two tasks peak.
    """
    if isinstance(records, list):
        records = records.pop()
    out, by_partition = counted_and_split(records, partition)
    del records  # run_views frees the received events once computed
    yield from out
    if by_partition:  # handed over: freed once computed
        yield from partition_views(
            tasks, repo_path, batch_id, [by_partition.pop(partition)], partition
        )


def counted_and_split(
    records: pa.Table, partitions: int | pa.Array | pa.ChunkedArray,
    columns: list[str] | None = None,
) -> tuple[list[pa.RecordBatch], dict[int, pa.Table]]:  # fmt: skip
    """Checked ``records`` -> their count rows and dead letters, and their usable records
    (``columns`` of them; None: all) by state partition (``partitions``: one for all
    records, or one per record)."""
    out = [count_rows(records)]
    bad = pc.is_valid(records.column(ERROR_REASON))
    usable = records if columns is None else records.select(columns)
    if pc.any(bad).as_py():
        out.append(dead_letter_rows(records.filter(bad)))
        usable = usable.filter(pc.invert(bad))
        if not isinstance(partitions, int):
            partitions = partitions.filter(pc.invert(bad))
    del records
    if not usable.num_rows:
        return out, {}
    if isinstance(partitions, int):
        return out, {partitions: usable}
    return out, split_by_partition(usable, partitions)


def partition_views(
    tasks: tuple[ViewTask, ...], repo_path: str, batch_id: int,
    usable: pa.Table | list[pa.Table], partition: int,
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The views' rows of one state partition's ``usable`` records (a one-element list:
    handed over, freed once computed): computes, online write, state saves."""
    if isinstance(usable, list):
        usable = usable.pop()
    one = {partition: _received(tasks, usable)}
    del usable
    for _, task, stats in run_views(list(tasks), repo_path, batch_id, one):
        yield view_row(task.spec.name, partition, stats)


def view_columns(specs: Iterable[StreamViewSpec]) -> list[str]:
    """The columns the views of ``specs`` compute from: each one's join key, ``event_ns``
    and value columns, in that order, each column once."""
    return list(
        dict.fromkeys(
            name for spec in specs for name in (spec.join_key, EVENT_NS, *spec.value_columns)
        )
    )


def _received(tasks: tuple[ViewTask, ...], rows: pa.Table) -> Mapping[str, list[pa.RecordBatch]]:
    """Each view's columns of ``rows`` (by view name), as :func:`run_views` takes them."""
    return {
        task.spec.name: rows.select(view_columns([task.spec])).to_batches() for task in tasks
    }


def split_by_partition(
    records: pa.Table, partitions: pa.Array | pa.ChunkedArray
) -> dict[int, pa.Table]:
    """``records`` by state partition (one per record), each in its arrival order and in
    buffers of its own (freed with it): one stable sort, then a ``take`` per partition (a
    filter per partition would read every record each time)."""
    order = pc.sort_indices(partitions)  # stable: ties keep their order
    counts = pc.value_counts(partitions.take(order))
    split, start = {}, 0
    for partition, count in zip(
        counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True
    ):
        split[int(partition)] = records.take(order.slice(start, count))
        start += count
    return split


_DRIVER_THREADS: ThreadPoolExecutor | None = None


def _driver_threads() -> ThreadPoolExecutor:
    """The threads the driver's pass runs partitions on, one per core: the kernels,
    Arrow, Parquet and the stores' sockets release the GIL, so partitions overlap as
    the executors' tasks would."""
    global _DRIVER_THREADS
    if _DRIVER_THREADS is None:
        _DRIVER_THREADS = ThreadPoolExecutor(
            max_workers=os.cpu_count() or 2, thread_name_prefix="featureflow-driver-pass"
        )
    return _DRIVER_THREADS


PARTITION_COLUMN = "featureflow_shuffle_partition"
"""The driver's pass: the shuffle partition of each record's entity, as Spark's
``repartition(n, key)`` puts it (:func:`shuffle_partition`)."""


def shuffle_partition(join_key: str, partitions: int) -> Column:
    """Spark's own shuffle partition of ``join_key`` among ``partitions``: the hash
    partitioning of ``repartition(partitions, join_key)`` is ``pmod(murmur3(key, 42),
    partitions)``, which is what the SQL function ``hash`` computes, for every type."""
    from pyspark.sql import functions as F

    return F.pmod(F.hash(join_key), F.lit(partitions)).alias(PARTITION_COLUMN)


def run_on_driver(
    tasks: tuple[ViewTask, ...], repo_path: str, batch_id: int, records: pa.Table,
    threads: Executor | None = None,
) -> pa.Table:  # fmt: skip
    """The pass of a small micro-batch on the driver: ``records`` (collected, with
    :data:`PARTITION_COLUMN`) counted and split by shuffle partition, the partitions'
    views side by side on ``threads`` (None: one per core) with one online write for all
    of them, every shuffle partition's state resident in the driver's Python process
    between batches.

    Outputs, state versions and files are those of the shuffled pass: the same
    partitions, the same functions, the records of a partition in the same order
    (the Kafka partitions' records in turn, by offset).
    """
    allocators.use_returning_allocators()
    out, by_partition = counted_and_split(
        records.drop_columns([PARTITION_COLUMN]), records.column(PARTITION_COLUMN)
    )
    del records
    every = {
        partition: _received(tasks, rows) for partition, rows in sorted(by_partition.items())
    }
    by_partition.clear()
    out.extend(
        view_row(task.spec.name, partition, stats)
        for partition, task, stats in run_views(
            list(tasks), repo_path, batch_id, every, threads or _driver_threads()
        )
    )
    after_task(batch_id)
    return pa.Table.from_batches(out, schema=ARROW_SCHEMA)


@dataclass(frozen=True)
class SessionCloser:
    """``mapInArrow`` function over ``spark.range(partitions)`` (one row per shuffle
    partition): the session views' sessions that the watermark after batch ``batch_id``
    closes, in every partition's state as batch ``batch_id`` left it.

    Its ``tasks`` read the state version of ``batch_id`` itself and rewrite it; the
    sessions they close go to a file of their own in the offline log. It runs on a
    settled batch only (one Spark will not re-run), and running it again closes
    nothing more: a partition whose sessions it closed already writes nothing.
    """

    tasks: tuple[ViewTask, ...]
    repo_path: str
    batch_id: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        allocators.use_returning_allocators()
        for _ in batches:
            pass
        yield from state_host.run(closed_sessions, self, _partition_id())
        worker_gc.settle()


def closed_sessions(closer: SessionCloser, partition: int) -> list[pa.RecordBatch]:
    """:class:`SessionCloser`'s work for ``partition``, where the executor's state host
    runs it: the views' rows, then its failpoint and :func:`after_task`."""
    out = [
        view_row(task.spec.name, partition, stats)
        for _, task, stats in run_views(
            list(closer.tasks), closer.repo_path, closer.batch_id, {partition: {}}
        )
    ]
    failpoints.reach("mid_session_close", closer.batch_id)
    after_task(closer.batch_id)
    return out
