"""The event-time rules give the same records in Spark (a shuffled batch) and on collected
Arrow records (the driver's pass): reasons, fields, and which records keep their bytes."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from featureflow.columns import EVENT_NS
from featureflow.spark.event_time import (
    FUTURE_REASON,
    LATE_REASON,
    mark_event_time,
    mark_event_time_collected,
    without_unneeded_bytes,
    without_unneeded_bytes_collected,
)
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON

pytestmark = pytest.mark.integration

SCHEMA = pa.schema(
    [
        ("user_id", pa.int64()), (EVENT_NS, pa.int64()), ("key", pa.binary()),
        ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
        ("offset", pa.int64()), (ERROR_FIELD, pa.string()), (ERROR_REASON, pa.string()),
    ]
)  # fmt: skip
TIMESTAMP_FIELD = "event_timestamp"
BASE_NS = 1_800_000_000_000_000_000

_times = st.integers(BASE_NS - 5, BASE_NS + 5)


@st.composite
def _records(draw: st.DrawFn) -> list[dict[str, Any]]:
    rows = []
    for i in range(draw(st.integers(0, 12))):
        broken = draw(st.sampled_from([None, ("value", "not a JSON object"),
                                       ("amount", "not a finite number")]))  # fmt: skip
        rows.append({
            "user_id": i,
            # a record that failed parsing may have no event time at all
            EVENT_NS: draw(st.one_of(st.none(), _times)) if broken else draw(_times),
            "key": draw(st.one_of(st.none(), st.binary(max_size=3))),
            "value": draw(st.binary(max_size=5)),
            "topic": "events", "partition": draw(st.integers(0, 3)), "offset": i,
            ERROR_FIELD: broken[0] if broken else None,
            ERROR_REASON: broken[1] if broken else None,
        })  # fmt: skip
    return rows


def _in_spark(
    spark: Any, table: pa.Table, late: int | None, future: int, *, staged: bool = False
) -> pa.Table:
    """The rules in Spark; ``staged``: behind an exchange, as the job's batch is (Spark
    would otherwise evaluate the projection of local rows on the driver, without code)."""
    frame = spark.createDataFrame(table)  # from Arrow: int64 stays exact (pandas: float64)
    if staged:
        frame = frame.repartition(1)
    out = without_unneeded_bytes(mark_event_time(frame, TIMESTAMP_FIELD, late, future)).toArrow()
    return out.select(SCHEMA.names).cast(SCHEMA).sort_by("user_id")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=_records(),
    late=st.one_of(st.none(), _times),
    future=_times,
)
@example(
    rows=[{"user_id": 0, EVENT_NS: BASE_NS, "key": b"k", "value": b"v", "topic": "events",
           "partition": 0, "offset": 0, ERROR_FIELD: None, ERROR_REASON: None}],
    late=BASE_NS + 1, future=BASE_NS - 1,
)  # fmt: skip
def test_collected_records_are_marked_as_spark_marks_them(
    spark: Any, rows: list[dict[str, Any]], late: int | None, future: int
) -> None:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    collected = without_unneeded_bytes_collected(
        mark_event_time_collected(table, TIMESTAMP_FIELD, late, future)
    )
    assert collected.schema == SCHEMA  # same columns, same order
    assert (
        collected.sort_by("user_id").to_pylist()
        == _in_spark(spark, table, late, future).to_pylist()
    )


def test_the_rules_in_order() -> None:
    """Future first, then late; errors already found stay; only dead letters keep their
    bytes, topic and offset (every record its partition)."""
    rows = [
        {"user_id": 0, EVENT_NS: 100, ERROR_FIELD: None, ERROR_REASON: None},  # late and future
        {"user_id": 1, EVENT_NS: 50, ERROR_FIELD: None, ERROR_REASON: None},  # on time
        {"user_id": 2, EVENT_NS: 10, ERROR_FIELD: None, ERROR_REASON: None},  # late
        {"user_id": 3, EVENT_NS: 99, ERROR_FIELD: "value", ERROR_REASON: "not a JSON object"},
        {"user_id": 4, EVENT_NS: 20, ERROR_FIELD: None, ERROR_REASON: None},  # at the watermark
        {"user_id": 5, EVENT_NS: 90, ERROR_FIELD: None, ERROR_REASON: None},  # at the skew
    ]
    table = pa.Table.from_pylist(
        [{**row, "key": b"k", "value": b"v", "topic": "t", "partition": 1, "offset": 7}
         for row in rows],
        schema=SCHEMA,
    )
    marked = without_unneeded_bytes_collected(mark_event_time_collected(table, "ts", 20, 90))
    assert marked.column(ERROR_REASON).to_pylist() == [
        FUTURE_REASON, None, LATE_REASON, "not a JSON object", None, None,
    ]  # fmt: skip
    assert marked.column(ERROR_FIELD).to_pylist() == ["ts", None, "ts", "value", None, None]
    assert marked.column("value").to_pylist() == [b"v", None, b"v", b"v", None, None]
    assert marked.column("key").to_pylist() == [b"k", None, b"k", b"k", None, None]
    assert marked.column("topic").to_pylist() == ["t", None, "t", "t", None, None]
    assert marked.column("offset").to_pylist() == [7, None, 7, 7, None, None]
    assert marked.column("partition").to_pylist() == [1] * 6
    unwatermarked = mark_event_time_collected(table, "ts", None, 90)
    assert unwatermarked.column(ERROR_REASON).to_pylist()[:3] == [FUTURE_REASON, None, None]


def _compilations(spark: Any) -> int:
    """Classes Spark's code generator has compiled in this JVM so far (Janino compiles)."""
    codegen = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(codegen.METRIC_COMPILATION_TIME().getCount())


def test_new_thresholds_reuse_the_generated_code(spark: Any) -> None:
    """A batch's thresholds change every batch; Spark must not generate and compile its
    stage again for each (long literals are inlined into generated code: new classes,
    compiled by Janino and then by the JIT, every batch). Only the first batch with a
    watermark (a second rule) may compile."""
    rows = [{"user_id": i, EVENT_NS: BASE_NS + i, "key": b"k", "value": b"v",
             ERROR_FIELD: None, ERROR_REASON: None} for i in range(4)]  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    marked = [
        _in_spark(spark, table, None, BASE_NS + 9, staged=True),
        _in_spark(spark, table, BASE_NS, BASE_NS + 9, staged=True),
    ]
    compiled = _compilations(spark)
    for shift in range(1, 4):  # later batches: the watermark and the clock move on
        marked.append(_in_spark(spark, table, BASE_NS + shift, BASE_NS + 1 + shift, staged=True))
    assert _compilations(spark) == compiled
    # and the thresholds were applied, batch by batch: late below, future above
    reasons = [batch.column(ERROR_REASON).to_pylist() for batch in marked]
    assert reasons[0] == [None] * 4
    assert reasons[2] == [LATE_REASON, None, None, FUTURE_REASON]
    assert reasons[4] == [LATE_REASON, LATE_REASON, LATE_REASON, None]


@pytest.mark.parametrize("dead", [0, 1, 3])
def test_dropped_bytes_leave_the_buffers(dead: int) -> None:
    """What only a dead letter needs keeps the dead letters' bytes alone: none of the other
    records' values stays in a buffer under their nulls (it would travel and be held with
    the records all the way to the views)."""
    n = 50
    table = pa.Table.from_pylist(
        [{"user_id": i, EVENT_NS: 50, ERROR_FIELD: "value" if i < dead else None,
          ERROR_REASON: "not a JSON object" if i < dead else None, "key": b"k%d" % i,
          "value": b"v" * 1000, "topic": "t" * 1000, "partition": 1, "offset": i}
         for i in range(n)],
        schema=SCHEMA,
    )  # fmt: skip
    kept = without_unneeded_bytes_collected(table)
    assert kept.column("value").to_pylist() == [b"v" * 1000] * dead + [None] * (n - dead)
    assert kept.column("offset").to_pylist() == list(range(dead)) + [None] * (n - dead)
    for name in ("value", "topic"):  # 1000 bytes a record (an all-null array has a few)
        data = sum(chunk.buffers()[2].size for chunk in kept.column(name).chunks
                   if chunk.buffers()[2] is not None)  # fmt: skip
        assert 1000 * dead <= data < 1000 * dead + 1000, name
