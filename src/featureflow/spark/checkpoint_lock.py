"""One job per checkpoint: a lock file that names its holder and dies with it.

Two jobs on one checkpoint would both append Spark offsets and both write the
window state of the same micro-batches, so the second is refused at start
with :class:`~featureflow.errors.CheckpointLockedError` naming the holder
(host, pid, start time, command) and exit status 75. The lock is the file
``<checkpoint>/featureflow.lock``, a JSON record of its holder, created
atomically (a complete record linked into place: ``link(2)`` fails when the
name exists) and removed when the job ends.

A lock whose holder died without removing it (SIGKILL, a lost machine) is
*stale* and taken over at the next start. The rule:

- **Same machine** (same host name, boot id and pid namespace as the
  record): stale when the recorded pid is gone (or a zombie), or now belongs
  to another process (its start time in ``/proc/<pid>/stat`` differs from
  the recorded one: the pid was reused). A live holder holds, even a paused
  one (SIGSTOP): its pid still runs.
- **Another machine** (or container, or a reboot since): pids can't be
  checked, so the holder rewrites its record every ``lease / 3``
  (heartbeat); the lock is stale once its last heartbeat is older than the
  lease (default 60 s, ``--checkpoint-lease``), by the clock of the machine
  that wants it. Clocks must agree to well within the lease (NTP). A holder
  that finds at its heartbeat that its lock was taken over (it had stopped
  heartbeating for a lease: paused, partitioned) logs it and asks the job to
  stop; until it notices, both may write.

Taking over is serialised by an ``flock(2)`` on ``<checkpoint>/.featureflow.lock.guard``
(heartbeats and releases take it too), and the stale record is judged again
under it, so two restarts never both win, and a heartbeat that arrives in
time keeps its lock.

Storage: a local filesystem gives all of the above; so does NFSv4 (``link``
is atomic there and Linux maps ``flock`` to NFS byte-range locks). A
checkpoint URI (``hdfs://``, ``s3://``) gets the same record, rules and
heartbeat through pyarrow, but creation is check-then-write there (pyarrow
has no exclusive create): two jobs started within the same few milliseconds
may both pass, after which each finds at its next heartbeat whether the
record is still its own (the loser stops). HDFS's own single-writer leases
do not extend to rename-based files, and S3 offers no lock at all: there,
run one job per checkpoint by deployment (one Kubernetes Deployment replica,
a YARN queue), and treat the lock as a guard against mistakes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.fs as pafs

from featureflow.errors import CheckpointLockedError, JobError
from featureflow.spark import file_modes

log = logging.getLogger(__name__)

LOCK_NAME = "featureflow.lock"
DEFAULT_LEASE_NS = 60 * 10**9
_SETTING_OPTIONS = ("--kafka-option",)
"""Options of KEY=VALUE settings: a secret one (:func:`featureflow.secrets.is_secret_key`)
is recorded as KEY=***."""


@dataclass(frozen=True)
class LockHolder:
    """Who holds a checkpoint: the record in its lock file."""

    host: str
    pid: int
    started_at: str
    """When the holder took the lock (ISO 8601, UTC)."""
    command: str
    """The holder's command line, secrets masked."""
    boot_id: str
    pid_namespace: str
    process_start_ticks: int | None
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks since boot); tells a reused pid."""
    heartbeat_ns: int
    """Epoch ns of the holder's last heartbeat."""
    lease_ns: int
    token: str
    """Random: tells this holding apart from any other, even of the same pid."""

    def describe(self, now_ns: int | None = None) -> str:
        """``pid 12 on host h, started 2026-…Z (heartbeat 3 s ago), command: …``."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        age_s = max(0, now_ns - self.heartbeat_ns) / 1e9
        return (
            f"pid {self.pid} on host {self.host}, started {self.started_at} "
            f"(heartbeat {age_s:.0f} s ago), command: {self.command}"
        )

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> LockHolder:
        """Raises ValueError (also for a record missing a field)."""
        fields = json.loads(data)
        if not isinstance(fields, dict):
            raise ValueError("not a JSON object")
        try:
            return cls(**fields)
        except TypeError as error:
            raise ValueError(str(error)) from error


def masked_command(argv: Sequence[str]) -> str:
    """``argv`` as a shell line, secret settings masked (and any secret
    :func:`featureflow.secrets.redact_text` recognises)."""
    from featureflow import secrets as ff_secrets

    def masked(setting: str) -> str:
        key, sep, _ = setting.partition("=")
        return f"{key}={ff_secrets.REDACTED}" if sep and ff_secrets.is_secret_key(key) else setting

    words, setting_next = [], False
    for word in argv:
        if setting_next:
            word, setting_next = masked(word), False
        elif word in _SETTING_OPTIONS:
            setting_next = True
        elif any(word.startswith(f"{option}=") for option in _SETTING_OPTIONS):
            option, _, setting = word.partition("=")
            word = f"{option}={masked(setting)}"
        words.append(shlex.quote(word))
    return ff_secrets.redact_text(" ".join(words))


# -- this machine and its processes -------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _boot_id() -> str:
    return (_read("/proc/sys/kernel/random/boot_id") or "").strip()


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _process_state(pid: int) -> tuple[str, int] | None:
    """(state letter, start ticks) of ``pid`` from ``/proc``, or None when unknown."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    return fields[0], int(fields[19])


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    state = _process_state(pid)
    return state is None or state[0] != "Z"


def this_holder(lease_ns: int, argv: Sequence[str] | None = None) -> LockHolder:
    """The record this process writes when it takes a lock."""
    state = _process_state(os.getpid())
    return LockHolder(
        host=socket.gethostname(),
        pid=os.getpid(),
        started_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        command=masked_command(sys.argv if argv is None else argv),
        boot_id=_boot_id(),
        pid_namespace=_pid_namespace(),
        process_start_ticks=None if state is None else state[1],
        heartbeat_ns=time.time_ns(),
        lease_ns=lease_ns,
        token=secrets.token_hex(8),
    )


def stale_reason(holder: LockHolder, now_ns: int | None = None) -> str | None:
    """Why ``holder``'s lock no longer holds (see the module's rule), or None if it does."""
    same_machine = (
        holder.host == socket.gethostname()
        and holder.boot_id == _boot_id()
        and holder.pid_namespace == _pid_namespace()
        and bool(holder.boot_id)
    )
    if same_machine:
        if not _pid_running(holder.pid):
            return f"its pid {holder.pid} is gone"
        state = _process_state(holder.pid)
        if (
            state is not None
            and holder.process_start_ticks is not None
            and state[1] != holder.process_start_ticks
        ):
            return f"its pid {holder.pid} now belongs to another process"
        return None
    now_ns = time.time_ns() if now_ns is None else now_ns
    silent_ns = now_ns - holder.heartbeat_ns
    if silent_ns > holder.lease_ns:
        return (
            f"no heartbeat from host {holder.host} for {silent_ns / 1e9:.0f} s "
            f"(lease {holder.lease_ns / 1e9:.0f} s)"
        )
    return None


# -- where the record lives ---------------------------------------------------------------


class _LocalFiles:
    """The lock file on a local (or NFS) filesystem: ``link`` to create, ``flock`` guard."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = f"{directory}/{LOCK_NAME}"

    def _temporary(self, data: bytes) -> str:
        path = f"{self.directory}/.{LOCK_NAME}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
        file_modes.create_file(pafs.LocalFileSystem(), path)
        with open(path, "wb") as sink:
            sink.write(data)
            sink.flush()
            os.fsync(sink.fileno())
        return path

    def create(self, data: bytes) -> bool:
        """Put ``data`` in place if no lock file exists; False when one does."""
        temporary = self._temporary(data)
        try:
            os.link(temporary, self.path)
        except FileExistsError:
            return False
        finally:
            os.unlink(temporary)
        return True

    def read(self) -> bytes | None:
        try:
            return Path(self.path).read_bytes()
        except FileNotFoundError:
            return None

    def replace(self, data: bytes) -> None:
        os.replace(self._temporary(data), self.path)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        descriptor = os.open(
            f"{self.directory}/.{LOCK_NAME}.guard", os.O_RDWR | os.O_CREAT, file_modes.file_mode()
        )
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)  # releases the flock


class _ArrowFiles:
    """The lock file on a pyarrow filesystem (HDFS, S3): check-then-write, no guard."""

    def __init__(self, filesystem: pafs.FileSystem, directory: str) -> None:
        self.filesystem = filesystem
        self.path = f"{directory}/{LOCK_NAME}"

    def create(self, data: bytes) -> bool:
        if self.read() is not None:
            return False
        self.replace(data)
        return True

    def read(self) -> bytes | None:
        if self.filesystem.get_file_info(self.path).type != pafs.FileType.File:
            return None
        with self.filesystem.open_input_stream(self.path) as source:
            data: bytes = source.read()
        return data

    def replace(self, data: bytes) -> None:
        with self.filesystem.open_output_stream(self.path) as sink:
            sink.write(data)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filesystem.delete_file(self.path)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        yield


# -- the lock -----------------------------------------------------------------------------


class CheckpointLock:
    """This job's hold on a checkpoint; :meth:`acquire` it, :meth:`release` at the end.

    ``lost`` is set (and ``on_lost`` called, once) when a heartbeat finds the
    lock taken over by another job.
    """

    def __init__(
        self,
        files: _LocalFiles | _ArrowFiles,
        holder: LockHolder,
        checkpoint: str,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self._files = files
        self.holder = holder
        self.checkpoint = checkpoint
        self.lost = threading.Event()
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(
            target=self._beat, name="featureflow-checkpoint-lock", daemon=True
        )

    @classmethod
    def acquire(
        cls,
        checkpoint: str,
        *,
        lease_ns: int = DEFAULT_LEASE_NS,
        argv: Sequence[str] | None = None,
        on_lost: Callable[[], None] | None = None,
    ) -> CheckpointLock:
        """Take the checkpoint's lock (creating the checkpoint directory, owner-only),
        taking over a stale one, and start heartbeating.

        Raises:
            CheckpointLockedError: a live job holds it (the message names that job).
            JobError: the lease is not positive.
        """
        if lease_ns <= 0:
            msg = f"--checkpoint-lease must be positive, got {lease_ns} ns"
            raise JobError(msg)
        from featureflow.spark.state import filesystem_of

        filesystem, directory = filesystem_of(checkpoint.rstrip("/") or "/")
        file_modes.make_dirs(filesystem, directory)
        files: _LocalFiles | _ArrowFiles = (
            _LocalFiles(directory)
            if isinstance(filesystem, pafs.LocalFileSystem)
            else _ArrowFiles(filesystem, directory)
        )
        mine = this_holder(lease_ns, argv)
        for _attempt in range(10):
            if files.create(mine.to_bytes()):
                break
            with files.guard():
                current = _holder_of(files)
                if current is None:
                    continue  # released meanwhile: try again to create
                reason = stale_reason(current)
                if reason is None:
                    raise _locked(checkpoint, current)
                log.warning(
                    "taking over the checkpoint %s from a job that is gone (%s): %s",
                    checkpoint, reason, current.describe(),
                )  # fmt: skip
                files.remove()
                if files.create(mine.to_bytes()):
                    _restrict_left_files(filesystem, directory)
                    break
        else:  # pragma: no cover - ten races in a row
            msg = f"could not take the lock of checkpoint {checkpoint}: it keeps changing hands"
            raise JobError(msg)
        lock = cls(files, mine, checkpoint, on_lost)
        lock._heartbeat.start()
        log.info("checkpoint %s locked by this job (pid %d)", checkpoint, mine.pid)
        return lock

    def _beat(self) -> None:
        interval_s = self.holder.lease_ns / 3e9
        while not self._stop.wait(interval_s):
            try:
                with self._files.guard():
                    current = _holder_of(self._files)
                    if current is None or current.token != self.holder.token:
                        self._lose(current)
                        return
                    self.holder = _with_heartbeat(self.holder, time.time_ns())
                    self._files.replace(self.holder.to_bytes())
            except OSError as error:  # storage hiccup: the next beat tries again
                log.warning("checkpoint lock heartbeat failed: %s", error)

    def _lose(self, current: LockHolder | None) -> None:
        log.error(
            "the checkpoint %s was taken over by another job (%s): stopping this one",
            self.checkpoint, "none" if current is None else current.describe(),
        )  # fmt: skip
        self.lost.set()
        if self._on_lost is not None:
            self._on_lost()

    def release(self) -> None:
        """Stop heartbeating and remove the lock file, if it is still this job's."""
        self._stop.set()
        if self._heartbeat.is_alive():
            self._heartbeat.join()
        try:
            with self._files.guard():
                current = _holder_of(self._files)
                if current is not None and current.token == self.holder.token:
                    self._files.remove()
        except OSError as error:
            log.warning("could not remove the checkpoint lock %s: %s", self._files.path, error)

    def __enter__(self) -> CheckpointLock:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


def _restrict_left_files(filesystem: pafs.FileSystem, directory: str) -> None:
    """Make owner-only again what a killed job may have left looser in its checkpoint
    (:func:`~featureflow.spark.file_modes.restrict_tree`); local filesystems only."""
    if isinstance(filesystem, pafs.LocalFileSystem):
        for path in file_modes.restrict_tree(directory):
            log.info("gave %s the job's file mode (left by the job that is gone)", path)


def _with_heartbeat(holder: LockHolder, now_ns: int) -> LockHolder:
    fields = asdict(holder)
    fields["heartbeat_ns"] = now_ns
    return LockHolder(**fields)


def _holder_of(files: _LocalFiles | _ArrowFiles) -> LockHolder | None:
    """The record in the lock file; a damaged one (only storage that lost data writes
    one: records are written whole and moved into place) counts as stale."""
    data = files.read()
    if data is None:
        return None
    try:
        return LockHolder.from_bytes(data)
    except ValueError:
        log.warning("the checkpoint lock file %s is damaged: treating it as stale", files.path)
        return LockHolder(
            host="?", pid=0, started_at="?", command="?", boot_id="", pid_namespace="",
            process_start_ticks=None, heartbeat_ns=0, lease_ns=1, token="",
        )  # fmt: skip


def _locked(checkpoint: str, holder: LockHolder) -> CheckpointLockedError:
    message = (
        f"the checkpoint {checkpoint} is in use by another job: {holder.describe()}. "
        "Stop that job first (SIGTERM stops it at a micro-batch boundary) or give this one "
        "another --checkpoint; a lock left by a killed job is taken over by itself (at once "
        "on the same machine, after the lease of "
        f"{holder.lease_ns / 1e9:.0f} s without heartbeat from another one)"
    )
    return CheckpointLockedError(message, holder)
