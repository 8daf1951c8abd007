"""The Grafana dashboard and the compose services that load it, against the real exporter.

Every metric a panel (or the view variable) names must be one the job's
Prometheus endpoint serves: the endpoint is started here, fed one micro-batch
report and one consumer-lag reading, and scraped over HTTP.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "featureflow.json"
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
METRIC = re.compile(r"\bfeatureflow_[a-z0-9_]+")
UNIT = re.compile(r"\((seconds|records|events|events/s|batches|rows|bytes|boolean|tasks)\)$")


def served_names(text: str) -> set[str]:
    """Every sample name on the endpoint (``featureflow_records_total``, ...)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def expressions(dashboard: dict[str, Any]) -> list[str]:
    """The PromQL of every panel target and template variable."""
    found = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        found.append(query["query"] if isinstance(query, dict) else str(query))
    return found


def unknown_metrics(dashboard: dict[str, Any], names: set[str]) -> set[str]:
    return {m for expr in expressions(dashboard) for m in METRIC.findall(expr)} - names


def test_every_metric_the_dashboard_names_is_served(served: str) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    names = served_names(served)
    assert unknown_metrics(dashboard, names) == set()
    shown = {m for expr in expressions(dashboard) for m in METRIC.findall(expr)}
    for wanted in (
        "featureflow_consumer_lag_records", "featureflow_watermark_lag_seconds",
        "featureflow_freshness_seconds", "featureflow_events_per_second",
        "featureflow_batch_duration_seconds", "featureflow_dead_letters_total",
        "featureflow_cold_partitions_total", "featureflow_freshness_events_total",
    ):  # fmt: skip
        assert wanted in shown, wanted


def test_a_panel_naming_a_metric_that_does_not_exist_fails_the_check(served: str) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    dashboard["panels"][0]["targets"][0]["expr"] = "rate(featureflow_event_total[1m])"
    assert unknown_metrics(dashboard, served_names(served)) == {"featureflow_event_total"}


def test_panels_have_units_and_unique_ids() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert panel["datasource"]["uid"] == "prometheus", panel["title"]


def test_every_metric_has_a_help_text_with_its_unit(served: str) -> None:
    helps = dict(re.findall(r"^# HELP (featureflow_\w+) (.*)$", served, re.MULTILINE))
    assert "featureflow_consumer_lag_records" in helps
    assert "featureflow_watermark_lag_seconds" in helps
    for name, text in helps.items():
        if name != "featureflow_view_info":
            assert UNIT.search(text), (name, text)


def test_lag_gauges_carry_topic_view_and_partition(served: str) -> None:
    assert 'featureflow_consumer_lag_records{partition="0",topic="transactions"} 250.0' in served
    assert 'featureflow_watermark_lag_seconds{partition="1",view="user_txn_stats"} 400.0' in served
    assert 'featureflow_partition_idle{partition="1",view="user_txn_stats"} 1.0' in served
    assert 'featureflow_partition_idle{partition="0",view="user_txn_stats"} 0.0' in served


def test_compose_runs_prometheus_on_the_job_and_grafana_on_the_dashboard() -> None:
    job = " ".join(COMPOSE["job"]["command"].split())
    port = re.search(r"--metrics-port (\d+)", job)
    assert port, job
    assert COMPOSE["job"]["environment"]["FEATUREFLOW_METRICS_HOST"] == "0.0.0.0"
    prometheus_config = COMPOSE["prometheus"]["volumes"][0].split(":")[0]
    scrape = yaml.safe_load((ROOT / prometheus_config).read_text())
    targets = scrape["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == [f"job:{port.group(1)}"]

    mounts = dict(volume.split(":")[:2] for volume in COMPOSE["grafana"]["volumes"])
    assert mounts["./dashboards"] == "/var/lib/grafana/dashboards"
    assert DASHBOARD.parent == ROOT / "dashboards"
    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    providers = yaml.safe_load((provisioning / "dashboards" / "featureflow.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert sources["datasources"][0]["uid"] == "prometheus"
    assert sources["datasources"][0]["url"] == "http://prometheus:9090"
