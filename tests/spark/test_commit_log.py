"""settled_batch reads Spark's offsets and commits logs (real directory layouts)."""

from __future__ import annotations

from pathlib import Path

from featureflow.spark.commit_log import settled_batch


def _log(root: Path, kind: str, *ids: int) -> None:
    (root / kind).mkdir(parents=True, exist_ok=True)
    for batch in ids:
        (root / kind / str(batch)).write_text("v1\n")
        (root / kind / f".{batch}.crc").write_bytes(b"crc")


def test_nothing_committed_is_not_settled(tmp_path: Path) -> None:
    assert settled_batch(str(tmp_path / "absent")) is None
    _log(tmp_path, "offsets", 0)
    assert settled_batch(str(tmp_path)) is None


def test_the_newest_commit_is_settled_when_nothing_awaits_a_rerun(tmp_path: Path) -> None:
    _log(tmp_path, "offsets", 7, 8, 9, 10)
    _log(tmp_path, "commits", 7, 8, 9, 10)
    assert settled_batch(str(tmp_path)) == 10
    assert settled_batch(f"{tmp_path}/") == 10


def test_a_planned_uncommitted_batch_means_a_rerun_comes(tmp_path: Path) -> None:
    _log(tmp_path, "offsets", 9, 10, 11)
    _log(tmp_path, "commits", 9, 10)
    assert settled_batch(str(tmp_path)) is None
