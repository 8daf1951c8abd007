"""Feast's own feature server (``feast serve``, HTTP) reads what the stream job wrote.

The job computes both example views from Kafka into the online store (SQLite,
then Redis); ``feast serve`` is started on the repo and ``POST
/get-online-features`` must return the values DuckDB computes from the same
events, for every user and feature. One job run per store.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from duckdb_oracle import (
    END_NS,
    FEATURE_NAMES,
    SESSION_AGGREGATES,
    events_table,
    latest_features,
    sessions,
)
from job_harness import BIN, apply, env, run_job, topic_with
from local_processes import free_port, stop_group

from featureflow.events import sample

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SQLITE = "  type: sqlite\n  path: data/online_store.db\n"


@contextmanager
def feature_server(repo: Path, log: Path) -> Iterator[str]:
    """``feast serve`` (HTTP) on the repo, on a free loopback port; yields its base URL."""
    port = free_port()
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(BIN / "feast"), "-c", str(repo), "serve", "-h", "127.0.0.1", "-p", str(port),
             "--no-access-log"],
            stdout=out, stderr=subprocess.STDOUT, env=env(), start_new_session=True,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                assert server.poll() is None, log.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, "feast serve did not answer /health"
                try:
                    with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                        if response.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    time.sleep(0.5)
            yield url
        finally:
            stop_group(server, timeout_s=30)


def get_online_features(url: str, features: list[str], users: list[int]) -> dict[str, list[Any]]:
    """``POST /get-online-features``: ``{"view__feature": [value per user]}`` (only PRESENT
    or NOT_FOUND statuses; a NOT_FOUND value is None)."""
    body = json.dumps(
        {"features": features, "entities": {"user_id": users}, "full_feature_names": True}
    ).encode()
    request = urllib.request.Request(
        f"{url}/get-online-features", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.load(response)
    names = answer["metadata"]["feature_names"]
    columns = {}
    for name, result in zip(names, answer["results"], strict=True):
        assert set(result["statuses"]) <= {"PRESENT", "NOT_FOUND"}, (name, result["statuses"])
        columns[name] = [
            None if status == "NOT_FOUND" else value
            for value, status in zip(result["values"], result["statuses"], strict=True)
        ]
    return columns


def _assert_column_equal(name: str, got: list[Any], want: list[Any]) -> None:
    assert [value is None for value in got] == [value is None for value in want], name
    present = [i for i, value in enumerate(want) if value is not None]
    np.testing.assert_allclose(
        np.array([got[i] for i in present], dtype=float),
        np.array([want[i] for i in present], dtype=float),
        rtol=1e-9, atol=1e-9, err_msg=name,
    )  # fmt: skip


def _epoch_s(value: Any) -> float:
    """A served timestamp (epoch seconds, or RFC 3339 text) as epoch seconds."""
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return float(value)


@pytest.mark.parametrize("online_store", ["sqlite", "redis"])
def test_feast_serve_returns_what_duckdb_computes(
    online_store: str, kafka_bootstrap: str, feature_repo_copy: Path, tmp_path: Path
) -> None:
    from featureflow.infra.redis_server import RedisServer

    events = sample.generate(
        1500, users=40, seed=61, end_ns=END_NS, span_s=4 * 3600, out_of_order_share=0.0
    )
    # One partition: the final watermark is the latest event time less the delay.
    topic = topic_with(kafka_bootstrap, "test-serve", events, partitions=1)
    with RedisServer() if online_store == "redis" else _no_server() as redis:
        if redis is not None:
            config = feature_repo_copy / "feature_store.yaml"
            assert SQLITE in config.read_text()
            config.write_text(
                config.read_text().replace(
                    SQLITE, f"  type: redis\n  connection_string: {redis.connection_string}\n"
                )
            )
        apply(feature_repo_copy, topic)
        run_job(feature_repo_copy, kafka_bootstrap, tmp_path / "checkpoint")
        table = events_table(events)
        rolling = latest_features(table)
        latest_session = {row["user_id"]: row for row in sessions(table).to_pylist()}
        users = sorted(rolling)
        assert users == sorted(latest_session)
        session_features = ["session_start", "session_duration_s", *SESSION_AGGREGATES]
        with feature_server(feature_repo_copy, tmp_path / "feast-serve.log") as url:
            served = get_online_features(
                url,
                [f"user_txn_stats:{name}" for name in FEATURE_NAMES]
                + [f"user_sessions:{name}" for name in session_features],
                users,
            )
    assert served["user_id"] == users
    for name in FEATURE_NAMES:
        _assert_column_equal(
            name, served[f"user_txn_stats__{name}"], [rolling[u][name] for u in users]
        )
    for name in SESSION_AGGREGATES:
        _assert_column_equal(
            name, served[f"user_sessions__{name}"], [latest_session[u][name] for u in users]
        )
    _assert_column_equal(
        "session_duration_s",
        served["user_sessions__session_duration_s"],
        [(latest_session[u]["last_ns"] - latest_session[u]["start_ns"]) / 1e9 for u in users],
    )
    _assert_column_equal(
        "session_start",
        [_epoch_s(value) for value in served["user_sessions__session_start"]],
        [latest_session[u]["start_ns"] // 10**6 / 1e3 for u in users],
    )


@contextmanager
def _no_server() -> Iterator[None]:
    yield None
