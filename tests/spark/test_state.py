"""Versioned window state: what a micro-batch reads, writes and leaves behind."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from featureflow.errors import JobError
from featureflow.spark.state import StateStore


def _events(*ns: int) -> pa.Table:
    return pa.table({"user_id": [1] * len(ns), "event_ns": list(ns)})


def test_a_batch_reads_the_newest_version_before_it(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state"), partitions=2)
    store.check_layout()
    assert store.load_events(0, before_batch=0) is None
    store.save_events(0, 0, _events(1))
    store.save_events(0, 1, _events(1, 2))
    assert store.load_events(0, before_batch=1) == _events(1)
    assert store.load_events(0, before_batch=2) == _events(1, 2)
    assert store.load_events(0, before_batch=9) == _events(1, 2)
    assert store.load_events(1, before_batch=9) is None  # partitions are separate


def test_a_replayed_batch_sees_the_same_input_and_overwrites_its_output(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path), partitions=1)
    store.save_events(0, 4, _events(10))
    store.save_events(0, 5, _events(10, 11))  # the batch that crashed after writing
    assert store.load_events(0, before_batch=5) == _events(10)  # the replay's input
    store.save_events(0, 5, _events(10, 12))
    assert store.load_events(0, before_batch=6) == _events(10, 12)


def test_versions_older_than_the_previous_batch_are_deleted(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path), partitions=1)
    for batch in range(5):
        store.save_events(0, batch, _events(batch))
        store.save_max_event_ns(batch, batch * 100)
    files = sorted(p.name for p in tmp_path.rglob("batch-*"))
    assert files == ["batch-3.arrow", "batch-3.json", "batch-4.arrow", "batch-4.json"]
    assert store.load_max_event_ns(before_batch=4) == 300
    assert store.load_max_event_ns(before_batch=5) == 400
    assert store.load_max_event_ns(before_batch=3) is None
    assert not list(tmp_path.rglob("*.tmp"))


def test_restarting_with_another_partition_count_is_refused(tmp_path: Path) -> None:
    StateStore(str(tmp_path), partitions=4).save_events(0, 0, _events(1))
    with pytest.raises(JobError, match="--partitions 4"):
        StateStore(str(tmp_path), partitions=2).check_layout()
    StateStore(str(tmp_path), partitions=4).check_layout()


def test_uris_work_like_paths(tmp_path: Path) -> None:
    store = StateStore(f"file://{tmp_path}", partitions=1)
    store.save_events(0, 0, _events(7))
    assert StateStore(str(tmp_path), partitions=1).load_events(0, before_batch=1) == _events(7)


def test_tiles_are_versioned_apart_from_the_events(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path), partitions=1)
    tiles = pa.table({"user_id": [1], "tile_start_ns": [300]})
    store.save_tiles(0, 3, tiles)
    store.save_events(0, 3, _events(5))
    assert store.load_tiles(0, before_batch=4) == tiles
    assert store.load_events(0, before_batch=4) == _events(5)  # not the tile file
    assert store.load_tiles(0, before_batch=3) is None
    for batch in (4, 5, 6):
        store.save_tiles(0, batch, tiles)
    assert sorted(p.name for p in tmp_path.rglob("tiles/batch-*")) == [
        "batch-5.arrow",
        "batch-6.arrow",
    ]
