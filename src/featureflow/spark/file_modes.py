"""Who may read what the job writes: its owner only, by default.

The job's files hold raw events (window state), per-event feature history
(offline Parquet), the online features (SQLite) and Spark's checkpoint, so on
a local filesystem they are created with mode ``0600`` and their directories
with ``0700``, whatever the process umask. ``FEATUREFLOW_FILE_MODE`` (octal,
e.g. ``0640`` to let the owner's group read; the job's ``--file-mode``
sets it) changes the file mode; a directory gets the file mode plus the
execute bit wherever the file mode has the read bit (``0640`` -> ``0750``).
The owner must keep read and write (the job rereads its own state).

Scope: only files and directories the job creates are given the mode;
existing directories (a checkpoint root made by someone else, the repo's
``data/``) keep theirs. On HDFS the job's Python writers leave modes to the
cluster's ``fs.permissions.umask-mode``; Spark's own checkpoint files get
:func:`spark_conf`'s umask on every Hadoop filesystem that keeps POSIX
permissions (local, HDFS); S3 has no per-file modes (use bucket policies).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

import pyarrow.fs as pafs

from featureflow.errors import JobError

ENV = "FEATUREFLOW_FILE_MODE"
DEFAULT_FILE_MODE = 0o600


def parse_mode(text: str, source: str = ENV) -> int:
    """An octal permission mode such as ``0600`` or ``640``.

    Raises:
        JobError: not octal, beyond ``0777``, or without owner read and write.
    """
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        msg = f"{source}: {text!r} is not an octal file mode such as 0600 or 0640"
        raise JobError(msg)
    if mode & 0o600 != 0o600:
        msg = f"{source}: {text!r} must let the owner read and write (0600 at least)"
        raise JobError(msg)
    return mode


def file_mode() -> int:
    """The mode of the files the job creates: ``FEATUREFLOW_FILE_MODE``, else ``0600``."""
    text = os.environ.get(ENV)
    return DEFAULT_FILE_MODE if not text else parse_mode(text)


def dir_mode(mode: int | None = None) -> int:
    """The directories' mode for a file ``mode``: each read bit brings its execute bit."""
    mode = file_mode() if mode is None else mode
    return mode | ((mode & 0o444) >> 2)


def spark_conf(mode: int | None = None) -> dict[str, str]:
    """Spark settings that carry the mode to the executors' Python workers and make
    Hadoop create Spark's checkpoint files with it (``fs.permissions.umask-mode``)."""
    mode = file_mode() if mode is None else mode
    return {
        f"spark.executorEnv.{ENV}": f"{mode:04o}",
        "spark.hadoop.fs.permissions.umask-mode": f"{0o777 & ~dir_mode(mode):03o}",
    }


def make_dirs(filesystem: pafs.FileSystem, path: str) -> None:
    """``mkdir -p`` where each directory created gets :func:`dir_mode` (local
    filesystem; elsewhere the filesystem's own ``create_dir``)."""
    if not isinstance(filesystem, pafs.LocalFileSystem):
        filesystem.create_dir(path, recursive=True)
        return
    if os.path.isdir(path):
        return
    mode = dir_mode()
    missing = []
    at = os.path.abspath(path)
    while not os.path.isdir(at):
        missing.append(at)
        at = os.path.dirname(at)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            continue  # made meanwhile by another writer
        os.chmod(directory, mode)  # the umask may have taken bits away


def create_file(filesystem: pafs.FileSystem, path: str) -> None:
    """Create ``path`` empty with :func:`file_mode` before a writer opens it (a local
    file keeps its mode when reopened for writing, so it is never readable by
    others, not even while written). Refuses an existing ``path``: callers pass
    a name of their own. No-op on other filesystems."""
    if not isinstance(filesystem, pafs.LocalFileSystem):
        return
    mode = file_mode()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(descriptor, mode)
    finally:
        os.close(descriptor)


def restrict(paths: Iterable[str]) -> None:
    """Give existing local files :func:`file_mode` (e.g. the SQLite online store that
    ``feast apply`` created; SQLite gives its journal and WAL files the database's mode)."""
    mode = file_mode()
    for path in paths:
        if os.path.isfile(path):
            os.chmod(path, mode)


def restrict_tree(directory: str) -> list[str]:
    """Take group and other bits beyond :func:`file_mode` (:func:`dir_mode` for
    directories) from everything below a local ``directory``; returns the paths changed.

    For a checkpoint whose last job was killed: Hadoop's local filesystem creates a
    file under the process umask and only then sets the job's mode, so a writer
    killed between the two (Spark's offsets log writes ``.<n>.<uuid>.tmp`` and renames
    it) leaves a file as loose as the umask. The directories above keep it from other
    users; this makes the file itself owner-only again. No-op where ``directory`` is
    missing.
    """
    files, dirs = file_mode(), dir_mode()
    changed = []
    for root, directories, names in os.walk(directory):
        for name, allowed in [*((d, dirs) for d in directories), *((n, files) for n in names)]:
            path = os.path.join(root, name)
            try:
                current = os.lstat(path).st_mode
            except FileNotFoundError:
                continue  # removed meanwhile (a rename of Spark's)
            if stat.S_ISLNK(current) or stat.S_IMODE(current) & ~allowed == 0:
                continue
            os.chmod(path, stat.S_IMODE(current) & allowed)
            changed.append(path)
    return changed


def restrict_online_store(repo_path: str) -> None:
    """Give the repo's SQLite online store file (if that is its online store) the mode."""
    from featureflow.online.sqlite import db_path
    from featureflow.repo import load_store

    config = load_store(repo_path).config
    if getattr(config.online_store, "type", None) != "sqlite":
        return
    database = str(db_path(config))
    restrict([database, *(database + suffix for suffix in ("-journal", "-wal", "-shm"))])
