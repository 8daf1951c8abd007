"""The event-time rules of a micro-batch, on a Spark DataFrame or on collected Arrow records.

Each rule is judged against numbers fixed before the batch runs, so a replay
judges alike:

- an event whose time (epoch ns) is strictly after ``future_after_ns`` (the
  driver's clock of the batch plus ``--max-future-skew``) is "in the future";
- else, one strictly before ``late_before_ns`` (the view's watermark; None:
  nothing is late) is "later than the watermark".

Only usable records (no ``error_reason`` yet) are judged: a broken event gets
the reason of the rule and its field is the view's timestamp field; every other
record keeps its ``error_field``/``error_reason``.

Two forms of the same rules. :func:`mark_event_time` is a Spark projection, for
a batch shuffled to the executors. :func:`mark_event_time_collected` applies
them to records the driver already collected (the driver's pass of a small
batch, where a few Arrow compute calls cost less than planning a join). Neither
puts the thresholds into the code Spark generates: Spark inlines long literals,
so thresholds new in every batch made it generate and compile the batch's whole
parsing stage again each time (and the JIT compile the new classes again).
``tests/spark/test_event_time.py`` checks that both forms agree and that new
thresholds compile nothing.

The records that become dead letters keep their raw ``key`` and ``value``
bytes, ``topic`` and ``offset``; the others drop them (:func:`without_unneeded_bytes`,
:func:`without_unneeded_bytes_collected`), which makes a shuffled batch several
times smaller. The topic's name is the widest of the rest: nulled too, the job's
layout with no views ran a 5 M-event topic in 10.76-11.02 s against 11.50-11.52 s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow.columns import EVENT_NS
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

LATE_REASON = "later than the watermark"
FUTURE_REASON = "in the future"
DEAD_LETTER_ONLY = ("key", "value", "topic", "offset")
"""What only a dead letter needs of a Kafka record (its raw bytes and where it was read;
the partition stays: the counts and watermarks are per Kafka partition)."""


LATE_BEFORE = "__late_before_ns"
FUTURE_AFTER = "__future_after_ns"
"""Staging columns of :func:`mark_event_time`: the batch's thresholds, epoch ns."""


def mark_event_time(
    batch: DataFrame, timestamp_field: str, late_before_ns: int | None, future_after_ns: int
) -> DataFrame:
    """``batch`` with the records that break the rules marked as errors (Spark).

    The thresholds reach the projection as data, not as literals: a one-row inline
    table (``VALUES``, which Spark keeps as rows, never folds into constants) joined to
    every record by broadcast. As literals (inlined into the generated code) they made
    Spark compile 2 new classes a batch, 12-30 ms of Janino each on the driver, and the
    JIT compile them again. Measured on 2 M events in batches of 200 k (Redis, one run
    each): the JIT threads spent 13.6 CPU-s over batches 2-10 against 15.7 with
    literals, the whole job 40.8 against 44.3; most of what the JIT still compiles
    that late is Spark's planner (catalyst), which every batch runs a little of.
    """
    from pyspark.sql import functions as F

    thresholds_ns = {FUTURE_AFTER: future_after_ns}
    breaks: list[tuple[Column, str]] = [(F.col(EVENT_NS) > F.col(FUTURE_AFTER), FUTURE_REASON)]
    if late_before_ns is not None:
        thresholds_ns[LATE_BEFORE] = late_before_ns
        breaks.append((F.col(EVENT_NS) < F.col(LATE_BEFORE), LATE_REASON))
    values = ", ".join(f"{threshold}L" for threshold in thresholds_ns.values())
    names = ", ".join(thresholds_ns)
    thresholds = batch.sparkSession.sql(f"SELECT * FROM VALUES ({values}) AS t({names})")
    batch = batch.crossJoin(F.broadcast(thresholds))
    usable = F.col(ERROR_REASON).isNull()
    reason: Column = F.col(ERROR_REASON)
    for condition, text in reversed(breaks):  # so the first rule wins
        reason = F.when(usable & condition, F.lit(text)).otherwise(reason)
    broken = F.lit(False)
    for condition, _ in breaks:
        broken = broken | condition
    return batch.select(
        *(
            name
            for name in batch.columns
            if name not in (ERROR_FIELD, ERROR_REASON, FUTURE_AFTER, LATE_BEFORE)
        ),
        F.when(usable & broken, F.lit(timestamp_field))
        .otherwise(F.col(ERROR_FIELD))
        .alias(ERROR_FIELD),
        reason.alias(ERROR_REASON),
    )


def mark_event_time_collected(
    records: pa.Table, timestamp_field: str, late_before_ns: int | None, future_after_ns: int
) -> pa.Table:
    """``records`` (collected) with the records that break the rules marked as errors;
    the columns keep their order."""
    usable = pc.is_null(records.column(ERROR_REASON))
    event_ns = records.column(EVENT_NS)
    # a usable record has an event time; a null compares as no break, as in Spark
    future = pc.and_(usable, pc.fill_null(pc.greater(event_ns, future_after_ns), False))
    late = pc.and_(usable, pc.invert(future))
    if late_before_ns is None:
        late = pc.and_(late, pa.scalar(False))
    else:
        late = pc.and_(late, pc.fill_null(pc.less(event_ns, late_before_ns), False))
    string = pa.string()
    reason = pc.if_else(
        future, pa.scalar(FUTURE_REASON, string),
        pc.if_else(late, pa.scalar(LATE_REASON, string), records.column(ERROR_REASON)),
    )  # fmt: skip
    field = pc.if_else(
        pc.or_(future, late), pa.scalar(timestamp_field, string), records.column(ERROR_FIELD)
    )
    marked = records.set_column(records.schema.get_field_index(ERROR_REASON), ERROR_REASON, reason)
    return marked.set_column(marked.schema.get_field_index(ERROR_FIELD), ERROR_FIELD, field)


def without_unneeded_bytes(batch: DataFrame) -> DataFrame:
    """The checked batch with :data:`DEAD_LETTER_ONLY`'s columns only where a dead letter
    needs them (null elsewhere; Spark)."""
    from pyspark.sql import functions as F

    is_dead = F.col(ERROR_REASON).isNotNull()
    return batch.select(
        *(
            F.when(is_dead, F.col(name)).alias(name) if name in DEAD_LETTER_ONLY else name
            for name in batch.columns
        )
    )


def without_unneeded_bytes_collected(records: pa.Table) -> pa.Table:
    """:func:`without_unneeded_bytes` of collected records, each kept column holding the
    dead letters' bytes only.

    Not ``if_else(is_dead, column, null)``: Arrow's ``if_else`` keeps the whole data
    buffer of a binary column under the nulls, so every record's raw value went on to the
    state host (pickled whole) and sat there until the views had computed."""
    is_dead = pc.is_valid(records.column(ERROR_REASON)).combine_chunks()
    dead = int(pc.sum(is_dead).as_py() or 0)
    # the position of each dead letter among the dead ones; null for every other record
    rank = None
    if dead:
        flags = is_dead.to_numpy(zero_copy_only=False)
        rank = pa.array(np.cumsum(flags, dtype=np.int64) - 1, mask=~flags)
    for name in DEAD_LETTER_ONLY:
        index = records.schema.get_field_index(name)
        if index < 0:
            continue
        column = records.column(index)
        if rank is None:
            kept: pa.Array | pa.ChunkedArray = pa.nulls(records.num_rows, column.type)
        else:
            kept = column.filter(is_dead).take(rank)
        records = records.set_column(index, name, kept)
    return records
