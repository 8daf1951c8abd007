"""The backfill on a real local Spark: values (DuckDB), ranges replaced not duplicated, bad rows,
session views, ``--materialize`` read back with Feast, and a run killed halfway then re-run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from backfill_helpers import (
    BIN,
    REPO_ROOT,
    applied_repo,
    assert_history_equals_duckdb,
    history_ns,
    run,
    write_events,
)
from duckdb_oracle import (
    END_NS,
    FEATURE_NAMES,
    SESSION_AGGREGATES,
    SESSION_GAP_S,
    events_table,
    latest_features,
    sessions,
)
from pyspark.sql import SparkSession

from featureflow.backfill import BackfillOptions, BackfillSummary, TimeRange
from featureflow.backfill.output import STAGING_PREFIX
from featureflow.backfill.runner import backfill_view
from featureflow.events import sample
from featureflow.repo import load_store, stream_view_specs
from featureflow.spark.offline_sink import read_history

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOUR = 3600 * 10**9
DAY = 24 * HOUR
# Two days of events ending 2026-11-30T00:00Z; the range starts mid-day, so the
# windows of its first events reach back into the context before it.
EVENTS = sample.generate(6000, users=60, seed=21, end_ns=END_NS, span_s=2 * 86_400)
BAD_ROWS = 4


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = applied_repo(tmp_path_factory.mktemp("backfill") / "feature_repo")
    write_events(target / "data" / "transactions.parquet", EVENTS, bad_rows=BAD_ROWS)
    return target


def _backfill(
    spark: SparkSession, repo: Path, view: str, span: TimeRange, **options: Any
) -> BackfillSummary:
    store = load_store(repo)
    (spec,) = stream_view_specs(store, [view])
    return backfill_view(spark, store, spec, BackfillOptions(span=span, **options))


def test_backfill_equals_duckdb_reports_bad_rows_and_replaces_ranges(
    spark: SparkSession, repo: Path
) -> None:
    offline = str(repo / "data" / "offline-a")
    span = TimeRange(END_NS - DAY - 6 * HOUR, END_NS)  # 18:00 of day 1 to the end of day 2
    first = _backfill(spark, repo, "user_txn_stats", span, offline_path=offline)
    history = read_history(offline, "user_txn_stats")
    assert_history_equals_duckdb(history, EVENTS, span.start_ns, span.end_ns)
    assert first.rows == history.num_rows
    assert first.days == ["2026-11-28", "2026-11-29"]
    # Bad rows: counted with field and reason, not dropped silently.
    assert first.bad_rows == {
        ("user_id", "missing or null entity key"): BAD_ROWS // 2,
        ("event_timestamp", "missing or null event timestamp"): BAD_ROWS // 2,
    }
    assert len(first.bad_samples) == BAD_ROWS
    assert all("transactions.parquet" in s for s in first.bad_samples)

    # The same range again: replaced, not duplicated.
    again = _backfill(spark, repo, "user_txn_stats", span, offline_path=offline)
    assert again.rows == first.rows
    assert read_history(offline, "user_txn_stats").num_rows == history.num_rows

    # A range overlapping the first one's start: day 1 now holds 06:00-24:00, each event once.
    earlier = TimeRange(END_NS - DAY - 18 * HOUR, END_NS - DAY - 3 * HOUR)
    _backfill(spark, repo, "user_txn_stats", earlier, offline_path=offline)
    assert_history_equals_duckdb(
        read_history(offline, "user_txn_stats"), EVENTS, earlier.start_ns, span.end_ns
    )
    assert not list((repo / "data" / "offline-a" / "user_txn_stats").glob("_*"))


def test_session_view_rows_equal_duckdb_sessions(spark: SparkSession, repo: Path) -> None:
    offline = str(repo / "data" / "offline-s")
    span = TimeRange(END_NS - DAY, END_NS - 2 * HOUR)
    summary = _backfill(spark, repo, "user_sessions", span, offline_path=offline)
    history = read_history(offline, "user_sessions")
    oracle = sessions(events_table(EVENTS))
    last = oracle.column("last_ns").to_numpy()
    want = oracle.filter(pa.array((last >= span.start_ns) & (last < span.end_ns)))
    assert summary.rows == history.num_rows == want.num_rows
    got_order = np.lexsort((history_ns(history), history.column("user_id").to_numpy()))
    np.testing.assert_array_equal(history_ns(history)[got_order], want.column("last_ns"))
    start = history.column("session_start").cast(pa.int64()).to_numpy() * 1000
    np.testing.assert_array_equal(start[got_order], want.column("start_ns"))
    for name in SESSION_AGGREGATES:
        got = np.array(history.column(name).to_pylist(), dtype=float)[got_order]
        np.testing.assert_allclose(
            got, np.array(want.column(name).to_pylist(), dtype=float), rtol=1e-9, err_msg=name
        )
    assert SESSION_GAP_S * 10**9 < DAY  # the context of one day covers these bursty sessions


def test_materialize_writes_latest_values_feast_reads_back(spark: SparkSession, repo: Path) -> None:
    span = TimeRange(END_NS - DAY, END_NS - 5 * HOUR)
    summary = _backfill(
        spark, repo, "user_txn_stats", span, offline_path=str(repo / "data" / "offline-m"),
        materialize=True,
    )  # fmt: skip
    up_to_end = EVENTS.event_ns < span.end_ns
    table = events_table(EVENTS).filter(pa.array(up_to_end))
    in_range_users = set(EVENTS.user_id[up_to_end & (EVENTS.event_ns >= span.start_ns)].tolist())
    expected = {u: f for u, f in latest_features(table).items() if u in in_range_users}
    assert summary.online_written == len(expected)
    online = (
        load_store(repo)
        .get_online_features(
            features=[f"user_txn_stats:{name}" for name in FEATURE_NAMES],
            entity_rows=[{"user_id": user} for user in expected],
        )
        .to_dict()
    )
    for row, user in enumerate(online["user_id"]):
        for name in FEATURE_NAMES:
            want, got = expected[user][name], online[name][row]
            if want is None:
                assert got is None, (user, name)
            else:
                assert got == pytest.approx(want, rel=1e-9, abs=1e-9), (user, name)


def test_a_killed_run_rerun_gives_the_clean_result(repo: Path, tmp_path: Path) -> None:
    span = ["--start", "2026-11-28T12:00:00Z", "--end", "2026-11-30"]
    command = [
        str(BIN / "spark-submit"), "--master", "local[2]", str(REPO_ROOT / "jobs" / "backfill.py"),
        "--repo", str(repo), "--view", "user_txn_stats", "--partitions", "4", "--no-progress",
        *span,
    ]  # fmt: skip
    clean = run([*command, "--offline-path", str(tmp_path / "clean")])
    log = clean.stdout + clean.stderr
    assert clean.returncode == 0, log[-3000:]
    assert "backfill done:" in log and "rows/s" in log

    killed_root = tmp_path / "killed"
    # A first complete run, then a second one killed once it has staged files:
    # the re-run must give the same history as the clean run, with nothing left over.
    assert run([*command, "--offline-path", str(killed_root)]).returncode == 0
    view_dir = killed_root / "user_txn_stats"
    # The staging window lasts as long as the last tasks (short on small data): a run
    # that commits before the poll sees its staged files is tried again.
    for _attempt in range(5):
        with subprocess.Popen(
            [*command, "--offline-path", str(killed_root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        ) as process:  # fmt: skip
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and process.poll() is None:
                if any(view_dir.glob(f"{STAGING_PREFIX}*/*/*")):
                    os.killpg(process.pid, signal.SIGKILL)
                    break
                time.sleep(0.01)
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        if any(view_dir.glob(f"{STAGING_PREFIX}*")):
            break
    assert any(view_dir.glob(f"{STAGING_PREFIX}*")), "the run was never killed while staging"
    rerun = run([*command, "--offline-path", str(killed_root)])
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    want = read_history(str(tmp_path / "clean"), "user_txn_stats")
    got = read_history(str(killed_root), "user_txn_stats")
    key = [(name, "ascending") for name in ("user_id", "event_timestamp", "sum_amount_600s")]
    assert got.sort_by(key).equals(want.sort_by(key))
    assert not list(view_dir.glob("_*"))
