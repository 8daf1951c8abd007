"""Feature values of a stream view, computed from its events with :mod:`featureflow.ops`.

The one code path shared by the stream job, backfills and notebooks: the same
events give the same features wherever they are computed. Pure functions of
Arrow tables; no Spark, Kafka or Feast I/O here.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa

from featureflow import ops
from featureflow.repo import StreamViewSpec


def _window_label(window_ns: int) -> str:
    return f"{window_ns}ns"


def event_features(
    events: pa.Table, spec: StreamViewSpec, *, event_ns_column: str = "event_ns"
) -> pa.Table:
    """Every aggregation of ``spec`` for every event, in input order.

    The value of an aggregation with window W at an event of time t covers
    the events of the same entity with time in ``[t - W, t]`` (ns, both ends
    included; equal times are in each other's frame).

    Args:
        events: one row per event: ``spec.join_key`` (int64), ``event_ns_column``
            (int64 epoch ns) and the value columns the aggregations read.
    Returns:
        Columns ``spec.join_key``, ``event_ns_column``, then one column per
        aggregation named by Feast (``sum_amount_3600s``), in ``spec`` order.
    """
    keys = events.column(spec.join_key)
    ts = events.column(event_ns_column)
    by_column: dict[str, list[int]] = defaultdict(list)
    for index, aggregation in enumerate(spec.aggregations):
        by_column[aggregation.column].append(index)
    outputs: dict[str, pa.ChunkedArray | pa.Array] = {}
    for column, indices in by_column.items():
        wanted = [spec.aggregations[i] for i in indices]
        windows = sorted({agg.window_ns for agg in wanted})
        functions = list(dict.fromkeys(agg.function for agg in wanted))
        computed = ops.rolling(
            ts, events.column(column), [_window_label(w) for w in windows], functions, keys=keys
        )
        for aggregation in wanted:
            outputs[aggregation.output_name] = computed.column(
                f"{aggregation.function}_{_window_label(aggregation.window_ns)}"
            )
    columns = {spec.join_key: keys, event_ns_column: ts}
    columns.update({agg.output_name: outputs[agg.output_name] for agg in spec.aggregations})
    return pa.table(columns)


def latest_per_entity(
    features: pa.Table, join_key: str, *, event_ns_column: str = "event_ns"
) -> pa.Table:
    """The row of each entity with the latest event time (ties: the later row wins).

    This is what the online store serves: the rolling aggregates as of the
    entity's latest event. Output is sorted by the join key.
    """
    if features.num_rows == 0:
        return features
    keys = features.column(join_key).to_numpy()
    ts = features.column(event_ns_column).to_numpy()
    order = np.lexsort((np.arange(len(keys)), ts, keys))
    sorted_keys = keys[order]
    last_of_key = np.append(sorted_keys[1:] != sorted_keys[:-1], True)
    return features.take(pa.array(order[last_of_key]))
