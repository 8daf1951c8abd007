"""Backfills: a feature view's features over historical events, with the stream job's kernels.

``spark-submit jobs/backfill.py --repo R --start S --end E`` reads the events
of ``[S - context, E)`` (Parquet, or a Kafka topic's retained records),
shuffles them by entity, computes every event's features on the executors
with :mod:`featureflow.features` (the code path the stream job runs), and
writes the rows of the events in ``[S, E)`` to the offline store, replacing
what an earlier run wrote for that range. Modules, one job each:

- :mod:`.timerange`  the ``[start, end)`` range, its context and its days
- :mod:`.source`     events from Parquet or Kafka, with a reason for each bad row
- :mod:`.output`     the day-partitioned offline store: stage, then swap days in
- :mod:`.compute`    the executor function (one ``mapInArrow`` call per partition)
- :mod:`.progress`   the driver's progress bar over Spark's task counts
- :mod:`.runner`     the driver: read, compute, swap, summarise
- :mod:`.job`        the ``jobs/backfill.py`` command line
"""

from featureflow.backfill.runner import BackfillOptions, BackfillSummary, run_backfill
from featureflow.backfill.timerange import TimeRange

__all__ = ["BackfillOptions", "BackfillSummary", "TimeRange", "run_backfill"]
