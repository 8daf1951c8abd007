"""The pass per Kafka partition of a topic keyed by its entity (``--keyed-topic``).

A topic is keyed by its entity when every record's Kafka key is the entity's decimal text
and its partition is the declared partitioner's choice for that key
(:mod:`featureflow.events.kafka_keys`). Then an entity's records all sit in one Kafka
partition, and the pass per Kafka partition can keep its state there: no shuffle, and no
trip of the parsed rows back to the JVM (``bench/layout_floors.py``: 0.51x the job's
layout; performance log, *The layout's own cost*).

:func:`checked_records` turns the raw records of one Kafka partition into what the
shuffled pass receives (:class:`~featureflow.spark.topic_pass.TopicPass`): the view
columns, ``event_ns``, the Kafka coordinates, ``error_field``/``error_reason`` (the
parser's first failing check, then the keying checks, then the event-time rules), and the
raw bytes, topic and offset of dead letters only. A record whose timestamp only Spark
reads (a text other than epoch digits and the usual RFC 3339 forms) leaves the whole
partition's batch *undecided*: that partition takes the Spark path (``parse_events``) on
the driver, through the same keying checks and event-time rules (:func:`finish`), so each
state version is still built once.

One task must hold one Kafka partition's whole offset range: Spark's Kafka source gives
each topic partition one task unless ``minPartitions`` or ``maxRecordsPerPartition`` is
set, which the job never sets (a task that finds several Kafka partitions fails with
:class:`KeyedTopicError`).

Exact only when the topic really is keyed so: a usable record whose key is not its
entity's decimal text (:data:`KEY_NOT_ENTITY`), or which sits in another partition than
the partitioner's for its key (:data:`WRONG_PARTITION`), is a dead letter naming the field
``key`` and that reason, never folded into another entity's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow.columns import EVENT_NS
from featureflow.events import kafka_keys
from featureflow.events.checks import first_failing, read_stamps_as_spark
from featureflow.events.json_batch import BatchJsonParser
from featureflow.events.json_records import STAMP, JsonRecordParser
from featureflow.spark import allocators, worker_gc
from featureflow.spark.event_time import (
    DEAD_LETTER_ONLY,
    mark_event_time_collected,
    without_unneeded_bytes_collected,
)
from featureflow.spark.online_sink import ViewTask
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON
from featureflow.spark.state import keyed_scheme
from featureflow.spark.topic_pass import (
    PARTITION_COLUMN,
    TopicPass,
    counted_and_split,
    output_rows,
    run_on_driver,
    slices_in_turn,
    view_columns,
)

KEY_NOT_ENTITY = "the Kafka key is not the entity's decimal text (the topic is keyed by it)"
WRONG_PARTITION = "not in its key's partition under the topic's declared partitioner"


SLICE_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
"""Fibonacci hashing's multiplier (2^64 / the golden ratio): an entity's slice is the high
half of its id times this, modulo the slices, unrelated to the Kafka partitioner's hash of
its decimal text."""


def entity_slices(entities: pa.Array | pa.ChunkedArray, slices: int) -> np.ndarray:
    """Each entity's slice among ``slices`` (uint64), a pure function of the entity id
    (int64; a null counts as 0): the same in every batch, replay and process."""
    ids = pc.fill_null(entities, 0).to_numpy().astype(np.int64, copy=False)
    return ((ids.view(np.uint64) * SLICE_MULTIPLIER) >> np.uint64(32)) % np.uint64(slices)


@dataclass(frozen=True)
class KeyedTopic:
    """How a topic is keyed: its partition count and its producers' partitioner; and into
    how many state slices each Kafka partition's entities are cut (None: chosen when the
    job starts, see :func:`~featureflow.spark.pipeline.keyed_slices`).

    Kafka partition ``p`` holds state partitions ``p * slices`` to ``p * slices + slices -
    1``: a task runs its records one slice after the other (compute, online write, state
    save), so its memory above the state follows a slice's share of the batch, not its
    whole Kafka partition's (performance log, *Slices of a keyed task*)."""

    partitions: int
    partitioner: str = kafka_keys.MURMUR2
    slices: int | None = None

    @property
    def slice_count(self) -> int:
        assert self.slices is not None, "slices are chosen when the job starts"
        return self.slices

    @property
    def state_partition_count(self) -> int:
        """The state's partitions: every Kafka partition's slices."""
        return self.partitions * self.slice_count

    @property
    def scheme(self) -> str:
        """How the state places entities (:meth:`~featureflow.spark.state.StateStore.
        check_partitioning`): ``kafka-<partitioner>``, with ``/<slices>-slices`` when a
        Kafka partition is cut into several."""
        return keyed_scheme(self.partitioner, self.slice_count)

    def state_partitions(
        self, kafka_partitions: int | pa.Array | pa.ChunkedArray,
        entities: pa.Array | pa.ChunkedArray,
    ) -> pa.Array:  # fmt: skip
        """The state partition (int32) of each record: its Kafka partition's first plus its
        entity's slice (``kafka_partitions``: one for all records, or one per record)."""
        kafka = (
            np.int64(kafka_partitions) if isinstance(kafka_partitions, int)
            else kafka_partitions.to_numpy().astype(np.int64)
        )  # fmt: skip
        entity_slice = entity_slices(entities, self.slice_count).astype(np.int64)
        return pa.array((kafka * self.slice_count + entity_slice).astype(np.int32))


@dataclass(frozen=True)
class Checked:
    records: pa.Table
    undecided: bool
    """Some record's timestamp only Spark reads: ``records`` must not be used."""


RAW_COLUMNS = ("key", "value", "partition", "offset")
"""What the pass reads of a Kafka record (:func:`checked_records`). Not the topic, which is
the query's one topic, nor Kafka's timestamps, which no view reads: every column the pass
takes the JVM converts to Arrow for every record."""


def checked_records(
    raw: pa.Table, fields: tuple[tuple[str, str], ...], join_key: str, timestamp_field: str,
    keyed: KeyedTopic, late_before_ns: int | None, future_after_ns: int, topic: str,
    dead_letter_bytes_only: bool = True,
) -> Checked:  # fmt: skip
    """Raw Kafka records (:data:`RAW_COLUMNS`) of one partition of ``topic`` -> the records
    the views' pass takes (see the module); ``dead_letter_bytes_only=False``: every record
    keeps its raw bytes and topic (for a caller that takes the dead letters out at once)."""
    parser = JsonRecordParser(fields, join_key, timestamp_field)
    parsed = BatchJsonParser(parser)(raw.column("value").combine_chunks())
    stamps = read_stamps_as_spark(parsed.column(STAMP))
    checked = first_failing(parsed, fields, join_key, timestamp_field, stamps)
    if checked.undecided.any():
        return Checked(raw, undecided=True)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        join_key: parsed.column(join_key).combine_chunks().cast(pa.int64())
    }
    for name, _ in fields:
        if name not in (join_key, timestamp_field):
            columns[name] = parsed.column(name)
    # as Spark's parse: an event time wherever the stamp reads as one, null elsewhere
    columns[EVENT_NS] = pa.array(stamps.ns, pa.int64(), mask=stamps.reason != "")
    for name in ("partition", *DEAD_LETTER_ONLY):
        columns[name] = (
            pa.repeat(pa.scalar(topic, pa.string()), raw.num_rows) if name == "topic"
            else raw.column(name)
        )  # fmt: skip
    columns[ERROR_FIELD] = checked.field
    columns[ERROR_REASON] = checked.reason
    records = pa.table(columns)
    records = finish(
        records, join_key, timestamp_field, keyed, late_before_ns, future_after_ns,
        dead_letter_bytes_only,
    )  # fmt: skip
    return Checked(records, undecided=False)


def finish(
    records: pa.Table, join_key: str, timestamp_field: str, keyed: KeyedTopic,
    late_before_ns: int | None, future_after_ns: int, dead_letter_bytes_only: bool = True,
) -> pa.Table:  # fmt: skip
    """Parsed and checked records (the parser's reasons set, raw bytes present) -> the
    pass's input: the keying checks (:func:`mark_keying`), the event-time rules, then
    the dead letters' bytes only (unless not ``dead_letter_bytes_only``). Both the Arrow
    path and the Spark path end here."""
    records = mark_event_time_collected(
        mark_keying(records, join_key, keyed), timestamp_field, late_before_ns, future_after_ns
    )
    return without_unneeded_bytes_collected(records) if dead_letter_bytes_only else records


def mark_keying(records: pa.Table, join_key: str, keyed: KeyedTopic) -> pa.Table:
    """``records`` with each usable record that is not keyed as the topic declares marked
    as a dead letter naming its key: a key other than the entity's decimal text, then a
    partition other than the partitioner's for that key."""
    field, reason = records.column(ERROR_FIELD), records.column(ERROR_REASON)
    usable = pc.is_null(reason)
    if not pc.any(usable).as_py():
        return records
    key = records.column("key").combine_chunks().cast(pa.binary())
    entity = records.column(join_key).combine_chunks().cast(pa.int64())
    # Each distinct entity's text, formatted and hashed once: a batch repeats its
    # entities many times. The partition check needs only the usable records whose key
    # is that text, so the text's partition stands for the key's.
    distinct = pc.unique(entity).drop_null()
    distinct_text = pc.cast(pc.cast(distinct, pa.string()), pa.binary())
    at = pc.index_in(entity, distinct)  # null where the entity is
    not_entity = pc.fill_null(pc.not_equal(key, distinct_text.take(at)), True)
    expected = kafka_keys.partitions_of(distinct_text, keyed.partitions, keyed.partitioner)[
        pc.fill_null(at, 0).to_numpy()
    ] if len(distinct) else np.zeros(len(entity), np.int32)  # fmt: skip
    actual = records.column("partition").to_numpy()
    moved = pa.array(expected != actual)
    for broken, why in ((not_entity, KEY_NOT_ENTITY), (moved, WRONG_PARTITION)):
        first = pc.and_(usable, broken)
        if pc.any(first).as_py():
            field = pc.if_else(first, pa.scalar("key"), field)
            reason = pc.if_else(first, pa.scalar(why), reason)
            usable = pc.and_(usable, pc.invert(first))
    names = records.column_names
    records = records.set_column(names.index(ERROR_FIELD), ERROR_FIELD, field)
    return records.set_column(names.index(ERROR_REASON), ERROR_REASON, reason)


UNDECIDED = "undecided"
"""Kind of the output row of a Kafka partition whose batch the executors left to the driver
(a timestamp only Spark reads): its ``partition`` column names it."""


class KeyedTopicError(RuntimeError):
    """A keyed topic's micro-batch the pass per Kafka partition cannot run as it stands."""


CHECK_CHUNK_RECORDS = 100_000
"""Raw records a keyed task checks at a time (:meth:`KeyedTopicPass.checked_in_chunks`):
a few of Spark's Arrow batches (10,000 rows each by default), large enough that the
vectorised parse's per-call cost stays small."""


def _chunks(batches: Iterator[pa.RecordBatch], records: int) -> Iterator[pa.Table]:
    """``batches`` (empty ones skipped) gathered into tables of at least ``records`` rows,
    the last one smaller."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        held += batch.num_rows
        if held >= records:
            yield pa.Table.from_batches(pending)
            pending, held = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


def kafka_partition_of(raw: pa.Table, expected: int | None = None) -> int:
    """The one Kafka partition of a task's raw records (each Kafka partition's offset
    range must be one task: no ``minPartitions``, no split ranges); ``expected``: the
    partition of the task's records so far."""
    partition = raw.column("partition")
    first = int(partition[0].as_py()) if expected is None else expected
    if not pc.all(pc.equal(partition, first)).as_py():
        msg = (
            "a task of the pass per Kafka partition holds records of several Kafka "
            "partitions: remove the Kafka source's minPartitions / maxRecordsPerPartition"
        )
        raise KeyedTopicError(msg)
    return first


SortedOut = tuple[list[pa.RecordBatch], dict[int, list[pa.Table]]]
"""A keyed task's checked records sorted out: its count and dead-letter rows, and per state
slice the views' columns of its usable records (a table per chunk)."""


@dataclass(frozen=True)
class KeyedTopicPass:
    """``mapInArrow`` function of a keyed topic's micro-batch ``batch_id`` over the raw
    Kafka records: each task is one Kafka partition, checked in Arrow
    (:func:`checked_records`) and run through the views as the shuffled pass runs a shuffle
    partition, each of the Kafka partition's slices (:class:`KeyedTopic`) standing for a
    shuffle partition, one after the other (:func:`~featureflow.spark.topic_pass.
    slices_in_turn`). Output rows: :data:`~featureflow.spark.topic_pass.
    OUTPUT_SCHEMA`."""

    tasks: tuple[ViewTask, ...]
    repo_path: str
    batch_id: int
    fields: tuple[tuple[str, str], ...]
    join_key: str
    timestamp_field: str
    keyed: KeyedTopic
    late_before_ns: int | None
    future_after_ns: int
    topic: str
    """The query's one topic, which its raw records (:data:`RAW_COLUMNS`) do not carry."""

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        allocators.use_returning_allocators()
        partition, sorted_out = self.checked_in_chunks(batches)
        if partition is not None and sorted_out is None:
            # the driver takes the Spark path for this partition
            yield output_rows(UNDECIDED, 1, partition=[partition])
        elif sorted_out is not None:
            out, by_slice = sorted_out
            yield from out
            out.clear()
            topic = TopicPass(self.tasks, self.repo_path, self.batch_id)
            yield from slices_in_turn(topic, by_slice)
        worker_gc.settle()

    def checked_in_chunks(
        self, batches: Iterator[pa.RecordBatch], chunk_records: int = CHECK_CHUNK_RECORDS
    ) -> tuple[int | None, SortedOut | None]:
        """The task's Kafka partition (None: no records) and its records checked
        (:func:`checked_records`) and sorted out (:func:`~featureflow.spark.topic_pass.
        counted_and_split`): count rows, dead letters, and per state slice the views'
        columns of its usable records (None: some timestamp only Spark reads).

        Checked ``chunk_records`` at a time as Spark hands them over: every check is per
        record, the driver sums count rows, and a chunk's raw bytes are dropped once its
        dead letters are taken out, so the task holds its usable records' view columns
        and one chunk's raw records, not its whole partition's. Past an undecided chunk
        the rest is only read through."""
        partition: int | None = None
        out: list[pa.RecordBatch] = []
        slices: dict[int, list[pa.Table]] | None = {}
        columns = view_columns(task.spec for task in self.tasks)
        for raw in _chunks(batches, chunk_records):
            partition = kafka_partition_of(raw, partition)
            if slices is None:
                continue
            checked = self.check(raw, dead_letter_bytes_only=False)
            del raw
            if checked.undecided:
                out.clear()
                slices = None
                continue
            records = checked.records
            del checked
            chunk_out, by_slice = counted_and_split(
                records, self.keyed.state_partitions(partition, records.column(self.join_key)),
                columns,
            )  # fmt: skip
            del records
            out.extend(chunk_out)
            for state_partition, usable in by_slice.items():
                slices.setdefault(state_partition, []).append(usable)
        if partition is None or slices is None:
            return partition, None
        return partition, (out, slices)

    def check(self, raw: pa.Table, dead_letter_bytes_only: bool = True) -> Checked:
        return checked_records(
            raw, self.fields, self.join_key, self.timestamp_field, self.keyed,
            self.late_before_ns, self.future_after_ns, self.topic, dead_letter_bytes_only,
        )  # fmt: skip

    def finish(self, parsed: pa.Table) -> pa.Table:
        """Records the Spark path parsed and checked (``parse_events``' columns) -> the
        pass's input (:func:`finish`)."""
        return finish(
            parsed, self.join_key, self.timestamp_field, self.keyed, self.late_before_ns,
            self.future_after_ns,
        )  # fmt: skip

    def on_driver(
        self, checked_by_spark: Callable[[list[int]], pa.Table], raw: pa.Table | None = None,
        partitions: list[int] | None = None,
    ) -> pa.Table:  # fmt: skip
        """The views on the driver (:func:`~featureflow.spark.topic_pass.run_on_driver`,
        each record's state partition as its partition) over each Kafka partition of the
        collected ``raw`` records checked in Arrow, and of ``partitions`` (and any of
        ``raw``'s whose timestamps only Spark reads) checked by ``checked_by_spark``."""
        inputs: list[pa.Table] = []
        by_spark = list(partitions or [])
        if raw is not None and raw.num_rows:
            for partition in sorted(set(raw.column("partition").to_pylist())):
                checked = self.check(raw.filter(pc.equal(raw.column("partition"), partition)))
                if checked.undecided:
                    by_spark.append(partition)
                else:
                    inputs.append(checked.records)
        if by_spark:
            inputs.append(checked_by_spark(sorted(by_spark)))
        # the paths carry the view columns alike; the Arrow path may carry more fields
        names = [n for n in inputs[0].column_names if all(n in t.column_names for t in inputs)]
        records = pa.concat_tables([table.select(names) for table in inputs])
        records = records.append_column(
            PARTITION_COLUMN,
            self.keyed.state_partitions(records.column("partition"), records.column(self.join_key)),
        )
        return run_on_driver(self.tasks, self.repo_path, self.batch_id, records)
