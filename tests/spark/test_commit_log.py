"""settled_batch reads Spark's offsets and commits logs (real directory layouts)."""

from __future__ import annotations

from pathlib import Path

from featureflow.spark.commit_log import batch_records, settled_batch


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


_METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1796189914549,"conf":{"a":"b"}}'


def _offsets(root: Path, batch: int, *sources: str) -> None:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch)).write_text("\n".join(["v1", _METADATA, *sources]))


def test_a_batch_reads_its_end_offsets_minus_the_previous_batchs(tmp_path: Path) -> None:
    _offsets(tmp_path, 3, '{"tx":{"0":288,"1":508}}')
    _offsets(tmp_path, 4, '{"tx":{"1":700,"0":300}}')
    assert batch_records(str(tmp_path), 4) == 12 + 192
    _offsets(tmp_path, 5, '{"tx":{"1":700,"0":300}}')
    assert batch_records(str(tmp_path), 5) == 0


def test_unknown_counts_are_none(tmp_path: Path) -> None:
    _offsets(tmp_path, 0, '{"tx":{"0":10}}')
    assert batch_records(str(tmp_path), 0) is None  # starts at the topic's earliest offset
    assert batch_records(str(tmp_path), 2) is None  # no entry
    _offsets(tmp_path, 1, '{"tx":{"0":20,"1":5}}')
    assert batch_records(str(tmp_path), 1) is None  # partition 1 is new
    _offsets(tmp_path, 2, '{"tx":{"0":3,"1":6}}')
    assert batch_records(str(tmp_path), 2) is None  # went back: the topic was recreated
    _offsets(tmp_path, 3, "{not json")
    assert batch_records(str(tmp_path), 3) is None
    assert batch_records(str(tmp_path / "absent"), 3) is None
