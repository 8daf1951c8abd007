"""CPU seconds that a benchmark's processes spend, by kind, sampled from /proc.

On the 2-vCPU machine a system's events/s is bounded by the CPU that every process it
needs spends per event, not by its own code alone. :class:`ProcessCpu` samples, every
``interval_s``, the cumulative CPU time (user + system) of the processes under a root
pid and of the Kafka broker, and :meth:`ProcessCpu.between` gives what each kind spent
between two instants (epoch seconds: a system's run, first micro-batch start to last
micro-batch end). The kinds (:data:`KINDS`):

- ``jit``: the HotSpot compiler threads of the Spark JVMs (``C1/C2 CompilerThread``). A
  JVM compiles its hot code while it runs, so a run in a fresh JVM pays for it and a
  later run in the same JVM hardly does;
- ``jvm``: every other thread of the Spark JVMs (tasks, Kafka consumer, shuffle, GC);
- ``python_workers``: PySpark's daemon and the workers it forks;
- ``driver_python``: any other Python process under the root (the job's driver; for
  the peers, which run in the benchmark's own session, the benchmark itself);
- ``redis``: the redis-server of the run;
- ``broker``: the Kafka broker (``kafka.Kafka``), which is not under the root.

A process that exits keeps the CPU it had at its last sample (up to ``interval_s`` of
its last CPU is not seen). Linux only.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("jit", "jvm", "python_workers", "driver_python", "redis", "broker", "other")
"""The kinds of CPU time :class:`ProcessCpu` tells apart (module docstring)."""

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_COMPILER_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
"""HotSpot's compiler threads as ``/proc/<pid>/task/<tid>/stat`` names them (15 chars)."""


def kind_of(cmdline: str) -> str:
    """The kind of a process by its command line (a JVM's threads are split later)."""
    if "kafka.Kafka" in cmdline:
        return "broker"
    if "java" in cmdline.split(" ", 1)[0]:
        return "jvm"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "python_workers"
    if "redis-server" in cmdline:
        return "redis"
    if "python" in cmdline.split(" ", 1)[0]:
        return "driver_python"
    return "other"


def _cpu_s(stat: str) -> tuple[str, float]:
    """(name, user + system CPU seconds) of a ``/proc/.../stat`` line."""
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    return name, (int(fields[11]) + int(fields[12])) / _TICKS


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _tasks(pid: int) -> list[Path]:
    """The threads of process ``pid`` (none once it is gone: processes exit while sampled)."""
    try:
        return list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in _tasks(pid):
        text = _read(task / "children")
        if text:
            found += [int(child) for child in text.split()]
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, theirs, ...), not ``pid`` itself; a process
    that exits during the walk is left out, not an error."""
    seen: list[int] = []
    todo = [pid]
    while todo:
        for child in _children(todo.pop()):
            if child not in seen:
                seen.append(child)
                todo.append(child)
    return seen


def _brokers() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            cmdline = _read(entry / "cmdline")
            if cmdline and "kafka.Kafka" in cmdline:
                found.append(int(entry.name))
    return found


def wait_for_idle_broker(below_cores: float = 0.1, quiet_s: float = 3, limit_s: float = 120
                         ) -> float:  # fmt: skip
    """Wait until the Kafka broker uses less than ``below_cores`` of CPU for ``quiet_s``
    seconds in a row (its compiler threads done with what a read queued), at most
    ``limit_s``; returns the seconds waited."""
    started = time.monotonic()
    quiet = 0

    def spent() -> float:
        samples = [process_cpu(pid) for pid in _brokers()]
        return sum(sample.total for sample in samples if sample is not None)

    before = spent()
    while quiet < quiet_s and time.monotonic() - started < limit_s:
        time.sleep(1.0)
        now = spent()
        quiet = quiet + 1 if now - before < below_cores else 0
        before = now
    return time.monotonic() - started


@dataclass(frozen=True)
class Sample:
    """One process's CPU seconds at one instant."""

    kind: str
    """Its kind (:func:`kind_of`); empty while it exits (no command line)."""
    total: float
    compilers: dict[int, float]
    """A JVM's compiler threads' CPU seconds, by thread id (empty for other kinds)."""


def process_cpu(pid: int) -> Sample | None:
    """The CPU seconds of process ``pid``; None when it is gone."""
    raw = _read(Path(f"/proc/{pid}/cmdline"))
    stat = _read(Path(f"/proc/{pid}/stat"))
    if raw is None or stat is None:
        return None
    kind = kind_of(raw.replace("\0", " ")) if raw else ""
    compilers: dict[int, float] = {}
    if kind == "jvm":
        for task in _tasks(pid):
            text = _read(task / "stat")
            if text:
                name, seconds = _cpu_s(text)
                if name.startswith(_COMPILER_THREADS):
                    compilers[int(task.name)] = seconds
    return Sample(kind, _cpu_s(stat)[1], compilers)


@dataclass(eq=False)
class ProcessCpu(threading.Thread):
    """Samples the CPU of the processes under ``root_pid`` and of the Kafka broker until
    :meth:`stop` (see the module docstring)."""

    root_pid: int
    interval_s: float = 0.5
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    """(epoch s, cumulative CPU seconds by kind since the first sample) per sample."""

    def __post_init__(self) -> None:
        super().__init__(daemon=True)
        self._stopped = threading.Event()
        self._kind: dict[int, str] = {}
        self._total: dict[int, tuple[float, float]] = {}
        """Per pid: (CPU seconds at its first sample, at its last)."""
        self._compilers: dict[tuple[int, int], tuple[float, float]] = {}
        """Per (JVM pid, compiler thread id): the same; an exited thread keeps its last."""

    def sample(self) -> None:
        """Take one sample now. A process or thread seen first after the first sample
        started since: all its CPU counts."""
        first = not self.samples
        for pid in {self.root_pid, *descendants(self.root_pid), *_brokers()}:
            if (cpu := process_cpu(pid)) is None:
                continue
            if cpu.kind or pid not in self._kind:  # as it is now (a launcher execs a JVM),
                self._kind[pid] = cpu.kind or "other"  # but an exiting process has no name
            base = self._total.get(pid, (cpu.total if first else 0.0, 0.0))[0]
            self._total[pid] = (base, cpu.total)
            for tid, seconds in cpu.compilers.items():
                known = self._compilers.get((pid, tid), (seconds if first else 0.0, 0.0))
                self._compilers[(pid, tid)] = (known[0], seconds)
        totals = dict.fromkeys(KINDS, 0.0)
        for pid, (base, now) in self._total.items():
            totals[self._kind[pid]] += now - base
        for (_, _), (base, now) in self._compilers.items():
            totals["jit"] += now - base
            totals["jvm"] -= now - base
        self.samples.append((time.time(), totals))

    def run(self) -> None:
        self.sample()
        while not self._stopped.wait(self.interval_s):
            self.sample()

    def stop(self) -> None:
        self._stopped.set()
        self.join(10)
        self.sample()

    def between(self, start_s: float, end_s: float) -> dict[str, float]:
        """CPU seconds by kind from the last sample at or before ``start_s`` to the first
        at or after ``end_s`` (epoch s; the interval widens by under ``interval_s`` at
        each end), with ``total`` and ``seconds`` (the sampled interval's length)."""
        times = [t for t, _ in self.samples]
        if not times or end_s < times[0]:
            return {}
        first = max(0, bisect_right(times, start_s) - 1)
        last = min(len(times) - 1, bisect_right(times, end_s - 1e-9))
        (t0, before), (t1, after) = self.samples[first], self.samples[last]
        spent = {kind: round(after[kind] - before[kind], 2) for kind in KINDS}
        return {**spent, "total": round(sum(spent.values()), 2), "seconds": round(t1 - t0, 2)}
