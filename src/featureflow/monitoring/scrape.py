"""Reading a running job's Prometheus endpoint (``--metrics-port``) into per-view snapshots.

The names read here are those :class:`featureflow.spark.metrics.PrometheusExporter`
serves; ``tests/test_dashboard.py`` checks the Grafana dashboard against the same
endpoint.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field

from featureflow.errors import MetricsUnavailableError


@dataclass
class ViewStatus:
    """One view as its last micro-batch left it (None: no batch done yet)."""

    name: str
    topic: str | None = None
    batches: int = 0
    records: int = 0
    events: int = 0
    events_per_s: float | None = None
    batch_duration_s: float | None = None
    freshness_p50_s: float | None = None
    freshness_p99_s: float | None = None
    state_rows: int | None = None
    dead_letters: dict[str, int] = field(default_factory=dict)
    """Records dead-lettered since the job started, by reason."""
    watermark_lag_s: dict[int, float] = field(default_factory=dict)
    idle_partitions: set[int] = field(default_factory=set)


@dataclass
class JobStatus:
    """Everything ``featureflow status`` shows, from one scrape."""

    url: str
    views: dict[str, ViewStatus] = field(default_factory=dict)
    consumer_lag: dict[str, dict[int, int]] = field(default_factory=dict)
    """Records not yet processed, per topic and partition."""

    def view(self, name: str) -> ViewStatus:
        return self.views.setdefault(name, ViewStatus(name))

    def total_lag(self, topic: str | None = None) -> int:
        return sum(
            sum(partitions.values())
            for name, partitions in self.consumer_lag.items()
            if topic is None or name == topic
        )


def metrics_url(port: int | None = None, url: str | None = None, host: str = "127.0.0.1") -> str:
    """The endpoint to read: ``url`` as given (``/metrics`` added to a bare address), or
    ``http://host:port/metrics``."""
    if url is None:
        return f"http://{host}:{port}/metrics"
    if "://" not in url:
        url = f"http://{url}"
    scheme, _, rest = url.partition("://")
    return url if "/" in rest else f"{scheme}://{rest}/metrics"


def fetch(url: str, timeout_s: float = 5.0) -> str:
    """The Prometheus text at ``url``."""
    hint = "is the job running, started with --metrics-port, and is this its address?"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text: str = response.read().decode()
    except urllib.error.HTTPError as error:
        msg = f"{url} answered HTTP {error.code} {error.reason}: {hint}"
        raise MetricsUnavailableError(msg) from error
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        msg = f"cannot read the job's metrics at {url} ({reason}): {hint}"
        raise MetricsUnavailableError(msg) from error
    if "featureflow_" not in text:
        msg = f"{url} serves no featureflow metrics: {hint}"
        raise MetricsUnavailableError(msg)
    return text


def parse(text: str, url: str) -> JobStatus:
    """A :class:`JobStatus` from the exporter's Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    status = JobStatus(url)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == "featureflow_consumer_lag_records":
                partitions = status.consumer_lag.setdefault(labels["topic"], {})
                partitions[int(labels["partition"])] = int(value)
                continue
            if "view" not in labels:
                continue
            view = status.view(labels["view"])
            if name == "featureflow_view_info":
                view.topic = labels["topic"]
            elif name == "featureflow_batches_total":
                view.batches = int(value)
            elif name == "featureflow_records_total":
                view.records = int(value)
            elif name == "featureflow_events_total":
                view.events = int(value)
            elif name == "featureflow_events_per_second":
                view.events_per_s = value
            elif name == "featureflow_batch_duration_seconds":
                view.batch_duration_s = value
            elif name == "featureflow_state_rows":
                view.state_rows = int(value)
            elif name == "featureflow_freshness_seconds":
                if labels["quantile"] == "0.5":
                    view.freshness_p50_s = value
                elif labels["quantile"] == "0.99":
                    view.freshness_p99_s = value
            elif name == "featureflow_dead_letters_total":
                view.dead_letters[labels["reason"]] = int(value)
            elif name == "featureflow_watermark_lag_seconds":
                view.watermark_lag_s[int(labels["partition"])] = value
            elif name == "featureflow_partition_idle" and value:
                view.idle_partitions.add(int(labels["partition"]))
    return status


def scrape(url: str, timeout_s: float = 5.0) -> JobStatus:
    """Read and parse the endpoint once."""
    return parse(fetch(url, timeout_s), url)
