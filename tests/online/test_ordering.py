"""Older rows never win; replays change nothing; within a table the latest row wins.

An oracle keeps, per entity, the row with the latest event time over every
batch written so far; after writing the batches in any order the store must
read back exactly the oracle's values. Event times are whole distinct seconds
per entity, so SQLite (which keeps seconds) and Redis decide alike.
"""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from feast import FeatureStore
from feast.types import Float64, Int64
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from online_helpers import (
    PROJECT,
    VIEW,
    read,
    redis_client,
    redis_store,
    sqlite_path,
    sqlite_store,
)

from featureflow.online import write

FEATURES = {"amount": Float64, "count": Int64}
BASE_S = 1_700_000_000
IDS = list(range(6))


def _table(rows: list[tuple[int, int, float]]) -> pa.Table:
    """rows: (uid, event second offset, amount); count mirrors the offset."""
    return pa.table({
        "uid": pa.array([r[0] for r in rows], pa.int64()),
        "ts": pa.array([(BASE_S + r[1]) * 1_000_000 for r in rows], pa.timestamp("us", "UTC")),
        "amount": pa.array([r[2] for r in rows], pa.float64()),
        "count": pa.array([r[1] for r in rows], pa.int64()),
    })


# each (uid, second) at most once, so "latest" is never a tie
_rows = st.lists(
    st.tuples(st.sampled_from(IDS), st.integers(0, 50), st.floats(-1e6, 1e6)),
    min_size=1, max_size=30, unique_by=lambda r: (r[0], r[1]),
)
_SETTINGS = settings(max_examples=12, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          redis_url: str) -> FeatureStore:
    root = tmp_path_factory.mktemp(f"order-{request.param}")
    if request.param == "sqlite":
        return sqlite_store(root, features=FEATURES)
    return redis_store(root, redis_url, features=FEATURES)


def _clear(store: FeatureStore) -> None:
    """Empty the view's online data between examples."""
    if store.config.online_store.type == "redis":
        redis_client(store).flushdb()
    else:
        with sqlite3.connect(sqlite_path(store)) as conn:
            conn.execute(f"DELETE FROM {PROJECT}_{VIEW}")


def _latest(rows: list[tuple[int, int, float]]) -> dict[int, tuple[int, float]]:
    latest: dict[int, tuple[int, float]] = {}
    for uid, second, amount in rows:
        if uid not in latest or second > latest[uid][0]:
            latest[uid] = (second, amount)
    return latest


def _oracle(rows: list[tuple[int, int, float]]) -> dict[str, list[Any]]:
    latest = _latest(rows)
    return {
        "uid": IDS,
        "amount": [latest[i][1] if i in latest else None for i in IDS],
        "count": [latest[i][0] if i in latest else None for i in IDS],
    }


@_SETTINGS
@given(rows=_rows, cuts=st.lists(st.integers(0, 30), max_size=3), data=st.data())
def test_latest_event_wins_whatever_the_batch_order(store: FeatureStore, rows, cuts, data) -> None:  # type: ignore[no-untyped-def]
    _clear(store)
    bounds = sorted({0, len(rows), *[min(c, len(rows)) for c in cuts]})
    batches = [rows[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    order = data.draw(st.permutations(range(len(batches))))
    for i in order:
        write(store, VIEW, _table(batches[i]))
    assert read(store, IDS, list(FEATURES)) == _oracle(rows)

    # a replay of every batch, in any order, changes nothing: only rows of the stored
    # (latest) event time are written again, with the same values
    latest = {(uid, second) for uid, (second, _) in _latest(rows).items()}
    for i in data.draw(st.permutations(range(len(batches)))):
        stats = write(store, VIEW, _table(batches[i]))
        best = {uid: max(s for u, s, _ in batches[i] if u == uid) for uid, _, _ in batches[i]}
        assert stats.written == sum((uid, second) in latest for uid, second in best.items())
    assert read(store, IDS, list(FEATURES)) == _oracle(rows)


def test_older_row_is_skipped_and_counted(store: FeatureStore) -> None:
    _clear(store)
    assert write(store, VIEW, _table([(1, 10, 1.0), (2, 10, 2.0)])).written == 2
    stats = write(store, VIEW, _table([(1, 5, 9.0), (2, 20, 8.0), (3, 1, 7.0)]))
    assert (stats.written, stats.skipped, stats.entities) == (2, 1, 3)
    assert read(store, [1, 2, 3], ["amount"])["amount"] == [1.0, 8.0, 7.0]


def test_within_one_table_the_latest_row_per_entity_wins(store: FeatureStore) -> None:
    _clear(store)
    stats = write(store, VIEW, _table([(1, 30, 3.0), (1, 10, 1.0), (1, 20, 2.0)]))
    assert (stats.rows, stats.entities, stats.written) == (3, 1, 1)
    assert read(store, [1], ["amount", "count"]) == {"uid": [1], "amount": [3.0], "count": [30]}


def test_equal_event_time_is_replaced_by_the_later_write(store: FeatureStore) -> None:
    """The stream job rewrites an entity's row for the same latest event when a later
    micro-batch brings an older event into its windows: the later write wins on both
    stores, and Feast reads the new values."""
    _clear(store)
    write(store, VIEW, _table([(1, 10, 1.0), (2, 10, 2.0)]))
    stats = write(store, VIEW, _table([(1, 10, 5.0), (2, 9, 9.0)]))
    assert (stats.written, stats.skipped) == (1, 1)
    assert read(store, [1, 2], ["amount"])["amount"] == [5.0, 2.0]


def test_same_second_rule_per_store(tmp_path: Path, redis_url: str) -> None:
    """SQLite keeps whole seconds, so a later write within the stored second
    replaces it; Redis keeps microseconds, so there an earlier time in the same
    second is older and changes nothing."""
    sq = sqlite_store(tmp_path / "s", features=FEATURES)
    rd = redis_store(tmp_path / "r", redis_url, features=FEATURES)
    first = _table([(1, 10, 1.0)])
    later = first.set_column(1, "ts", pa.array([(BASE_S + 10) * 1_000_000 + 500_000],
                                               pa.timestamp("us", "UTC")))
    later = later.set_column(2, "amount", pa.array([2.0]))
    for store, expected in ((sq, 2.0), (rd, 2.0)):
        write(store, VIEW, first)
        write(store, VIEW, later)
        assert read(store, [1], ["amount"])["amount"] == [expected]
    # the first row again: same second as stored on SQLite (rewritten), older on Redis
    write(sq, VIEW, first)
    write(rd, VIEW, first)
    assert read(sq, [1], ["amount"])["amount"] == [1.0]
    assert read(rd, [1], ["amount"])["amount"] == [2.0]
