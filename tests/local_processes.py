"""Loopback ports and process groups, for tests that start servers (``feast serve``, the job,
``featureflow status``) as subprocesses."""

from __future__ import annotations

import os
import signal
import socket
import subprocess


def free_port() -> int:
    """A loopback port nothing listens on now (bound once, then released): free for a server
    to take, or "unreachable" for a client."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def stop_group(process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """SIGTERM the process group of ``process`` (started with ``start_new_session``), then
    SIGKILL it if it has not exited within ``timeout_s``."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)
