"""Shared by the backfill tests: an applied copy of the example repo, events as Parquet, checks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from duckdb_oracle import FEATURE_NAMES, events_table, per_event_features

from featureflow.events import sample

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(command: list[str], timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def applied_repo(target: Path, topic: str = "transactions") -> Path:
    """A private copy of the example repo (reading ``topic``), applied through the schema gate."""
    shutil.copytree(
        REPO_ROOT / "feature_repo", target, ignore=shutil.ignore_patterns("data", "__pycache__")
    )
    (target / "data").mkdir()
    definitions = target / "features.py"
    definitions.write_text(
        definitions.read_text().replace('topic="transactions"', f'topic="{topic}"')
    )
    applied = run([str(BIN / "featureflow"), "apply", "--repo", str(target),
                   "--schemas", str(REPO_ROOT / "schemas")])  # fmt: skip
    assert applied.returncode == 0, applied.stdout + applied.stderr
    return target


def write_events(path: Path, events: sample.SampleEvents, bad_rows: int = 0) -> None:
    """The events as the batch source holds them; ``bad_rows`` extra rows lack a key or a time."""
    table = events_table(events)
    columns = {
        "user_id": table.column("user_id"),
        "amount": table.column("amount"),
        "merchant": pa.array(events.merchant.tolist(), pa.string()),
        "event_timestamp": table.column("event_ns")
        .cast(pa.timestamp("ns", tz="UTC"))
        .cast(pa.timestamp("us", tz="UTC")),
    }
    out = pa.table(columns)
    if bad_rows:
        stamp = out.column("event_timestamp")[0]
        bad = pa.table(
            {
                "user_id": pa.array([None if i % 2 == 0 else 1 for i in range(bad_rows)],
                                    pa.int64()),
                "amount": pa.array([1.0] * bad_rows),
                "merchant": pa.array(["x"] * bad_rows),
                "event_timestamp": pa.array(
                    [stamp.as_py() if i % 2 == 0 else None for i in range(bad_rows)],
                    out.schema.field("event_timestamp").type,
                ),
            }
        )  # fmt: skip
        out = pa.concat_tables([out, bad])
    pq.write_table(out, path)


def history_ns(history: pa.Table, timestamp_field: str = "event_timestamp") -> np.ndarray:
    return history.column(timestamp_field).cast(pa.int64()).to_numpy() * 1000


def assert_history_equals_duckdb(
    history: pa.Table, events: sample.SampleEvents, start_ns: int, end_ns: int
) -> None:
    """Per event of ``[start_ns, end_ns)``: the features equal DuckDB over ALL the events."""
    oracle = per_event_features(events_table(events))
    inside = (events.event_ns >= start_ns) & (events.event_ns < end_ns)
    got_ns = history_ns(history)
    assert history.num_rows == int(inside.sum())
    got_order = np.lexsort((got_ns, history.column("user_id").to_numpy()))
    want_index = np.flatnonzero(inside)
    want_order = want_index[np.lexsort((events.event_ns[want_index], events.user_id[want_index]))]
    np.testing.assert_array_equal(got_ns[got_order], events.event_ns[want_order])
    np.testing.assert_array_equal(
        history.column("user_id").to_numpy()[got_order], events.user_id[want_order]
    )
    for name in FEATURE_NAMES:
        got = np.array(history.column(name).to_pylist(), dtype=float)[got_order]
        want = np.array(oracle.column(name).to_pylist(), dtype=float)[want_order]
        # Ties (same user and time) have equal features, so any order among them matches.
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name)
