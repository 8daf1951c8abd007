"""What the job writes is its owner's only (by default), and each writer has its own temp files."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from featureflow.errors import JobError
from featureflow.spark import file_modes
from featureflow.spark import state as state_module
from featureflow.spark.offline_sink import OfflineFeatureLog, read_history
from featureflow.spark.state import StateStore
from featureflow.spark.watermarks import PartitionWatermarks


@pytest.fixture(autouse=True)
def _permissive_umask(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The usual umask (022): without featureflow's modes, files would be world-readable."""
    monkeypatch.delenv(file_modes.ENV, raising=False)
    before = os.umask(0o022)
    yield
    os.umask(before)


def _modes(root: Path) -> dict[str, int]:
    """Mode of every file and directory under ``root`` (``root`` excluded), by relative path."""
    return {
        str(path.relative_to(root)): stat.S_IMODE(path.stat().st_mode)
        for path in root.rglob("*")
    }


def _write_some_state(root: Path) -> None:
    store = StateStore(str(root), partitions=2)
    store.check_layout()
    store.save_events(0, 0, pa.table({"user_id": [1], "event_ns": [5]}))
    store.save_tiles(1, 0, pa.table({"user_id": [1]}))
    store.save_watermarks(0, PartitionWatermarks(10))
    store.batch_clock_ns(0, 123)
    OfflineFeatureLog(str(root / "offline"), "view").write(0, 3, pa.table({"user_id": [1]}))


def test_state_and_offline_files_are_owner_only_by_default(tmp_path: Path) -> None:
    _write_some_state(tmp_path / "job")
    modes = _modes(tmp_path / "job")
    assert len(modes) >= 12
    files = {p: m for p, m in modes.items() if (tmp_path / "job" / p).is_file()}
    dirs = {p: m for p, m in modes.items() if (tmp_path / "job" / p).is_dir()}
    assert set(files.values()) == {0o600}, files
    assert set(dirs.values()) == {0o700}, dirs
    assert stat.S_IMODE((tmp_path / "job").stat().st_mode) == 0o700


def test_the_mode_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(file_modes.ENV, "0640")
    _write_some_state(tmp_path / "job")
    modes = _modes(tmp_path / "job")
    kinds = {(tmp_path / "job" / p).is_dir(): m for p, m in modes.items()}
    assert set(modes.values()) == {0o640, 0o750}
    assert kinds == {False: 0o640, True: 0o750}


@pytest.mark.parametrize("text", ["rw", "0800", "1777", "0400", "0200", "-1"])
def test_a_mode_that_is_not_octal_or_locks_the_owner_out_is_refused(text: str) -> None:
    with pytest.raises(JobError, match="--file-mode"):
        file_modes.parse_mode(text, "--file-mode")


def test_directory_modes_and_spark_settings_follow_the_file_mode() -> None:
    assert file_modes.dir_mode(0o600) == 0o700
    assert file_modes.dir_mode(0o640) == 0o750
    assert file_modes.dir_mode(0o644) == 0o755
    assert file_modes.spark_conf(0o600) == {
        "spark.executorEnv.FEATUREFLOW_FILE_MODE": "0600",
        "spark.hadoop.fs.permissions.umask-mode": "077",
    }
    assert file_modes.spark_conf(0o640)["spark.hadoop.fs.permissions.umask-mode"] == "027"


def test_restrict_changes_existing_files_only(tmp_path: Path) -> None:
    database = tmp_path / "online.db"
    database.write_bytes(b"")
    database.chmod(0o644)
    file_modes.restrict([str(database), str(tmp_path / "online.db-wal")])
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    assert not (tmp_path / "online.db-wal").exists()


def test_each_writer_has_its_own_temporary_name(tmp_path: Path) -> None:
    final = f"{tmp_path}/batch-3.arrow"
    names = {state_module.temporary_path(final) for _ in range(100)}
    assert len(names) == 100
    for name in names:
        base = Path(name).name
        assert base.startswith(".batch-3.arrow.") and base.endswith(".tmp")
        assert f".{os.getpid()}-" in base
        assert state_module._TEMPORARY.match(base)
        assert not state_module._VERSION.search(base)  # never read as a version
    # Created exclusively: a name taken already is refused, never shared.
    taken = state_module.create_temporary(pafs.LocalFileSystem(), final)
    with pytest.raises(FileExistsError):
        file_modes.create_file(pafs.LocalFileSystem(), taken)


def test_a_killed_writers_leftover_is_ignored_then_removed_when_old(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state"), partitions=1)
    store.save_events(0, 0, pa.table({"user_id": [1], "event_ns": [5]}))
    directory = Path(store._partition_dir(0))
    fresh = directory / f".batch-1.arrow.4242-{'a' * 12}.tmp"
    old = directory / f".batch-0.arrow.4243-{'b' * 12}.tmp"
    for leftover in (fresh, old):
        leftover.write_bytes(b"half a file")
    os.utime(old, ns=(0, 0))
    store.save_events(0, 1, pa.table({"user_id": [1], "event_ns": [6]}))
    assert store.load_events(0, before_batch=2) == pa.table({"user_id": [1], "event_ns": [6]})
    assert fresh.exists()  # could be a live writer's
    assert not old.exists()


def test_offline_readers_skip_a_leftover_temporary_file(tmp_path: Path) -> None:
    log = OfflineFeatureLog(str(tmp_path / "offline"), "view")
    log.write(0, 0, pa.table({"user_id": [1]}))
    leftover = Path(state_module.temporary_path(f"{log.batch_dir(0)}/part-00001.parquet"))
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"user_id": [2]}), leftover)  # whole, but never moved
    assert read_history(str(tmp_path / "offline"), "view").column("user_id").to_pylist() == [1]


PROPAGATE = """
import os
from featureflow.spark import file_modes
from featureflow.spark.session import build_session
os.environ[file_modes.ENV] = "0640"  # as the job's --file-mode sets it, after the JVM started
spark = build_session("file-mode-test")
seen = spark.sparkContext.parallelize([0], 1).map(lambda _: os.environ.get(file_modes.ENV))
print("WORKER", seen.collect()[0], spark.conf.get("spark.hadoop.fs.permissions.umask-mode"))
spark.stop()
"""


@pytest.mark.integration
@pytest.mark.slow
def test_the_mode_set_in_the_driver_reaches_the_python_workers(tmp_path: Path) -> None:
    """Under spark-submit the workers inherit the JVM's environment, not the driver's:
    the mode travels as spark.executorEnv."""
    import subprocess
    import sys

    script = tmp_path / "propagate.py"
    script.write_text(PROPAGATE)
    env = {k: v for k, v in os.environ.items() if k != file_modes.ENV}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]", str(script)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WORKER 0640 027" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
