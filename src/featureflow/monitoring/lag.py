"""Consumer lag of the stream job: per Kafka partition, latest offset minus processed offset.

Spark's Kafka source reports in each query progress (after every micro-batch,
and every ~10 s while the topic is quiet) the offsets it has read up to
(``endOffset``) and the latest offsets the topic had when the trigger fired
(``latestOffset``), per topic and partition. Their difference is the lag this
module reports: the records the job still has to process. It needs no Kafka
connection of its own, so it works with whatever security settings the job's
``--kafka-option``s give Spark.

Each new progress gives one JSON line on the ``featureflow.lag`` logger (next
to the per-view ``featureflow.metrics`` lines) and sets the
``featureflow_consumer_lag_records`` gauges::

    {"batch_id": 4, "consumer_lag": {"transactions": {"0": 250, "1": 0}}, "query": "..."}
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from featureflow.spark.metrics import PrometheusExporter

log = logging.getLogger("featureflow.lag")

Offsets = dict[str, dict[int, int]]
"""Kafka offsets per topic and partition, as Spark's Kafka source writes them."""


def parse_offsets(value: str | Mapping[str, Any] | None) -> Offsets:
    """Spark's Kafka offset JSON (``{"topic": {"0": 12, "1": 40}}``, text or parsed)."""
    if value is None:
        return {}
    parsed = json.loads(value) if isinstance(value, str) else value
    if not isinstance(parsed, Mapping):
        return {}
    return {
        str(topic): {int(partition): int(offset) for partition, offset in partitions.items()}
        for topic, partitions in parsed.items()
        if isinstance(partitions, Mapping)
    }


def consumer_lag(processed: Offsets, latest: Offsets) -> Offsets:
    """Per topic and partition: ``latest - processed`` records (never below 0).

    A partition Spark has not read yet counts from offset 0 (the topic's start)."""
    return {
        topic: {
            partition: max(0, offset - processed.get(topic, {}).get(partition, 0))
            for partition, offset in sorted(partitions.items())
        }
        for topic, partitions in latest.items()
    }


def progress_lag(progress: Mapping[str, Any]) -> Offsets:
    """The consumer lag in one query progress (every Kafka source of the query)."""
    lag: Offsets = {}
    for source in progress.get("sources") or ():
        latest = parse_offsets(source.get("latestOffset"))
        if latest:
            lag.update(consumer_lag(parse_offsets(source.get("endOffset")), latest))
    return lag


class ConsumerLagWatcher:
    """Reports each query's consumer lag once per new progress (the driver loop polls it)."""

    def __init__(self, exporter: PrometheusExporter | None = None) -> None:
        self.exporter = exporter
        self._seen: dict[str, str] = {}  # query id -> timestamp of the last progress reported

    def poll(self, queries: Iterable[StreamingQuery]) -> None:
        for query in queries:
            progress = query.lastProgress
            stamp = str(progress.get("timestamp")) if progress is not None else None
            if progress is None or self._seen.get(str(query.id)) == stamp:
                continue
            self._seen[str(query.id)] = str(stamp)
            self.report(query.name or str(query.id), progress)

    def report(self, query: str, progress: Mapping[str, Any]) -> Offsets:
        lag = progress_lag(progress)
        if not lag:
            return lag
        line = {
            "query": query,
            "batch_id": progress.get("batchId"),
            "consumer_lag": {
                topic: {str(partition): records for partition, records in partitions.items()}
                for topic, partitions in lag.items()
            },
        }
        log.info("%s", json.dumps(line, sort_keys=True))
        if self.exporter is not None:
            for topic, partitions in lag.items():
                self.exporter.observe_consumer_lag(topic, partitions)
        return lag
