"""A throwaway local ``redis-server``: 127.0.0.1, a free port, a temporary directory.

For tests, benchmarks and trying featureflow against Feast's Redis online store
without a system service::

    with RedisServer() as server:
        print(server.connection_string)   # "127.0.0.1:PORT", Feast's format

The server keeps nothing on disk (no RDB snapshots, no AOF) and is stopped,
and its directory removed, on ``stop()`` or when the ``with`` block ends.

Secured: ``RedisServer(password=...)`` sets ``requirepass``;
``RedisServer(tls=certificate)`` (a :class:`featureflow.infra.tls.LocalCertificate`)
serves TLS only (the packaged Redis 7.0 is built with TLS). Both go into a
``redis.conf`` readable by its owner only, never on the command line (``ps``
shows that to every user), and into :attr:`RedisServer.connection_string`
(``127.0.0.1:PORT,password=...,ssl=true,ssl_ca_certs=...``).
The binary comes from the ``redis-server`` Debian package (or ``$REDIS_SERVER``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from featureflow.errors import RedisServerError

if TYPE_CHECKING:
    from featureflow.infra.tls import LocalCertificate


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


def _resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _ping(port: int, password: str | None = None, ca_file: Path | None = None) -> bool:
    """Whether the server answers ``PING`` (after ``AUTH``; over TLS trusting ``ca_file``)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw:
            sock: socket.socket = raw
            if ca_file is not None:
                sock = ssl.create_default_context(cafile=str(ca_file)).wrap_socket(
                    raw, server_hostname="127.0.0.1"
                )
            request = _resp(b"PING")
            if password:
                request = _resp(b"AUTH", password.encode()) + request
            sock.sendall(request)
            reply = b""
            while b"PONG" not in reply and b"-" not in reply[:1] and len(reply) < 256:
                chunk = sock.recv(256)
                if not chunk:
                    break
                reply += chunk
            return b"+PONG" in reply
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        port: int | None = None,
        binary: str | None = None,
        *,
        password: str | None = None,
        tls: LocalCertificate | None = None,
    ) -> None:
        self.port = port or _free_port()
        self.binary = binary or find_binary()
        self.password = password
        self.tls = tls
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """The server's process id (e.g. to pause it with SIGSTOP in an outage test)."""
        if self._proc is None:
            msg = "redis-server is not running"
            raise RedisServerError(msg)
        return self._proc.pid

    @property
    def connection_string(self) -> str:
        """``host:port`` as Feast's ``RedisOnlineStoreConfig.connection_string`` wants it,
        plus ``password=`` and ``ssl=true,ssl_ca_certs=`` for a secured server."""
        parts = [f"127.0.0.1:{self.port}"]
        if self.password:
            parts.append(f"password={self.password}")
        if self.tls is not None:
            parts += ["ssl=true", f"ssl_ca_certs={self.tls.certificate_pem}"]
        return ",".join(parts)

    @property
    def log_file(self) -> Path | None:
        """The server's log (in its directory, removed by :meth:`stop`)."""
        return self._dir / "redis.log" if self._dir is not None else None

    def _secured_config(self, directory: Path) -> list[str]:
        """``redis.conf`` (0600) with the password and TLS settings; its path as the
        server's first argument, or nothing when the server is not secured."""
        lines = []
        if self.password:
            if any(c in self.password for c in "\"\r\n"):
                msg = "the Redis password must not contain quotes or line breaks"
                raise RedisServerError(msg)
            lines.append(f'requirepass "{self.password}"')
        if self.tls is not None:
            lines += [
                "port 0",
                f"tls-port {self.port}",
                f'tls-cert-file "{self.tls.certificate_pem}"',
                f'tls-key-file "{self.tls.key_pem}"',
                f'tls-ca-cert-file "{self.tls.certificate_pem}"',
                "tls-auth-clients no",
            ]
        if not lines:
            return []
        conf = directory / "redis.conf"
        conf.touch(mode=0o600)
        conf.chmod(0o600)
        conf.write_text("".join(line + "\n" for line in lines))
        return [str(conf)]


    def start(self) -> RedisServer:
        """Start the server and wait (up to ``STARTUP_TIMEOUT_S`` seconds) until it answers."""
        if self._proc is not None:
            return self
        self._dir = self._dir or Path(tempfile.mkdtemp(prefix="featureflow-redis-"))
        log = self._dir / "redis.log"
        args = [
            self.binary, *self._secured_config(self._dir), "--bind", "127.0.0.1",
            "--port", "0" if self.tls else str(self.port),
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
            if _ping(self.port, self.password, self.tls.certificate_pem if self.tls else None):
                return self
            time.sleep(0.02)
        self.stop()
        msg = f"redis-server did not answer on 127.0.0.1:{self.port} within {STARTUP_TIMEOUT_S}s"
        raise RedisServerError(msg)

    def restart(self, down_s: float = 0.0) -> None:
        """Stop the server keeping its data (``SHUTDOWN SAVE`` writes ``dump.rdb`` in its
        directory), stay down ``down_s`` seconds, start it again on the same port: it loads
        the data back, as a production Redis with persistence does after a restart."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            client = redis.Redis(
                host="127.0.0.1", port=self.port, password=self.password or None,
                ssl=self.tls is not None, socket_timeout=5, retry=Retry(NoBackoff(), 0),
                ssl_ca_certs=str(self.tls.certificate_pem) if self.tls else None,
            )  # fmt: skip
            with contextlib.suppress(redis.RedisError):  # it went away before answering
                client.shutdown(save=True)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired as exc:
                proc.kill()
                proc.wait(timeout=5)
                msg = f"redis-server on port {self.port} did not shut down within 30 s"
                raise RedisServerError(msg) from exc
        time.sleep(down_s)
        self.start()

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
