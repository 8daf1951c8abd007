"""Out-of-order and late events, from the order in which events arrived.

Arrival order is ``(partition, offset)``: Kafka orders records within a
partition only, and a view's events of one entity share a partition. For an
event that arrives with event time ``t`` in a partition whose earlier events
reached event time ``m`` (the partition's *stream time*, ns):

- it is **out of order** when ``t < m``;
- it is **late** when ``t < m - delay``, with ``delay`` the source's
  ``watermark_delay_threshold``: the stream job would drop such an event as
  "later than the watermark" once ``m`` had been seen in an earlier micro-batch.

(The job's watermark is the minimum of such per-partition watermarks over
the partitions, advanced per micro-batch (:mod:`featureflow.spark.watermarks`),
so it drops at most the events flagged late here: those a batch boundary
anywhere could make late, once every partition had moved on.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from featureflow.columns import EVENT_NS
from featureflow.explore.load import OFFSET, PARTITION
from featureflow.ops._durations import duration_ns

if TYPE_CHECKING:
    import pandas as pd


def arrival_flags(events: pa.Table, watermark_delay: str | int) -> pa.Table:
    """Per event, in input order: ``stream_ns`` and the ``out_of_order`` and ``late`` flags.

    ``stream_ns`` is the largest event time (ns) of the partition up to and
    including the event; ``watermark_delay`` a duration (``"5m"``; int = ns, 0 allowed).
    """
    no_delay = isinstance(watermark_delay, int) and watermark_delay == 0
    delay_ns = 0 if no_delay else duration_ns(watermark_delay, "watermark_delay")
    ts = events.column(EVENT_NS).to_numpy()
    partition = events.column(PARTITION).to_numpy()
    order = np.lexsort((events.column(OFFSET).to_numpy(), partition))
    prior_max = np.full(len(ts), np.iinfo(np.int64).min, np.int64)
    sorted_ts = ts[order]
    sorted_partition = partition[order]
    starts = np.flatnonzero(np.r_[True, sorted_partition[1:] != sorted_partition[:-1]])
    for start, end in zip(starts, [*starts[1:], len(ts)], strict=True):
        running = np.maximum.accumulate(sorted_ts[start:end])
        prior_max[order[start + 1 : end]] = running[:-1]
    with np.errstate(over="ignore"):
        out_of_order = ts < prior_max
        late = out_of_order & (ts < prior_max - delay_ns)
    return pa.table(
        {
            "stream_ns": np.maximum(ts, prior_max),
            "out_of_order": out_of_order,
            "late": late,
        }
    )


def late_share(events: pa.Table, bucket: str | int, watermark_delay: str | int) -> pd.DataFrame:
    """Share of out-of-order and late events per bucket of stream time.

    Buckets are ``[start, start + bucket)`` (ns, end exclusive) of the stream
    time at arrival, starts multiples of ``bucket`` since the epoch.

    Returns:
        Columns ``bucket_start`` (datetime64[ns, UTC]), ``events``,
        ``out_of_order``, ``late`` (counts) and ``out_of_order_share``,
        ``late_share`` (fractions 0..1); one row per bucket holding events.
    """
    import pandas as pd

    bucket_ns = duration_ns(bucket, "bucket")
    flags = arrival_flags(events, watermark_delay).to_pandas()
    flags["bucket_ns"] = flags["stream_ns"] // bucket_ns * bucket_ns
    per_bucket = flags.groupby("bucket_ns", sort=True).agg(
        events=("stream_ns", "size"), out_of_order=("out_of_order", "sum"), late=("late", "sum")
    )
    per_bucket = per_bucket.reset_index()
    per_bucket.insert(
        0, "bucket_start", pd.to_datetime(per_bucket["bucket_ns"], unit="ns", utc=True)
    )
    per_bucket["out_of_order_share"] = per_bucket["out_of_order"] / per_bucket["events"]
    per_bucket["late_share"] = per_bucket["late"] / per_bucket["events"]
    return per_bucket.drop(columns=["bucket_ns"])
