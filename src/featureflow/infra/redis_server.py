"""A throwaway local ``redis-server``: 127.0.0.1, a free port, a temporary directory.

For tests, benchmarks and trying featureflow against Feast's Redis online store
without a system service::

    with RedisServer() as server:
        print(server.connection_string)   # "127.0.0.1:PORT", Feast's format

The server keeps nothing on disk (no RDB snapshots, no AOF) and is stopped,
and its directory removed, on ``stop()`` or when the ``with`` block ends.
The binary comes from the ``redis-server`` Debian package (or ``$REDIS_SERVER``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from featureflow.errors import RedisServerError

STARTUP_TIMEOUT_S = 10.0
"""Seconds to wait for the server to answer ``PING`` after starting it."""


def find_binary() -> str:
    """Path of ``redis-server``: ``$REDIS_SERVER`` or the one on ``PATH``."""
    explicit = os.environ.get("REDIS_SERVER")
    if explicit:
        if not Path(explicit).is_file():
            msg = f"$REDIS_SERVER points to {explicit!r}, which does not exist"
            raise RedisServerError(msg)
        return explicit
    found = shutil.which("redis-server")
    if found is None:
        msg = ("redis-server is not installed: run `apt-get install -y redis-server` "
               "(Debian/Ubuntu) or set $REDIS_SERVER to the binary")
        raise RedisServerError(msg)
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1 (see the module docstring)."""

    def __init__(self, port: int | None = None, binary: str | None = None) -> None:
        self.port = port or _free_port()
        self.binary = binary or find_binary()
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def connection_string(self) -> str:
        """``host:port`` as Feast's ``RedisOnlineStoreConfig.connection_string`` wants it."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> RedisServer:
        """Start the server and wait (up to ``STARTUP_TIMEOUT_S`` seconds) until it answers."""
        if self._proc is not None:
            return self
        self._dir = Path(tempfile.mkdtemp(prefix="featureflow-redis-"))
        log = self._dir / "redis.log"
        args = [
            self.binary, "--bind", "127.0.0.1", "--port", str(self.port),
            "--dir", str(self._dir), "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--logfile", str(log), "--protected-mode", "yes",
        ]
        try:
            self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)
        except OSError as exc:
            self._cleanup()
            msg = f"could not run {self.binary}: {exc}"
            raise RedisServerError(msg) from exc
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                self.stop()
                msg = f"redis-server exited at start (port {self.port} in use?):\n{tail}"
                raise RedisServerError(msg)
            if _ping(self.port):
                return self
            time.sleep(0.02)
        self.stop()
        msg = f"redis-server did not answer on 127.0.0.1:{self.port} within {STARTUP_TIMEOUT_S}s"
        raise RedisServerError(msg)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and remove its directory."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._cleanup()

    def _cleanup(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
