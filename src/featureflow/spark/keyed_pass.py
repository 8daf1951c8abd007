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

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from featureflow.columns import EVENT_NS
from featureflow.events import kafka_keys
from featureflow.events.checks import first_failing, read_stamps_as_spark
from featureflow.events.json_batch import BatchJsonParser
from featureflow.events.json_records import STAMP, JsonRecordParser
from featureflow.spark.event_time import (
    DEAD_LETTER_ONLY,
    mark_event_time_collected,
    without_unneeded_bytes_collected,
)
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON

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
