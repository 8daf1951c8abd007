"""WIP: the records of one Kafka partition of a topic keyed by its entity, checked in Arrow.

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
reads leaves the whole partition's batch undecided: the caller must take the Spark path
for it (not built yet).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from featureflow.columns import EVENT_NS
from featureflow.events import kafka_keys
from featureflow.events.checks import first_failing, read_stamps_as_spark
from featureflow.events.json_batch import BatchJsonParser
from featureflow.events.json_records import STAMP, JsonRecordParser
from featureflow.spark import allocators, state_host, worker_gc
from featureflow.spark.event_time import (
    DEAD_LETTER_ONLY,
    mark_event_time_collected,
    without_unneeded_bytes_collected,
)
from featureflow.spark.online_sink import ViewTask
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON
from featureflow.spark.topic_pass import (
    PARTITION_COLUMN,
    TopicPass,
    partition_outputs,
    run_on_driver,
)

KEY_NOT_ENTITY = "the Kafka key is not the entity's decimal text (the topic is keyed by it)"
WRONG_PARTITION = "not in its key's partition under the topic's declared partitioner"


@dataclass(frozen=True)
class KeyedTopic:
    """How a topic is keyed: its partition count and its producers' partitioner."""

    partitions: int
    partitioner: str = kafka_keys.MURMUR2


@dataclass(frozen=True)
class Checked:
    records: pa.Table
    undecided: bool
    """Some record's timestamp only Spark reads: ``records`` must not be used."""


def checked_records(
    raw: pa.Table, fields: tuple[tuple[str, str], ...], join_key: str, timestamp_field: str,
    keyed: KeyedTopic, late_before_ns: int | None, future_after_ns: int,
) -> Checked:  # fmt: skip
    """Raw Kafka records (``key``, ``value``, ``topic``, ``partition``, ``offset``) of
    one partition -> the records the views' pass takes (see the module)."""
    parser = JsonRecordParser(fields, join_key, timestamp_field)
    parsed = BatchJsonParser(parser)(raw.column("value").combine_chunks())
    stamps = read_stamps_as_spark(parsed.column(STAMP))
    checked = first_failing(parsed, fields, join_key, timestamp_field, stamps)
    if checked.undecided.any():
        return Checked(raw, undecided=True)
    field, reason = checked.field, checked.reason
    usable = reason.is_null()
    entity = parsed.column(join_key).combine_chunks().cast(pa.int64())
    if pc.any(usable).as_py():
        key = raw.column("key").combine_chunks().cast(pa.binary())
        text = pc.cast(pc.cast(entity, pa.string()), pa.binary())
        not_entity = pc.fill_null(pc.not_equal(key, text), True)
        expected = kafka_keys.partitions_of(key, keyed.partitions, keyed.partitioner)
        moved = pa.array(expected != raw.column("partition").to_numpy(zero_copy_only=False))
        for broken, why in ((not_entity, KEY_NOT_ENTITY), (moved, WRONG_PARTITION)):
            first = pc.and_(pc.fill_null(usable, False), broken)
            if pc.any(first).as_py():
                field = pc.if_else(first, pa.scalar("key"), field)
                reason = pc.if_else(first, pa.scalar(why), reason)
                usable = pc.and_(usable, pc.invert(first))
    columns: dict[str, pa.Array | pa.ChunkedArray] = {join_key: entity}
    for name, _ in fields:
        if name not in (join_key, timestamp_field):
            columns[name] = parsed.column(name)
    # as Spark's parse: an event time wherever the stamp reads as one, null elsewhere
    columns[EVENT_NS] = pa.array(stamps.ns, pa.int64(), mask=stamps.reason != "")
    for name in ("partition", *DEAD_LETTER_ONLY):
        columns[name] = raw.column(name)
    columns[ERROR_FIELD] = field
    columns[ERROR_REASON] = reason
    records = mark_event_time_collected(
        pa.table(columns), timestamp_field, late_before_ns, future_after_ns
    )
    return Checked(without_unneeded_bytes_collected(records), undecided=False)


class KeyedTopicError(RuntimeError):
    """A keyed topic's micro-batch the pass per Kafka partition cannot run as it stands."""


def kafka_partition_of(raw: pa.Table) -> int:
    """The one Kafka partition of a task's raw records (each Kafka partition's offset
    range must be one task: no ``minPartitions``, no split ranges)."""
    partition = raw.column("partition")
    first = int(partition[0].as_py())
    if not pc.all(pc.equal(partition, first)).as_py():
        msg = (
            "a task of the pass per Kafka partition holds records of several Kafka "
            "partitions: remove the Kafka source's minPartitions / maxRecordsPerPartition"
        )
        raise KeyedTopicError(msg)
    return first


@dataclass(frozen=True)
class KeyedTopicPass:
    """``mapInArrow`` function of a keyed topic's micro-batch ``batch_id`` over the raw
    Kafka records: each task is one Kafka partition, checked in Arrow
    (:func:`checked_records`) and run through the views as the shuffled pass runs a shuffle
    partition (:func:`~featureflow.spark.topic_pass.partition_outputs`), the Kafka partition
    standing for the shuffle partition. Output rows: :data:`~featureflow.spark.topic_pass.
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

    def check(self, raw: pa.Table) -> pa.Table:
        checked = checked_records(
            raw, self.fields, self.join_key, self.timestamp_field, self.keyed,
            self.late_before_ns, self.future_after_ns,
        )  # fmt: skip
        if checked.undecided:
            msg = (
                f"micro-batch {self.batch_id}: a timestamp only Spark reads (neither epoch "
                "milliseconds nor zoned RFC 3339) in a topic run as keyed by its entity; "
                "run it without --keyed-topic"
            )
            raise KeyedTopicError(msg)
        return checked.records

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        allocators.use_returning_allocators()
        received = [batch for batch in batches if batch.num_rows]
        if received:
            raw = pa.Table.from_batches(received)
            received.clear()
            partition = kafka_partition_of(raw)
            records = self.check(raw)
            del raw
            topic = TopicPass(self.tasks, self.repo_path, self.batch_id)
            yield from state_host.run(partition_outputs, topic, partition, [records])
        worker_gc.settle()

    def on_driver(self, raw: pa.Table) -> pa.Table:
        """The pass of a small micro-batch on the driver: the collected raw records, each
        Kafka partition checked apart, through :func:`~featureflow.spark.topic_pass.
        run_on_driver` with the Kafka partition as each record's partition."""
        checked = [
            self.check(raw.filter(pc.equal(raw.column("partition"), partition)))
            for partition in sorted(set(raw.column("partition").to_pylist()))
        ]
        records = pa.concat_tables(checked)
        records = records.append_column(
            PARTITION_COLUMN, records.column("partition").cast(pa.int32())
        )
        return run_on_driver(self.tasks, self.repo_path, self.batch_id, records)
