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


def free_port_pair() -> int:
    """A loopback port ``p`` with ``p + 1`` free too: a Kafka broker of a test's own listens on
    ``p`` and its controller on ``p + 1`` (``featureflow.infra.kafka_broker``)."""
    for _ in range(50):
        port = free_port()
        if port < 65535:
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    msg = "no two adjacent free loopback ports"
    raise RuntimeError(msg)


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
