"""``featureflow.training_set`` on a real repo: equal to Feast's ``get_historical_features``.

Feast can express point-in-time features when the entity timestamps are event
times: a FileSource FeatureView over the per-event history (computed here by
DuckDB, independently of the kernels) joined as of each timestamp returns the
features of the latest event at or before it. ``training_set`` computes them
from the raw events instead; both must agree.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from backfill.backfill_helpers import applied_repo, write_events
from duckdb_oracle import END_NS, FEATURE_NAMES, events_table, per_event_features
from pit_oracle import probe_features

from featureflow.cli import training_set as training_set_cli
from featureflow.events import sample
from featureflow.training import training_set

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVENTS = sample.generate(2500, users=30, seed=17, end_ns=END_NS, span_s=6 * 3600)


def _feast_history_store(tmp_path: Path) -> object:
    """A Feast repo whose FeatureView ``history`` serves DuckDB's per-event features."""
    from feast import Entity, FeatureStore, FeatureView, Field, FileSource
    from feast.repo_config import RepoConfig
    from feast.types import Float64, Int64
    from feast.value_type import ValueType

    table = events_table(EVENTS)
    history = per_event_features(table).drop_columns(["row_number"])
    stamps = table.column("event_ns").cast(pa.timestamp("ns", tz="UTC"))
    history = history.add_column(0, "user_id", table.column("user_id")).add_column(
        1, "event_timestamp", stamps.cast(pa.timestamp("us", tz="UTC"))
    )
    tmp_path.mkdir()
    path = tmp_path / "history.parquet"
    pq.write_table(history, path)
    store = FeatureStore(
        config=RepoConfig(
            project="pit_check",
            registry=str(tmp_path / "registry.db"),
            provider="local",
            online_store={"type": "sqlite", "path": str(tmp_path / "online.db")},
            offline_store={"type": "file"},
            entity_key_serialization_version=3,
        )
    )
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.INT64)
    view = FeatureView(
        name="history",
        entities=[user],
        ttl=timedelta(days=2),
        schema=[Field(name="user_id", dtype=Int64)]
        + [Field(name=n, dtype=Int64 if n.startswith("count") else Float64) for n in FEATURE_NAMES],
        source=FileSource(path=str(path), timestamp_field="event_timestamp"),
    )
    store.apply([user, view])
    return store


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example repo, applied, with EVENTS as its batch source."""
    target = applied_repo(tmp_path_factory.mktemp("training") / "feature_repo")
    write_events(target / "data" / "transactions.parquet", EVENTS)
    return target


def _entity_df(picks: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "user_id": EVENTS.user_id[picks],
            "event_timestamp": pd.to_datetime(EVENTS.event_ns[picks], utc=True),
            "label": np.arange(len(picks)),
        }
    )


def test_training_set_equals_feast_get_historical_features(repo: Path, tmp_path: Path) -> None:
    entity_df = _entity_df(np.random.default_rng(3).choice(len(EVENTS), 400, replace=False))

    feast_store = _feast_history_store(tmp_path / "feast")
    feast = feast_store.get_historical_features(  # type: ignore[attr-defined]
        entity_df=entity_df, features=[f"history:{name}" for name in FEATURE_NAMES]
    ).to_df()
    ours = training_set(entity_df, [f"user_txn_stats:{name}" for name in FEATURE_NAMES], repo=repo)
    assert list(ours["label"]) == list(entity_df["label"])  # the entity rows' order is kept
    feast = feast.sort_values("label").reset_index(drop=True)
    for name in FEATURE_NAMES:
        np.testing.assert_allclose(
            ours[name].to_numpy(dtype=float), feast[name].to_numpy(dtype=float),
            rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name,
        )  # fmt: skip

    # The CLI writes the same table from an entity file.
    entities_path = tmp_path / "entities.parquet"
    entity_df.to_parquet(entities_path)
    parser = argparse.ArgumentParser()
    training_set_cli.register(parser.add_subparsers())
    args = parser.parse_args(
        ["training-set", "--repo", str(repo), "--entities", str(entities_path),
         "--feature", "user_txn_stats:sum_amount_3600s",
         "--feature", "user_txn_stats:std_amount_600s",
         "--output", str(tmp_path / "out.parquet")]
    )  # fmt: skip
    assert args.handler(args) == 0
    written = pd.read_parquet(tmp_path / "out.parquet")
    columns = ["user_id", "event_timestamp", "label", "sum_amount_3600s", "std_amount_600s"]
    pd.testing.assert_frame_equal(written, ours[columns])


def test_training_set_at_any_timestamp_reads_the_batch_source_and_equals_duckdb(
    repo: Path,
) -> None:
    rng = np.random.default_rng(5)
    picks = rng.choice(len(EVENTS), 300, replace=False)
    # Between events, 1 ns around them, and for users without events.
    times = EVENTS.event_ns[picks] + rng.integers(-90 * 10**9, 90 * 10**9, 300)
    times[:100] = EVENTS.event_ns[picks[:100]] + rng.integers(-1, 2, 100)
    users = EVENTS.user_id[picks].copy()
    users[-10:] = 10_000
    entity_df = pd.DataFrame({"user_id": users, "event_timestamp": pd.to_datetime(times, utc=True)})
    ours = training_set(entity_df, [f"user_txn_stats:{name}" for name in FEATURE_NAMES], repo=repo)
    want = probe_features(events_table(EVENTS), pa.table({"user_id": users, "event_ns": times}))
    for name in FEATURE_NAMES:
        np.testing.assert_allclose(
            ours[name].to_numpy(dtype=float),
            np.array(want.column(name).to_pylist(), dtype=float),
            rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name,
        )  # fmt: skip
