"""The executor's state host: one worker runs every worker's partitions, and a host that
dies is replaced by the next worker that calls.

The workers here are child processes of the test (one "executor": their parent), each
a Python that calls :func:`featureflow.spark.state_host.run` on commands read from its
stdin, as PySpark's forked workers of one daemon would; the call reports which process
ran it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from featureflow.spark import state_host

WORKER = textwrap.dedent("""
    import os, sys, time
    from featureflow.spark import state_host
    for line in sys.stdin:
        command = line.strip()
        try:
            if command == "pid":
                print(state_host.run(os.getpid), flush=True)
            elif command == "fail":
                state_host.run(int, "not a number")
            elif command == "host":
                print(state_host._hosting is not None, flush=True)
            elif command == "fork":  # a child that outlives this process by a minute
                if os.fork() == 0:
                    print(state_host._hosting is not None, os.getpid(), flush=True)
                    time.sleep(60)
                    os._exit(0)
        except Exception as error:
            print(f"{type(error).__name__}: {str(error).splitlines()[0]}", flush=True)
""")


class Worker:
    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env,
        )  # fmt: skip

    def ask(self, command: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[Worker]]:
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # a fresh lock and socket directory
    started = [Worker(env) for _ in range(3)]
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.kill()


def test_the_first_worker_to_call_hosts_and_runs_the_others_calls(workers: list[Worker]) -> None:
    first, second, third = workers
    host_pid = first.process.pid
    assert first.ask("pid") == str(host_pid)
    assert second.ask("pid") == str(host_pid)
    assert third.ask("pid") == str(host_pid)
    assert second.ask("pid") == str(host_pid)  # the connection is kept between calls
    assert [w.ask("host") for w in workers] == ["True", "False", "False"]


def test_the_hosts_exception_is_raised_in_the_calling_worker(workers: list[Worker]) -> None:
    first, second, _ = workers
    first.ask("pid")
    said = second.ask("fail")
    assert said == "ValueError: invalid literal for int() with base 10: 'not a number'"
    assert second.ask("pid") == str(first.process.pid)  # the host serves on


def test_a_process_forked_from_the_host_holds_no_part_of_its_place(
    workers: list[Worker],
) -> None:
    """The host's fork (a library's subprocess) starts as neither host nor client, and its
    copy of the lock's descriptor does not keep the lock once the host is gone: else the
    next worker would wait for a listener that never comes (StateHostError after 30 s)."""
    first, second, _ = workers
    assert first.ask("pid") == str(first.process.pid)
    hosting, child = first.ask("fork").split()
    try:
        assert hosting == "False"
        assert second.ask("pid") == str(first.process.pid)
        first.kill()
        assert second.ask("pid") == str(second.process.pid)
    finally:
        os.kill(int(child), signal.SIGKILL)


def test_a_dead_hosts_place_goes_to_the_next_worker_that_calls(workers: list[Worker]) -> None:
    first, second, third = workers
    first.ask("pid")
    second.ask("pid")
    first.kill()
    # second's connection breaks: it takes the freed lock and runs its call itself
    assert second.ask("pid") == str(second.process.pid)
    assert third.ask("pid") == str(second.process.pid)


@pytest.mark.parametrize("why", ["turned off", "socket path too long for AF_UNIX"])
def test_without_a_host_every_worker_runs_its_own_calls(tmp_path: Path, why: str) -> None:
    if why == "turned off":
        env = {**os.environ, "TMPDIR": str(tmp_path), state_host.ENV: "0"}
    else:
        deep = tmp_path / ("d" * 90)
        deep.mkdir()
        env = {**os.environ, "TMPDIR": str(deep)}
    workers = [Worker(env) for _ in range(2)]
    try:
        assert [w.ask("pid") for w in workers] == [str(w.process.pid) for w in workers]
    finally:
        for worker in workers:
            worker.kill()


def test_a_lock_directory_open_to_other_users_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / f"featureflow-{os.getuid()}"
    directory.mkdir()
    directory.chmod(0o777)
    worker = Worker({**os.environ, "TMPDIR": str(tmp_path)})
    try:
        said = worker.ask("pid")
    finally:
        worker.kill()
    assert said.startswith("StateHostError: ") and "open to other users" in said
