"""Per-micro-batch metrics of the stream job: one JSON log line each, and Prometheus text.

Freshness is write time minus event time, in seconds, per accepted event:
executors count it into fixed log-spaced buckets (1 ms .. ~116 days), the
driver adds the partitions' counts and reads p50/p99 off the merged
histogram (upper bucket edge: an over-estimate by at most one bucket, ~26 %).
The metrics line also carries the batch's non-empty buckets
(``freshness_buckets``): histograms add up, quantiles do not, so the p99 of
many batches' events is read off the sum of their buckets (:func:`bucket_array`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger("featureflow.metrics")

METRICS_HOST_VARIABLE = "FEATUREFLOW_METRICS_HOST"
"""Environment variable: the address the Prometheus endpoint binds (default 127.0.0.1)."""

FRESHNESS_EDGES_S = np.logspace(-3, 7, 101)
"""Upper edges of the freshness buckets, seconds; one more bucket holds everything above."""


def freshness_histogram(event_ns: np.ndarray, written_at_ns: int) -> list[int]:
    """Counts of ``written_at_ns - event_ns`` (as seconds) per bucket of ``FRESHNESS_EDGES_S``."""
    lag_s = (written_at_ns - event_ns.astype(np.int64)) / 1e9
    buckets = np.searchsorted(FRESHNESS_EDGES_S, lag_s, side="left")
    return np.bincount(buckets, minlength=len(FRESHNESS_EDGES_S) + 1).tolist()


def histogram_quantile(counts: list[int] | np.ndarray, q: float) -> float | None:
    """The upper edge (seconds) of the bucket holding quantile ``q``; None without events."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return None
    index = int(np.searchsorted(np.cumsum(counts), q * total, side="left"))
    return float(FRESHNESS_EDGES_S[min(index, len(FRESHNESS_EDGES_S) - 1)])


PROMETHEUS_FRESHNESS_EDGES = range(20, 51)
"""The buckets of :data:`FRESHNESS_EDGES_S` that Prometheus gets as ``le`` bounds: 0.1 s to
100 s, a bound per 26 %, plus ``+Inf`` (the JSON line keeps every bucket)."""


def nonempty_buckets(counts: list[int] | np.ndarray) -> dict[str, int]:
    """A freshness histogram (:func:`freshness_histogram`) as its non-empty buckets, each
    keyed by its upper edge in seconds (4 significant digits; ``"inf"``: above the last
    edge), as the metrics line carries them."""
    last = len(FRESHNESS_EDGES_S)
    return {
        "inf" if k == last else f"{FRESHNESS_EDGES_S[k]:.4g}": int(count)
        for k, count in enumerate(np.asarray(counts, dtype=np.int64))
        if count
    }


def bucket_array(buckets: Mapping[str, int]) -> np.ndarray:
    """The histogram (counts per bucket of :data:`FRESHNESS_EDGES_S`, and one above them)
    of :func:`nonempty_buckets`' mapping. Edge ``k`` is ``10 ** (k / 10 - 3)`` seconds,
    so its 4 digits name it exactly."""
    counts = np.zeros(len(FRESHNESS_EDGES_S) + 1, dtype=np.int64)
    for edge, count in buckets.items():
        k = len(FRESHNESS_EDGES_S) if edge == "inf" else round(10 * np.log10(float(edge)) + 30)
        counts[k] += count
    return counts


@dataclass
class BatchReport:
    """What one micro-batch of one view did."""

    view: str
    batch_id: int
    records: int  # Kafka records read
    events: int  # events accepted and computed
    dead_letters: dict[str, int] = field(default_factory=dict)  # by reason
    entities_written: int = 0
    state_rows: int = 0
    """Events (and tiles) the view keeps as window state, summed over its shuffle
    partitions, each as of its last change in this run of the job."""
    state_bytes: int = 0
    """Arrow bytes of that state, held resident by the Python workers, like ``state_rows``."""
    state_frame_bytes: int = 0
    """Bytes of the frame states (rolling) or kept sessions (sessions) the workers hold
    resident beside those events, like ``state_rows``: the state's footprint is
    ``state_bytes + state_frame_bytes``."""
    partitions_run: int = 0
    """Shuffle partitions whose task changed this view's state or outputs in this batch."""
    cold_partitions: int = 0
    """Of ``partitions_run``, those whose task computed this view's frame states anew from all the
    partition's state: the Python worker that ran it did not hold them (a restart, or
    Spark handing the partition to another worker than last batch's). Their cost grows
    with the state; a warm partition's only with the batch."""
    duration_s: float = 0.0
    freshness_p50_s: float | None = None
    freshness_p99_s: float | None = None
    freshness_buckets: dict[str, int] = field(default_factory=dict)
    """The batch's freshness histogram, its non-empty buckets by upper edge in seconds
    (:func:`nonempty_buckets`): how many accepted events were written to the online store
    that long after their event time. Batches add up: the p50/p99 of a run's events is
    :func:`histogram_quantile` of the summed :func:`bucket_array` (a quantile of the
    batches' p99 is not one of events)."""
    watermark_lag_s: dict[str, float] = field(default_factory=dict)
    """Per Kafka partition (its number as text): the driver's clock at the batch minus the
    partition's watermark (its largest event time minus the delay), seconds. A growing
    value means the partition's events lag (or the partition is idle)."""
    idle_partitions: list[int] = field(default_factory=list)
    """Kafka partitions that, idle for longer than ``--idle-partition-timeout``, did not
    hold the view's watermark back at the end of this batch."""
    phases_s: dict[str, float] = field(default_factory=dict)
    """Where the time went: the driver's Spark jobs (wall s) and the phases of the views'
    work, seconds summed over partitions, which run in parallel (``executors_*``; a
    small batch's pass on the driver: ``driver_*``)."""
    pass_on: str = "executors"
    """Where the views ran: ``executors`` (shuffled) or ``driver`` (a small batch)."""

    @property
    def events_per_s(self) -> float:
        return self.events / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> str:
        record: dict[str, Any] = asdict(self)
        record["events_per_s"] = round(self.events_per_s, 1)
        record["duration_s"] = round(self.duration_s, 3)
        record["phases_s"] = {name: round(s, 3) for name, s in self.phases_s.items()}
        return json.dumps(record, sort_keys=True)


class _Series:
    """One labelled series of a metric family: ``inc`` (counters) or ``set`` (gauges)."""

    def __init__(self, family: _Family, labels: tuple[str, ...]) -> None:
        self._family, self._labels = family, labels

    def inc(self, amount: float = 1.0) -> None:
        with self._family.lock:
            values = self._family.values
            values[self._labels] = values.get(self._labels, 0.0) + amount

    def set(self, value: float) -> None:
        with self._family.lock:
            self._family.values[self._labels] = float(value)


class _Family:
    """A counter or gauge and its values per label tuple, held by the exporter itself."""

    def __init__(self, kind: str, name: str, help_text: str, labels: list[str]) -> None:
        self.kind, self.name, self.help_text, self.labels_names = kind, name, help_text, labels
        self.values: dict[tuple[str, ...], float] = {}
        self.lock = threading.Lock()

    def labels(self, *values: str) -> _Series:
        return _Series(self, tuple(str(value) for value in values))

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        make = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        family = make(self.name, self.help_text, labels=self.labels_names)
        with self.lock:
            for labels, value in sorted(self.values.items()):
                family.add_metric(list(labels), value)
        return family


class PrometheusExporter:
    """Serves the job's metrics in Prometheus text format on ``http://<host>:<port>/metrics``.

    ``port`` 0 lets the OS choose a free one (:attr:`port`): tests take it so, since a port
    probed free and then bound can be taken by another process in between.

    The values live in the exporter (its own collector), not in prometheus_client's
    ``Counter``/``Gauge``: importing Feast sets ``PROMETHEUS_MULTIPROC_DIR``, which puts
    every prometheus_client metric created afterwards into shared memory-mapped files
    keyed by name, so two exporters of one process (or a restarted one) added up each
    other's counts.
    """

    def __init__(self, port: int, host: str | None = None) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        # Loopback unless told otherwise (docker-compose's Prometheus scrapes another host).
        self.host = host or os.environ.get(METRICS_HOST_VARIABLE, "127.0.0.1")
        self.registry = CollectorRegistry(auto_describe=True)
        self._families: list[_Family] = []

        def family(kind: str, name: str, help_text: str, labels: list[str]) -> _Family:
            made = _Family(kind, name, help_text, labels)
            self._families.append(made)
            return made

        def counter(name: str, help_text: str, labels: list[str]) -> _Family:
            return family("counter", name, help_text, labels)

        def gauge(name: str, help_text: str, labels: list[str]) -> _Family:
            return family("gauge", name, help_text, labels)

        self.records = counter("featureflow_records", "Kafka records read (records)", ["view"])
        self.events = counter(
            "featureflow_events", "events accepted and computed (events)", ["view"]
        )
        self.dead_letters = counter(
            "featureflow_dead_letters",
            "records sent to the dead-letter topic, by reason (records)", ["view", "reason"],
        )  # fmt: skip
        self.batches = counter("featureflow_batches", "micro-batches done (batches)", ["view"])
        self.duration = gauge(
            "featureflow_batch_duration_seconds", "duration of the last micro-batch (seconds)",
            ["view"],
        )  # fmt: skip
        self.rate = gauge(
            "featureflow_events_per_second",
            "events accepted per second of the last micro-batch (events/s)", ["view"],
        )  # fmt: skip
        self.state = gauge(
            "featureflow_state_rows",
            "events and tiles the view keeps as window state, each shuffle partition as of "
            "its last change in this run (rows)", ["view"],
        )  # fmt: skip
        self.state_bytes = gauge(
            "featureflow_state_bytes",
            "Arrow bytes of the view's window state, each shuffle partition as of its last "
            "change in this run (bytes)", ["view"],
        )  # fmt: skip
        self.state_frame_bytes = gauge(
            "featureflow_state_frame_bytes",
            "bytes of the frame states or kept sessions held beside the view's window state, "
            "each shuffle partition as of its last change in this run (bytes)", ["view"],
        )  # fmt: skip
        self.cold_partitions = counter(
            "featureflow_cold_partitions",
            "shuffle partitions whose task computed the view's frame states anew from all "
            "its state, not held by the Python worker that ran it (tasks)", ["view"],
        )  # fmt: skip
        self.freshness = gauge(
            "featureflow_freshness_seconds",
            "write time minus event time of the last micro-batch's events, at a quantile "
            "(seconds)", ["view", "quantile"],
        )  # fmt: skip
        self.freshness_events = counter(
            "featureflow_freshness_events",
            "events written to the online store at most `le` seconds after their event time, "
            "cumulative over `le` like a histogram's buckets (events)", ["view", "le"],
        )  # fmt: skip
        self.watermark_lag = gauge(
            "featureflow_watermark_lag_seconds",
            "driver clock at the last micro-batch minus the Kafka partition's watermark "
            "(seconds)", ["view", "partition"],
        )  # fmt: skip
        self.idle = gauge(
            "featureflow_partition_idle",
            "1 when the Kafka partition was idle and did not hold the view's watermark back "
            "at the last micro-batch, else 0 (boolean)", ["view", "partition"],
        )  # fmt: skip
        self.consumer_lag = gauge(
            "featureflow_consumer_lag_records",
            "Kafka records not processed yet: the partition's latest offset minus the offset "
            "the job has processed up to (records)", ["topic", "partition"],
        )  # fmt: skip
        self.view_topic = gauge(
            "featureflow_view_info", "1 for each view the job runs, labelled with its topic",
            ["view", "topic"],
        )  # fmt: skip
        self.registry.register(self)
        self.server, self.thread = start_http_server(port, addr=self.host, registry=self.registry)
        self.port: int = self.server.server_port
        """The port it serves on (the one the OS chose when ``port`` was 0)."""

    def collect(self) -> Any:
        """The metric families, for prometheus_client's registry (the Collector protocol)."""
        return [family.collect() for family in self._families]

    def describe_views(self, topics: dict[str, str]) -> None:
        """Record which topic each view reads (``featureflow status`` pairs view and lag)."""
        for view, topic in topics.items():
            self.view_topic.labels(view, topic).set(1)

    def observe(self, report: BatchReport) -> None:
        view = report.view
        self.records.labels(view).inc(report.records)
        self.events.labels(view).inc(report.events)
        for reason, count in report.dead_letters.items():
            self.dead_letters.labels(view, reason).inc(count)
        self.batches.labels(view).inc()
        self.duration.labels(view).set(report.duration_s)
        self.rate.labels(view).set(report.events_per_s)
        self.state.labels(view).set(report.state_rows)
        self.state_bytes.labels(view).set(report.state_bytes)
        self.state_frame_bytes.labels(view).set(report.state_frame_bytes)
        self.cold_partitions.labels(view).inc(report.cold_partitions)
        for quantile, value in (("0.5", report.freshness_p50_s), ("0.99", report.freshness_p99_s)):
            if value is not None:
                self.freshness.labels(view, quantile).set(value)
        if report.freshness_buckets:
            at_most = np.cumsum(bucket_array(report.freshness_buckets))
            for k in PROMETHEUS_FRESHNESS_EDGES:
                self.freshness_events.labels(view, f"{FRESHNESS_EDGES_S[k]:.4g}").inc(at_most[k])
            self.freshness_events.labels(view, "+Inf").inc(at_most[-1])
        for partition, lag_s in report.watermark_lag_s.items():
            self.watermark_lag.labels(view, partition).set(lag_s)
        idle = {str(partition) for partition in report.idle_partitions}
        for partition in idle | set(report.watermark_lag_s):
            self.idle.labels(view, partition).set(1 if partition in idle else 0)

    def observe_consumer_lag(self, topic: str, lag: dict[int, int]) -> None:
        """Set the consumer lag (records) of each partition of ``topic``."""
        for partition, records in lag.items():
            self.consumer_lag.labels(topic, str(partition)).set(records)

    def close(self) -> None:
        """Stop serving and release the port."""
        self.server.shutdown()
        self.server.server_close()
