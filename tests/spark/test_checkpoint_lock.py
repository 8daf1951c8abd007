"""The checkpoint lock: live holders refuse, dead ones (SIGKILL, reused pid, silent host) don't."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from featureflow.errors import CheckpointLockedError, JobError
from featureflow.spark import checkpoint_lock as cl
from featureflow.spark.checkpoint_lock import CheckpointLock, LockHolder

HOLD = """
import sys, time
from featureflow.spark.checkpoint_lock import CheckpointLock
lock = CheckpointLock.acquire(sys.argv[1], lease_ns=int(float(sys.argv[2]) * 1e9),
                              argv=["realtime.py", "--checkpoint", sys.argv[1]])
print("locked", flush=True)
time.sleep(120)
"""


def _holder_process(checkpoint: Path, lease_s: float = 60.0) -> subprocess.Popen[str]:
    """A Python process that takes the lock and sleeps (returns once it holds it)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(checkpoint), str(lease_s)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "locked"
    return process


def _record(checkpoint: Path) -> LockHolder:
    return LockHolder.from_bytes((checkpoint / cl.LOCK_NAME).read_bytes())


def _write_record(checkpoint: Path, holder: LockHolder) -> None:
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / cl.LOCK_NAME).write_bytes(holder.to_bytes())


def test_a_lock_held_by_a_live_process_refuses_naming_the_holder(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    holder = _holder_process(checkpoint)
    try:
        with pytest.raises(CheckpointLockedError) as refused:
            CheckpointLock.acquire(str(checkpoint))
        message = str(refused.value)
        assert f"pid {holder.pid} on host {socket.gethostname()}" in message
        assert f"realtime.py --checkpoint {checkpoint}" in message
        assert re.search(r"started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", message), message
        assert refused.value.exit_status == 75
        assert isinstance(refused.value.holder, LockHolder)
        assert refused.value.holder.pid == holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_left_by_a_sigkilled_process_is_taken_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checkpoint = tmp_path / "checkpoint"
    holder = _holder_process(checkpoint)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert (checkpoint / cl.LOCK_NAME).exists()  # SIGKILL left it behind
    with caplog.at_level(logging.WARNING), CheckpointLock.acquire(str(checkpoint)) as lock:
        assert _record(checkpoint).pid == os.getpid() == lock.holder.pid
    assert f"its pid {holder.pid} is gone" in caplog.text
    assert not (checkpoint / cl.LOCK_NAME).exists()  # released


def test_taking_over_makes_what_the_killed_job_left_owner_only(tmp_path: Path) -> None:
    """Hadoop's local filesystem sets a file's mode after creating it under the umask: a
    job killed in between leaves e.g. Spark's offsets ``.tmp`` file at 0644."""
    checkpoint = tmp_path / "checkpoint"
    holder = _holder_process(checkpoint)
    offsets = checkpoint / "view" / "offsets"
    offsets.mkdir(parents=True, mode=0o700)
    left = offsets / ".3.5f0c.tmp"
    left.write_bytes(b"v1")
    left.chmod(0o644)
    done = offsets / "2"
    done.write_bytes(b"v1")
    done.chmod(0o600)
    loose_dir = checkpoint / "view" / "commits"
    loose_dir.mkdir(mode=0o755)
    loose_dir.chmod(0o755)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with CheckpointLock.acquire(str(checkpoint)):
        assert left.stat().st_mode & 0o777 == 0o600
        assert done.stat().st_mode & 0o777 == 0o600
        assert loose_dir.stat().st_mode & 0o777 == 0o700


def test_a_reused_pid_does_not_hold_the_lock(tmp_path: Path) -> None:
    """The recorded pid runs, but it is another process: its start time differs."""
    checkpoint = tmp_path / "checkpoint"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        live = cl.this_holder(cl.DEFAULT_LEASE_NS)
        ticks = cl._process_state(sleeper.pid)
        assert ticks is not None
        _write_record(checkpoint, dataclasses.replace(
            live, pid=sleeper.pid, process_start_ticks=ticks[1] - 1,
        ))  # fmt: skip
        assert cl.stale_reason(_record(checkpoint)) == (
            f"its pid {sleeper.pid} now belongs to another process"
        )
        # The same record with the right start time holds.
        _write_record(checkpoint, dataclasses.replace(
            live, pid=sleeper.pid, process_start_ticks=ticks[1],
        ))  # fmt: skip
        with pytest.raises(CheckpointLockedError):
            CheckpointLock.acquire(str(checkpoint))
    finally:
        sleeper.kill()
        sleeper.wait()


def test_another_machines_lock_holds_until_its_heartbeat_is_older_than_the_lease(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "checkpoint"
    lease_ns = 10 * 10**9
    elsewhere = dataclasses.replace(
        cl.this_holder(lease_ns), host="other-host", boot_id="another-boot", pid=1,
    )  # fmt: skip
    now = time.time_ns()
    _write_record(checkpoint, dataclasses.replace(elsewhere, heartbeat_ns=now - lease_ns // 2))
    with pytest.raises(CheckpointLockedError, match="pid 1 on host other-host"):
        CheckpointLock.acquire(str(checkpoint))
    _write_record(checkpoint, dataclasses.replace(elsewhere, heartbeat_ns=now - 2 * lease_ns))
    reason = cl.stale_reason(_record(checkpoint))
    assert reason is not None and reason.startswith("no heartbeat from host other-host for 20 s")
    with CheckpointLock.acquire(str(checkpoint)) as lock:
        assert _record(checkpoint).token == lock.holder.token


def test_the_holder_heartbeats_and_a_silent_one_expires(tmp_path: Path) -> None:
    """A live holder renews its record every lease/3; once it stops (SIGSTOP), a machine
    that can't see its pid takes the lock over after the lease."""
    checkpoint = tmp_path / "checkpoint"
    holder = _holder_process(checkpoint, lease_s=0.6)
    try:
        first = _record(checkpoint).heartbeat_ns
        time.sleep(0.5)
        second = _record(checkpoint).heartbeat_ns
        assert second > first
        os.kill(holder.pid, signal.SIGSTOP)
        time.sleep(0.05)  # a heartbeat under way finishes
        paused = _record(checkpoint)
        as_seen_elsewhere = dataclasses.replace(paused, host="seen-from-elsewhere")
        assert cl.stale_reason(as_seen_elsewhere) is None
        time.sleep(0.9)
        assert _record(checkpoint).heartbeat_ns == paused.heartbeat_ns
        assert cl.stale_reason(as_seen_elsewhere) is not None
        # On this machine the paused pid still runs: it holds.
        assert cl.stale_reason(_record(checkpoint)) is None
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_whose_lock_was_taken_over_notices_at_its_heartbeat(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    lost = []
    lock = CheckpointLock.acquire(str(checkpoint), lease_ns=300_000_000,
                                  on_lost=lambda: lost.append(True))  # fmt: skip
    try:
        _write_record(checkpoint, dataclasses.replace(lock.holder, token="someone-else"))
        assert lock.lost.wait(2.0)
        assert lost == [True]
    finally:
        lock.release()
    assert _record(checkpoint).token == "someone-else"  # release leaves another's lock


def test_racing_restarts_after_a_kill_take_the_lock_once(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    holder = _holder_process(checkpoint)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    racers = [
        subprocess.Popen([sys.executable, "-c", HOLD, str(checkpoint), "60"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]  # fmt: skip
    try:
        time.sleep(0.2)
        deadline = time.monotonic() + 60
        while sum(r.poll() is not None for r in racers) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        refused = [r for r in racers if r.poll() is not None]
        assert len(refused) == 3
        for racer in refused:
            assert racer.stderr is not None
            assert "CheckpointLockedError" in racer.stderr.read()
        (winner,) = [r for r in racers if r.poll() is None]
        assert _record(checkpoint).pid == winner.pid
    finally:
        for racer in racers:
            racer.kill()
            racer.wait()


def test_a_damaged_lock_file_does_not_block(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / cl.LOCK_NAME).write_bytes(b'{"host": "trunc')
    with CheckpointLock.acquire(str(checkpoint)):
        assert _record(checkpoint).pid == os.getpid()


def test_the_lock_file_and_a_new_checkpoint_directory_are_owner_only(tmp_path: Path) -> None:
    checkpoint = tmp_path / "a" / "checkpoint"
    with CheckpointLock.acquire(str(checkpoint)):
        assert (checkpoint / cl.LOCK_NAME).stat().st_mode & 0o777 == 0o600
        assert checkpoint.stat().st_mode & 0o777 == 0o700
        assert checkpoint.parent.stat().st_mode & 0o777 == 0o700
        assert json.loads((checkpoint / cl.LOCK_NAME).read_text())["lease_ns"] > 0


def test_secret_option_values_are_masked_in_the_recorded_command() -> None:
    argv = ["realtime.py", "--kafka-option", "sasl.jaas.config=... password='s3cret';",
            "--kafka-option=ssl.key.password=hunter2", "--kafka-option", "security.protocol=SSL",
            "--repo", "r"]  # fmt: skip
    command = cl.masked_command(argv)
    assert "s3cret" not in command and "hunter2" not in command
    assert "sasl.jaas.config=***" in command and "ssl.key.password=***" in command
    assert "--kafka-option security.protocol=SSL --repo r" in command


def test_a_lease_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(JobError, match="--checkpoint-lease"):
        CheckpointLock.acquire(str(tmp_path), lease_ns=0)
