"""One Python worker per executor holds every shuffle partition's window state.

Spark hands a task whichever of the executor's idle Python workers waited
longest, so a partition's task often lands on another worker than last batch's:
in a 10 M-event run (8 shuffle partitions, 2 cores, ``bench/stream.py``) 42-55 %
of the topic tasks did. That worker rebuilds the partition's state from its
files and computes its frame states anew from all its rows, a cost that grows
with the state, and until the older copy is superseded both workers hold one (a
third of what the workers held at their peaks).

So the workers of an executor elect a *host*: the first to take the executor's
lock file (``flock``, which the kernel releases when its holder dies) listens
on a Unix socket beside it and runs, besides its own tasks, the work the other
workers send it, one thread per connection (the kernels, Arrow, Parquet and the
stores' sockets release the GIL, as on the driver's pass). The others hold no
state: :func:`run` sends the call and its Arrow records, and returns what the
host's call returned (or raises what it raised). Spark's own task scheduling,
retries and the state's exactly-once versions are unchanged: the host runs
exactly the function the task would have run, for the same partition and batch.

A host that dies (its worker killed, or exited) frees the lock: the next call
takes it and hosts from then on, rebuilding states from their files; a call
whose host died before answering runs again there, which is safe because a
partition's batch builds the same state version from the version before it
and the batch, whatever ran before (the replay rule the job's restarts rely
on). The executor is told apart by the worker's parent process (PySpark's
daemon, which forks the executor's workers), so workers of different executors
on one machine never share a host.

``FEATUREFLOW_STATE_HOST=0`` in the executors' environment
(``spark.executorEnv.FEATUREFLOW_STATE_HOST=0``) runs every call in its own worker.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pickle
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any, TypeVar

from featureflow.errors import JobError

log = logging.getLogger(__name__)

ENV = "FEATUREFLOW_STATE_HOST"
"""``0`` turns the host off: every call runs in the worker that makes it."""
CONNECT_TIMEOUT_S = 30.0
"""How long a worker waits for the elected host to listen before it gives up."""
MAX_SOCKET_PATH_BYTES = 100
"""A Unix socket's path must fit ``sun_path`` (108 bytes on Linux, with its NUL)."""

T = TypeVar("T")


class StateHostError(JobError):
    """No worker of the executor could host the state, or the host kept dying."""


_lock = threading.Lock()
_hosting: Listener | None = None
"""This process's listener, once it was elected host."""
_connection: Connection | None = None
"""This process's connection to the executor's host (None: not connected, or hosting)."""
_lock_fd: int | None = None
_unusable: str | None = None
"""Why this process runs every call itself (a socket path too long: see :func:`_paths`)."""


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def _forget_in_child() -> None:
    """A process forked from a host or a client is neither: it elects or connects anew.
    (Its copy of the lock's descriptor is closed; the parent still holds the lock.)"""
    global _hosting, _connection, _lock_fd, _lock
    if _lock_fd is not None:
        with contextlib.suppress(OSError):
            os.close(_lock_fd)
    _hosting = _connection = _lock_fd = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def _paths(executor: int) -> tuple[Path, Path]:
    """The lock file and the socket of the executor whose workers' parent is ``executor``,
    in a directory only this user can enter (the socket takes pickled calls)."""
    directory = Path(tempfile.gettempdir()) / f"featureflow-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    status = directory.stat()
    if status.st_uid != os.getuid() or status.st_mode & 0o077:
        msg = (
            f"{directory} is open to other users or not this user's: remove it "
            "(featureflow recreates it 0700)"
        )
        raise StateHostError(msg)
    return directory / f"state-host-{executor}.lock", directory / f"state-host-{executor}.sock"


def run(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` in the executor's host (this process, when it hosts); see the module.

    ``work`` must be a module-level function and ``args`` picklable. Raises what ``work``
    raised, or :class:`StateHostError` when no host answered twice in a row.
    """
    if not enabled() or _unusable is not None:
        return work(*args)
    failure: BaseException | None = None
    for _ in range(2):
        connection = _connect()
        if connection is None:
            return work(*args)  # this process is the host
        try:
            with _lock:
                connection.send((work, args))
                status, value = connection.recv()
        except (EOFError, OSError) as error:  # the host died: elect again
            failure = error
            _disconnect()
            continue
        if status == "ok":
            return value
        raise value
    msg = (
        f"the executor's state host died twice while running {work.__qualname__} "
        f"({failure!r}); see the executor's log for why its Python worker exited"
    )
    raise StateHostError(msg)


def _connect() -> Connection | None:
    """This process's connection to the host, or None when this process is (now) the host."""
    global _connection
    if _hosting is not None:
        return None
    if _connection is not None:
        return _connection
    global _unusable
    lock_path, socket_path = _paths(os.getppid())
    if len(bytes(socket_path)) > MAX_SOCKET_PATH_BYTES:
        _unusable = f"the socket path {socket_path} is too long for a Unix socket"
        log.warning(
            "no state host: %s; each Python worker runs its own tasks (set TMPDIR of the "
            "executors to a shorter directory)", _unusable,
        )  # fmt: skip
        return None
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        if _try_to_host(lock_path, socket_path):
            return None
        try:
            _connection = Client(str(socket_path), family="AF_UNIX")
            return _connection
        except (FileNotFoundError, ConnectionRefusedError) as error:
            # elected but not listening yet, or it died: the lock says which
            if time.monotonic() > deadline:
                msg = (
                    f"no state host listened on {socket_path} within {CONNECT_TIMEOUT_S:.0f} s "
                    f"although a worker holds {lock_path} ({error})"
                )
                raise StateHostError(msg) from error
            time.sleep(0.01)


def _disconnect() -> None:
    global _connection
    if _connection is not None:
        with contextlib.suppress(OSError):
            _connection.close()
    _connection = None


def _try_to_host(lock_path: Path, socket_path: Path) -> bool:
    """Take the executor's lock and listen, if no live worker holds it."""
    global _hosting, _lock_fd
    fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()  # a dead host's: the lock is ours
    _hosting = Listener(str(socket_path), family="AF_UNIX", backlog=64)
    _lock_fd = fd  # held (open) for the process's life
    threading.Thread(target=_accept, args=(_hosting,), name="featureflow-state-host",
                     daemon=True).start()  # fmt: skip
    log.info("this Python worker (pid %d) hosts the executor's window state", os.getpid())
    return True


def _accept(listener: Listener) -> None:
    while True:
        try:
            connection = listener.accept()
        except OSError:
            return
        threading.Thread(target=_serve, args=(connection,), name="featureflow-state-call",
                         daemon=True).start()  # fmt: skip


def _serve(connection: Connection) -> None:
    """Run one worker's calls, in order, until it disconnects."""
    with connection:
        while True:
            try:
                work, args = connection.recv()
            except (EOFError, OSError):
                return
            try:
                reply: tuple[str, object] = ("ok", work(*args))
            except Exception as error:  # raised again in the calling task
                reply = ("error", _portable(error))
            try:
                connection.send(reply)
            except (OSError, ValueError):
                return  # the worker is gone (its task killed)


def _portable(error: Exception) -> Exception:
    """``error`` with the host's traceback as a note, as the calling task will raise it;
    an exception that does not survive pickling becomes a :class:`StateHostError` with
    its type and message."""
    error.add_note("in the executor's state host:\n" + "".join(traceback.format_exception(error)))
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # any failure to round-trip
        return StateHostError(f"{type(error).__name__}: {error}")
    return error
