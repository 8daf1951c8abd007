"""Spark's checkpoint logs on the local filesystem are written by renaming: when that
manager is chosen, and that a query's logs through it stay owner-only and restartable."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from featureflow.spark.session import (
    CHECKPOINT_FILE_MANAGER,
    RENAMING_FILE_MANAGER,
    use_renaming_checkpoint_files,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def fresh_conf(spark: Any) -> Iterator[Any]:
    """The shared session with no checkpoint manager set, and none left set after."""
    spark.conf.unset(CHECKPOINT_FILE_MANAGER)
    yield spark
    spark.conf.unset(CHECKPOINT_FILE_MANAGER)


@pytest.mark.parametrize("local", ["{tmp}/checkpoint", "file://{tmp}/checkpoint"])
def test_a_local_checkpoint_gets_the_renaming_manager(
    fresh_conf: Any, tmp_path: Path, local: str
) -> None:
    assert use_renaming_checkpoint_files(fresh_conf, local.format(tmp=tmp_path))
    assert fresh_conf.conf.get(CHECKPOINT_FILE_MANAGER) == RENAMING_FILE_MANAGER


def test_other_filesystems_and_an_explicit_manager_keep_theirs(fresh_conf: Any) -> None:
    for remote in ("hdfs://namenode:8020/ckpt", "s3a://bucket/ckpt"):
        assert not use_renaming_checkpoint_files(fresh_conf, remote)
        assert fresh_conf.conf.get(CHECKPOINT_FILE_MANAGER, None) is None
    chosen = "org.example.MyCheckpointFileManager"
    fresh_conf.conf.set(CHECKPOINT_FILE_MANAGER, chosen)
    assert not use_renaming_checkpoint_files(fresh_conf, "/tmp/ckpt")
    assert fresh_conf.conf.get(CHECKPOINT_FILE_MANAGER) == chosen


def _run_batches(spark: Any, checkpoint: Path) -> list[int]:
    """The batch ids a query over a directory of JSON files runs, to the end of them."""
    seen: list[int] = []
    query = (
        spark.readStream.schema("n long").json(str(checkpoint.parent / "in"))
        .writeStream.foreachBatch(lambda frame, batch_id: seen.append(batch_id))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )  # fmt: skip
    query.awaitTermination(120)
    assert query.exception() is None
    return seen


def test_logs_written_by_renaming_are_owner_only_and_restart(
    fresh_conf: Any, tmp_path: Path
) -> None:
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text('{"n": 1}\n')
    checkpoint = tmp_path / "checkpoint"
    assert use_renaming_checkpoint_files(fresh_conf, str(checkpoint))
    assert _run_batches(fresh_conf, checkpoint) == [0]
    (source / "b.json").write_text('{"n": 2}\n')
    # a restart reads the logs the renaming manager wrote and goes on after them
    assert _run_batches(fresh_conf, checkpoint) == [1]
    logs = [path for name in ("offsets", "commits") for path in (checkpoint / name).iterdir()]
    assert {path.name for path in logs} >= {"0", "1"}
    assert not [path.name for path in logs if ".tmp" in path.name]  # every rename done
    loose = {path.name: oct(stat.S_IMODE(path.stat().st_mode)) for path in logs
             if stat.S_IMODE(path.stat().st_mode) & 0o077}  # fmt: skip
    assert not loose, loose
