"""The benchmarks' CPU accounting (bench/_process_cpu.py) on real processes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_process_cpu", BENCH / "_process_cpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


process_cpu = _module()


@pytest.mark.parametrize(
    ("cmdline", "kind"),
    [
        ("/usr/bin/java -Xmx512m -cp /jars/* kafka.Kafka /cache/server.properties", "broker"),
        (
            "/usr/lib/jvm/java-17/bin/java -cp /spark/jars/* org.apache.spark.deploy.SparkSubmit "
            "--master local[2] jobs/realtime.py",
            "jvm",
        ),
        ("/repo/.venv/bin/python -m pyspark.daemon pyspark.worker", "python_workers"),
        ("/usr/bin/redis-server 127.0.0.1:41234", "redis"),
        ("/repo/.venv/bin/python /repo/jobs/realtime.py --repo r", "driver_python"),
        ("/bin/bash -c make test", "other"),
    ],
)
def test_processes_are_told_apart_by_their_command_line(cmdline: str, kind: str) -> None:
    assert process_cpu.kind_of(cmdline) == kind


def test_a_child_process_cpu_is_counted_between_the_instants_of_its_run() -> None:
    sampler = process_cpu.ProcessCpu(os.getpid(), interval_s=0.1)
    sampler.start()
    time.sleep(0.3)  # idle before: the interval below must not count it
    started = time.time()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5: pass\n"
    # started by a shell that execs Python, as spark-submit's scripts exec the JVM: the
    # process's kind is what it runs now, and stays so while it exits
    child = subprocess.Popen(["sh", "-c", 'sleep 0.3; exec "$0" -c "$1"', sys.executable, burn])
    while child.poll() is None:
        time.sleep(0.05)
    ended = time.time()
    time.sleep(0.3)
    sampler.stop()

    spent = sampler.between(started, ended)
    # the child's 1.5 s, less at most its last interval before it exited, and its start-up
    assert 1.2 <= spent["driver_python"] <= 2.5
    assert spent["total"] == pytest.approx(sum(spent[kind] for kind in process_cpu.KINDS))
    assert spent["seconds"] >= ended - started
    before = sampler.between(started - 0.25, started - 0.05)
    assert before["driver_python"] < 0.2  # the sampler's own work only


def test_a_process_that_is_gone_is_no_error() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # exited and reaped: its /proc entries are gone

    assert process_cpu.process_cpu(child.pid) is None
    assert process_cpu.descendants(child.pid) == []
    sampler = process_cpu.ProcessCpu(child.pid)
    sampler.sample()
    sampler.sample()
    assert sampler.between(0.0, time.time() + 1)["total"] == 0.0
