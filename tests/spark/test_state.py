"""Versioned window state: what a micro-batch reads, writes and leaves behind."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from featureflow import ops
from featureflow.errors import JobError, StateError
from featureflow.spark import state as state_module
from featureflow.spark.state import StateStore, drop_resident
from featureflow.spark.watermarks import PartitionWatermarks


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


def _watermarks(max_ns: int) -> PartitionWatermarks:
    return PartitionWatermarks(10).advance({0: max_ns}, clock_ns=1, idle_timeout_ns=100)


def test_versions_older_than_the_newest_before_the_batch_are_deleted(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path), partitions=1)
    for batch in range(5):
        store.save_events(0, batch, _events(batch))
        store.save_watermarks(batch, _watermarks(batch * 100))
    files = sorted(p.name for p in tmp_path.rglob("batch-*"))
    assert files == ["batch-3.arrow", "batch-3.json", "batch-4.arrow", "batch-4.json"]
    assert store.load_watermarks(before_batch=4, delay_ns=10).watermark_ns == 300 - 10
    assert store.load_watermarks(before_batch=5, delay_ns=10).watermark_ns == 400 - 10
    assert store.load_watermarks(before_batch=3, delay_ns=10) == PartitionWatermarks(10)
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_partition_that_skipped_batches_keeps_the_version_its_replay_reads(
    tmp_path: Path,
) -> None:
    """Version 3, then nothing until batch 7: saving 7 must keep 3, since a crash before
    Spark commits 7 replays it from 3 (deleting versions below 7 - 1 lost it)."""
    store = StateStore(str(tmp_path), partitions=1)
    store.save_events(0, 3, _events(3))
    store.save_events(0, 7, _events(3, 7))
    assert store.load_events(0, before_batch=7) == _events(3)  # the replay of 7
    store.save_events(0, 7, _events(3, 7))  # the replay rewrites 7 ...
    assert store.load_events(0, before_batch=7) == _events(3)  # ... and 3 is still there
    store.save_events(0, 9, _events(3, 7, 9))  # Spark committed 7 before starting 9
    assert sorted(p.name for p in tmp_path.rglob("batch-*")) == ["batch-7.arrow", "batch-9.arrow"]
    assert store.load_events(0, before_batch=9) == _events(3, 7)


def test_a_truncated_state_file_is_an_error_naming_it(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path), partitions=1)
    store.save_events(0, 2, _events(1, 2, 3))
    (path,) = tmp_path.rglob("batch-2.arrow")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(StateError, match=re.escape(str(path))) as raised:
        store.load_events(0, before_batch=3)
    assert "new --checkpoint" in str(raised.value)
    store.save_watermarks(2, _watermarks(5))
    (marks,) = tmp_path.rglob("watermarks/batch-2.json")
    marks.write_text('{"delay_ns": 10, "watermark')
    with pytest.raises(StateError, match=re.escape(str(marks))):
        store.load_watermarks(before_batch=3, delay_ns=10)


def test_a_replayed_batch_keeps_the_clock_of_its_first_run(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path), partitions=1)
    assert store.batch_clock_ns(4, now_ns=1_000) == 1_000
    assert store.batch_clock_ns(4, now_ns=9_000) == 1_000  # the replay of 4
    assert store.batch_clock_ns(5, now_ns=9_000) == 9_000
    assert sorted(p.name for p in tmp_path.rglob("clock/batch-*")) == [
        "batch-4.json", "batch-5.json",
    ]  # fmt: skip


def test_restarting_with_another_partition_count_is_refused(tmp_path: Path) -> None:
    StateStore(str(tmp_path), partitions=4).save_events(0, 0, _events(1))
    with pytest.raises(JobError, match="--partitions 4"):
        StateStore(str(tmp_path), partitions=2).check_layout()
    StateStore(str(tmp_path), partitions=4).check_layout()


def test_unset_partitions_are_the_checkpoints_else_four_per_core(tmp_path: Path) -> None:
    from featureflow.spark.pipeline import TASKS_PER_CORE, shuffle_partitions

    roots = [str(tmp_path / "rolling"), str(tmp_path / "sessions")]
    assert shuffle_partitions(roots, cores=2) == TASKS_PER_CORE * 2 == 8
    assert shuffle_partitions(roots, cores=0) == TASKS_PER_CORE  # unknown cores: one
    # one view's state written with 4 (say, before the default changed): both views keep 4
    StateStore(roots[0], partitions=4).save_events(0, 0, _events(1))
    assert shuffle_partitions(roots, cores=2) == 4
    assert shuffle_partitions([f"file://{roots[0]}", roots[1]], cores=16) == 4
    StateStore(roots[1], partitions=3).save_events(0, 0, _events(1))
    chosen = shuffle_partitions(roots, cores=2)
    with pytest.raises(JobError, match="written with"):  # two counts: one view is refused
        for root in roots:
            StateStore(root, partitions=chosen).check_layout()


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


def test_a_worker_that_holds_the_version_reads_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading the version this worker saved is one directory listing; after
    drop_resident (or on another worker) the same version comes from disk."""
    store = StateStore(str(tmp_path), partitions=1)
    store.save_events(0, 3, _events(1, 2))
    opened: list[object] = []
    real_open = state_module.ipc.open_file
    monkeypatch.setattr(state_module.ipc, "open_file", lambda source: opened.append(source))
    assert store.load_events(0, before_batch=4) == _events(1, 2)
    assert not opened
    monkeypatch.setattr(state_module.ipc, "open_file", real_open)
    drop_resident()
    assert store.load_events(0, before_batch=4) == _events(1, 2)  # read from disk


def test_a_version_rewritten_elsewhere_is_read_again(tmp_path: Path) -> None:
    """The held version is only used while the listing shows the very file it came
    from: one that another worker rewrote (or storage damaged) is read again."""
    store = StateStore(str(tmp_path), partitions=1)
    store.save_events(0, 3, _events(1, 2))
    (path,) = tmp_path.rglob("batch-3.arrow")
    elsewhere = _events(1, 2, 3)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, elsewhere.schema) as writer:
        writer.write_table(elsewhere)
    assert store.load_events(0, before_batch=4) == elsewhere


def test_frame_states_are_held_with_their_version_and_only_while_resident(
    tmp_path: Path,
) -> None:
    """The frames a batch saved beside its state come back with that very table, and
    with nothing else: not with a version rebuilt from files (another worker, a
    restart), a replaced version, or a table that only equals it."""
    store = StateStore(str(tmp_path), partitions=1)
    frames = {"amount": ops.FrameStates(np.array([1]), np.zeros((1, 1, 1), np.int64), ())}
    store.save_events(0, 0, _events(1), frames=frames)
    held = store.load_events(0, before_batch=1)
    assert held is not None
    assert store.take_frames(0, _events(1)) is None  # equal, but not the table held
    assert store.take_frames(0, held) is frames
    assert store.take_frames(0, held) is None  # taken: a failed batch leaves none behind
    assert store.load_events(0, before_batch=1) is held  # the table itself stays held
    drop_resident()
    rebuilt = store.load_events(0, before_batch=1)
    assert rebuilt is not None and store.take_frames(0, rebuilt) is None
    store.save_events(0, 1, _events(2), frames=frames)
    store.save_events(0, 2, _events(3))  # the next batch kept none
    newest = store.load_events(0, before_batch=3)
    assert newest is not None and store.take_frames(0, newest) is None


def test_a_worker_forgets_the_versions_another_worker_replaced(tmp_path: Path) -> None:
    """Two workers take turns on a partition: the one that ran batch 3 holds version 3,
    the other saves version 4. After its next task the first worker no longer holds
    version 3 (nobody loads it from there again), keeps the partitions whose newest
    version it holds, and leaves alone what this batch wrote. Its next load of the
    partition is version 4, read from disk."""
    store = StateStore(str(tmp_path), partitions=2)
    drop_resident()
    store.save_events(0, 3, _events(1, 2))
    store.save_events(1, 3, _events(7))
    first_worker = dict(state_module._RESIDENT)
    store.save_events(0, 4, _events(1, 2, 3))  # the other worker's task of batch 4
    store.save_events(1, 5, _events(7, 8))  # this batch's own save (batch 5)
    state_module._RESIDENT.clear()
    state_module._RESIDENT.update(first_worker)
    [part_1] = [key for key in first_worker if key[1].endswith("part-00001")]
    state_module._RESIDENT[part_1] = state_module._RESIDENT[part_1]._replace(version=(5, 0))
    assert state_module.drop_superseded(5) == 1
    assert [key[1][-10:] for key in state_module._RESIDENT] == ["part-00001"]
    assert store.load_events(0, before_batch=5) == _events(1, 2, 3)


def test_a_held_version_still_the_newest_stays_resident(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path), partitions=1)
    drop_resident()
    store.save_events(0, 2, _events(5))
    assert state_module.drop_superseded(9) == 0
    assert len(state_module._RESIDENT) == 1
    for path in tmp_path.rglob("batch-2.arrow"):
        path.unlink()  # storage lost the file: the held copy defines nothing any more
    assert state_module.drop_superseded(9) == 1
    assert not state_module._RESIDENT


def test_state_records_how_its_entities_were_placed_and_refuses_another_way(
    tmp_path: Path,
) -> None:
    events = _events(1)
    keyed = StateStore(str(tmp_path / "keyed"), 4)
    keyed.check_partitioning("kafka-crc32")  # new state: the scheme is recorded
    keyed.save_events(0, 0, events)
    StateStore(str(tmp_path / "keyed"), 4).check_partitioning("kafka-crc32")
    with pytest.raises(JobError, match="run the job with --keyed-topic crc32"):
        StateStore(str(tmp_path / "keyed"), 4).check_partitioning("entity-hash")
    # state written before schemes were recorded was placed by the entity's hash
    legacy = StateStore(str(tmp_path / "legacy"), 4)
    legacy.save_events(0, 0, events)
    (tmp_path / "legacy" / state_module.PARTITIONING_FILE).unlink(missing_ok=True)
    legacy.check_partitioning("entity-hash")
    with pytest.raises(JobError, match="run the job without --keyed-topic"):
        legacy.check_partitioning("kafka-murmur2")
    # a keyed topic's Kafka partitions cut into slices: the slices are part of the scheme
    sliced = StateStore(str(tmp_path / "sliced"), 8)
    sliced.check_partitioning("kafka-crc32/2-slices")
    sliced.save_events(0, 0, events)
    assert state_module.recorded_partitioning(str(tmp_path / "sliced")) == "kafka-crc32/2-slices"
    with pytest.raises(JobError, match="run the job with --keyed-topic crc32 --keyed-slices 2,"):
        StateStore(str(tmp_path / "sliced"), 8).check_partitioning("kafka-crc32/4-slices")
    with pytest.raises(JobError, match="run the job with --keyed-topic crc32 --keyed-slices 2,"):
        StateStore(str(tmp_path / "sliced"), 8).check_partitioning("kafka-crc32")
    assert state_module.recorded_partitioning(str(tmp_path / "new")) is None
    assert state_module.recorded_partitioning(str(tmp_path / "legacy")) == "entity-hash"
