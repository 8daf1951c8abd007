"""The records of one Kafka partition checked in Arrow (keyed_pass.checked_records)
against the job's Spark path on the same raw records (parse_events, the event-time rules,
the dead letters' bytes): the same rows, column for column, on a topic keyed by its
entity; records keyed otherwise become dead letters naming the key."""

from __future__ import annotations

from types import SimpleNamespace

import json_messages
import numpy as np
import pyarrow as pa
import pytest
from duckdb_oracle import EXAMPLE_SPEC
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from featureflow.columns import EVENT_NS
from featureflow.errors import RepoError
from featureflow.events import ddl, kafka_keys
from featureflow.spark.event_time import mark_event_time, without_unneeded_bytes
from featureflow.spark.keyed_pass import (
    KEY_NOT_ENTITY,
    RAW_COLUMNS,
    WRONG_PARTITION,
    KeyedTopic,
    KeyedTopicError,
    KeyedTopicPass,
    checked_records,
    entity_slices,
    kafka_partition_of,
)
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON, PASSED_THROUGH, parse_events
from featureflow.spark.state import keyed_scheme_parts
from featureflow.spark.topic_pass import COUNT, DEAD, counted_and_split

pytestmark = pytest.mark.integration

SPEC = EXAMPLE_SPEC
FIELDS = ddl.canonical_fields(SPEC.json_schema)
KEYED = KeyedTopic(partitions=4)
BASE_NS = 1_795_996_800_000_000_000


TOPIC = "t"


def _raw(values: list[bytes], keys: list[bytes | None], partitions: list[int]) -> pa.Table:
    """Raw records of ``TOPIC`` as Spark's Kafka source gives them (the pass reads
    :data:`RAW_COLUMNS` of them)."""
    return pa.table({
        "key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
        "topic": [TOPIC] * len(values), "partition": pa.array(partitions, pa.int32()),
        "offset": pa.array(range(len(values)), pa.int64()),
    })  # fmt: skip


def _keyed(values: list[bytes]) -> pa.Table:
    """Each record keyed by its entity's text (when it has one) in that key's partition."""
    import orjson

    keys = []
    for value in values:
        try:
            entity = orjson.loads(value).get(SPEC.join_key)
        except (orjson.JSONDecodeError, AttributeError):
            entity = None
        keys.append(str(entity).encode() if isinstance(entity, int) else b"x")
    parts = kafka_keys.partitions_of(
        pa.array(keys, pa.binary()), KEYED.partitions, KEYED.partitioner
    )
    return _raw(values, keys, parts.tolist())


def _spark(spark, raw: pa.Table, late: int | None, future: int) -> list[dict]:  # type: ignore[no-untyped-def]
    frame = spark.createDataFrame(raw.select(list(PASSED_THROUGH)))
    parsed = parse_events(frame, SPEC)
    columns = [
        SPEC.join_key,
        EVENT_NS,
        *SPEC.value_columns,
        *PASSED_THROUGH,
        ERROR_FIELD,
        ERROR_REASON,
    ]
    marked = without_unneeded_bytes(
        mark_event_time(parsed.select(*columns), SPEC.timestamp_field, late, future)
    )
    return sorted((row.asDict() for row in marked.collect()), key=lambda row: row["offset"] or -1)


def _arrow(raw: pa.Table, late: int | None, future: int) -> list[dict] | None:
    out = checked_records(raw.select(list(RAW_COLUMNS)), FIELDS, SPEC.join_key,
                          SPEC.timestamp_field, KEYED, late, future, TOPIC)  # fmt: skip
    if out.undecided:
        return None
    columns = [
        SPEC.join_key,
        EVENT_NS,
        *SPEC.value_columns,
        *PASSED_THROUGH,
        ERROR_FIELD,
        ERROR_REASON,
    ]
    return sorted(out.records.select(columns).to_pylist(), key=lambda row: row["offset"] or -1)


def _same(got: list[dict], expected: list[dict]) -> None:
    assert len(got) == len(expected)
    for row, oracle in zip(got, expected, strict=True):
        if oracle[ERROR_REASON] is not None:  # a dead letter: why, and its bytes
            keep = (ERROR_FIELD, ERROR_REASON, "key", "value", "topic", "partition", "offset")
        else:
            keep = tuple(oracle)
        assert {k: row[k] for k in keep} == {k: oracle[k] for k in keep}, (row, oracle)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=json_messages.batches,
    late=st.one_of(st.none(), st.integers(BASE_NS - 10**12, BASE_NS + 10**12)),
)
def test_a_keyed_partition_checks_as_the_spark_path(spark, values, late) -> None:  # type: ignore[no-untyped-def]
    raw = _keyed(values)
    future = BASE_NS + 10**13
    got = _arrow(raw, late, future)
    if got is None:  # a stamp only Spark reads: the batch takes the Spark path
        return
    _same(got, _spark(spark, raw, late, future))


@settings(max_examples=30, deadline=None)
@given(
    values=json_messages.batches,
    late=st.one_of(st.none(), st.integers(BASE_NS - 10**12, BASE_NS + 10**12)),
    batch_rows=st.integers(1, 9),
    chunk_records=st.integers(1, 25),
)
def test_a_task_checking_its_records_in_chunks_sorts_them_out_as_a_whole(
    values: list[bytes], late: int | None, batch_rows: int, chunk_records: int
) -> None:
    """A keyed task checks its raw records a chunk at a time as Spark hands its Arrow
    batches over and takes each chunk's dead letters out at once: the same counts, dead
    letters and usable records per state slice as one check of them all sorted out, and
    undecided (the Spark path) exactly when the whole would be."""
    raw = _keyed(values)
    raw = raw.set_column(3, "partition", pa.array([2] * raw.num_rows, pa.int32()))
    raw = raw.select(list(RAW_COLUMNS))
    future = BASE_NS + 10**13
    sliced = KeyedTopic(KEYED.partitions, KEYED.partitioner, 3)
    whole = checked_records(raw, FIELDS, SPEC.join_key, SPEC.timestamp_field, sliced, late,
                            future, TOPIC)  # fmt: skip
    views = (SimpleNamespace(spec=SPEC),)  # the columns the views read
    task = KeyedTopicPass(views, "unused", 0, FIELDS, SPEC.join_key,  # type: ignore[arg-type]
                          SPEC.timestamp_field, sliced, late, future, TOPIC)  # fmt: skip
    batches = raw.to_batches(max_chunksize=batch_rows)
    partition, got = task.checked_in_chunks(iter(batches), chunk_records)
    assert partition == 2
    if whole.undecided:
        assert got is None
        return
    assert got is not None
    columns = [SPEC.join_key, EVENT_NS, *SPEC.value_columns]
    want = counted_and_split(
        whole.records, sliced.state_partitions(2, whole.records.column(SPEC.join_key)), columns
    )
    for _, by_slice in (got, want):
        assert all(6 <= p < 9 for p in by_slice)
    assert _counts(got[0]) == _counts(want[0])
    assert _dead(got[0]) == _dead(want[0])
    assert sorted(got[1]) == sorted(want[1])
    for state_partition, tables in got[1].items():
        usable = pa.concat_tables(tables)
        assert usable.column_names == columns
        assert usable.to_pylist() == want[1][state_partition].to_pylist()


def _counts(out: list[pa.RecordBatch]) -> dict[tuple[int, str | None], tuple[int, int | None]]:
    """Records and the largest event time per (Kafka partition, reason), summed over rows."""
    counted: dict[tuple[int, str | None], tuple[int, int | None]] = {}
    for row in pa.Table.from_batches(out).to_pylist():
        if row["kind"] == COUNT:
            rows, max_ns = counted.get((row["partition"], row["reason"]), (0, None))
            both = [ns for ns in (max_ns, row["max_ns"]) if ns is not None]
            counted[(row["partition"], row["reason"])] = (
                rows + row["rows"], max(both) if both else None
            )
    return counted


def _dead(out: list[pa.RecordBatch]) -> list[tuple[object, ...]]:
    return sorted(
        (row["offset"], row["key"], row["value"], row["topic"], row["field"], row["reason"])
        for row in pa.Table.from_batches(out).to_pylist()
        if row["kind"] == DEAD
    )


def test_records_keyed_otherwise_are_dead_letters_naming_the_key() -> None:
    value = b'{"user_id":7,"amount":1.5,"event_timestamp":1795996800250}'
    home = int(kafka_keys.partitions_of(pa.array([b"7"]), KEYED.partitions, KEYED.partitioner)[0])
    raw = _raw([value] * 3, [b"7", b"07", b"7"], [home, home, (home + 1) % KEYED.partitions])
    out = checked_records(raw.select(list(RAW_COLUMNS)), FIELDS, SPEC.join_key,
                          SPEC.timestamp_field, KEYED, None, 2**62, TOPIC)  # fmt: skip
    rows = out.records.to_pylist()
    assert [(r[ERROR_FIELD], r[ERROR_REASON]) for r in rows] == [
        (None, None), ("key", KEY_NOT_ENTITY), ("key", WRONG_PARTITION),
    ]  # fmt: skip
    assert [r["value"] for r in rows] == [None, value, value]


def test_a_task_holding_several_kafka_partitions_is_refused() -> None:
    """One task per Kafka partition's offset range, or two tasks would build one state."""
    value = b'{"user_id":7,"amount":1.5,"event_timestamp":1795996800250}'
    assert kafka_partition_of(_raw([value] * 2, [b"7"] * 2, [3, 3])) == 3
    with pytest.raises(KeyedTopicError, match="minPartitions"):
        kafka_partition_of(_raw([value] * 2, [b"7"] * 2, [3, 1]))
    # checked a chunk at a time: a later chunk of another partition is refused too
    sliced = KeyedTopic(KEYED.partitions, KEYED.partitioner, 2)
    task = KeyedTopicPass((), "unused", 0, FIELDS, SPEC.join_key, SPEC.timestamp_field, sliced,
                          None, 2**62, TOPIC)  # fmt: skip
    batches = _raw([value] * 2, [b"7"] * 2, [3, 1]).to_batches(max_chunksize=1)
    with pytest.raises(KeyedTopicError, match="minPartitions"):
        task.checked_in_chunks(iter(batches), chunk_records=1)


def test_the_job_option_needs_the_partition_count() -> None:
    from featureflow.spark.job import _keyed_topic, build_parser

    args = build_parser().parse_args(["--repo", "r", "--checkpoint", "c", "--keyed-topic", "crc32"])
    with pytest.raises(RepoError, match="--keyed-topic needs --partitions"):
        _keyed_topic(args.keyed_topic, args.partitions)
    assert _keyed_topic("crc32", 8) == KeyedTopic(8, kafka_keys.CRC32)
    assert _keyed_topic("crc32", 8, 3) == KeyedTopic(8, kafka_keys.CRC32, 3)
    assert _keyed_topic(None, 8) is None
    with pytest.raises(RepoError, match="--keyed-slices needs --keyed-topic"):
        _keyed_topic(None, 8, 2)
    with pytest.raises(RepoError, match="at least 1"):
        _keyed_topic("crc32", 8, 0)


@settings(max_examples=50, deadline=None)
@given(
    entities=st.lists(st.integers(-(2**63), 2**63 - 1) | st.none(), min_size=1, max_size=200),
    kafka_partition=st.integers(0, 63),
    slices=st.integers(1, 16),
)
def test_an_entitys_state_partition_is_its_kafka_partitions_slice_of_it(
    entities: list[int | None], kafka_partition: int, slices: int
) -> None:
    """A keyed task's record goes to one of its Kafka partition's ``slices`` state
    partitions, by its entity alone: the same entity lands in the same one whatever else
    the batch holds or how it is cut (a record at a time, the driver's records of several
    Kafka partitions), so replays and both passes build the same states."""
    keyed = KeyedTopic(64, kafka_keys.CRC32, slices)
    ids = pa.array(entities, pa.int64())
    got = keyed.state_partitions(kafka_partition, ids).to_pylist()
    assert all(kafka_partition * slices <= p < (kafka_partition + 1) * slices for p in got)
    one_at_a_time = [keyed.state_partitions(kafka_partition, ids.slice(i, 1))[0].as_py()
                     for i in range(len(ids))]  # fmt: skip
    assert got == one_at_a_time
    per_record = pa.array([kafka_partition] * len(ids), pa.int32())
    assert keyed.state_partitions(per_record, pa.chunked_array([ids])).to_pylist() == got
    by_entity: dict[int | None, int] = {}
    for entity, partition in zip(entities, got, strict=True):
        assert by_entity.setdefault(entity, partition) == partition


def test_slices_spread_the_entities_evenly() -> None:
    """Sequential ids (the usual entity ids) and random ones both fill every slice within a
    few percent of an even share, so no slice holds much more than its share of a task."""
    rng = np.random.default_rng(3)
    for ids in (np.arange(100_000), rng.integers(-(2**63), 2**63 - 1, 100_000)):
        for slices in (2, 3, 4, 7):
            counts = np.bincount(entity_slices(pa.array(ids, pa.int64()), slices).astype(np.int64))
            assert len(counts) == slices
            assert counts.max() < 1.05 * len(ids) / slices, (slices, counts)


def test_the_slices_are_recorded_with_the_state_and_kept_by_a_later_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from featureflow.spark.pipeline import TASKS_PER_CORE, keyed_slices
    from featureflow.spark.state import StateStore

    assert keyed_scheme_parts(KeyedTopic(4, kafka_keys.CRC32, 1).scheme) == ("crc32", 1)
    assert KeyedTopic(4, kafka_keys.CRC32, 1).scheme == "kafka-crc32"  # state of old runs
    assert keyed_scheme_parts(KeyedTopic(4, kafka_keys.MURMUR2, 3).scheme) == ("murmur2", 3)
    assert keyed_scheme_parts("entity-hash") is None
    roots = [str(tmp_path / "a"), str(tmp_path / "b")]
    # new state: enough slices for TASKS_PER_CORE state partitions per core in all
    assert TASKS_PER_CORE == 4
    assert keyed_slices(roots, KeyedTopic(2, kafka_keys.CRC32), cores=2) == 4
    assert keyed_slices(roots, KeyedTopic(3, kafka_keys.CRC32), cores=2) == 3
    assert keyed_slices(roots, KeyedTopic(3, kafka_keys.CRC32), cores=8) == 11
    assert keyed_slices(roots, KeyedTopic(16, kafka_keys.CRC32), cores=2) == 1
    assert keyed_slices(roots, KeyedTopic(2, kafka_keys.CRC32, 5), cores=2) == 5
    # written state keeps its slices, whatever the cores now
    written = KeyedTopic(2, kafka_keys.CRC32, 3)
    StateStore(roots[1], written.state_partition_count).check_partitioning(written.scheme)
    assert keyed_slices(roots, KeyedTopic(2, kafka_keys.CRC32), cores=8) == 3
