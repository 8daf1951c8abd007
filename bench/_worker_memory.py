"""Resident memory of a Spark job's Python workers, sampled from /proc while the job runs.

Spark's Python workers (``pyspark.daemon`` and the workers it forks) are
descendants of the ``spark-submit`` process. :class:`WorkerMemory` walks that
process tree every ``interval_s`` and keeps, per sample, the summed RSS of the
workers, and per worker its peak: a worker holds its partitions' window state
between micro-batches (:mod:`featureflow.spark.state`), so their growth over a
run is the state's footprint plus what the kernels and Arrow allocate.
Linux only (reads ``/proc/<pid>/{stat,status,cmdline}``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _descendants(pid: int) -> list[int]:
    seen, todo = [], [pid]
    while todo:
        current = todo.pop()
        for child in _children(current):
            if child not in seen:
                seen.append(child)
                todo.append(child)
    return seen


def _is_python_worker(pid: int) -> bool:
    try:
        return b"pyspark" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass(eq=False)
class WorkerMemory(threading.Thread):
    """Samples the Python workers under ``root_pid`` until :meth:`stop`."""

    root_pid: int
    interval_s: float = 1.0
    samples: list[tuple[float, int]] = field(default_factory=list)
    """(monotonic s, summed worker RSS bytes) per sample."""
    peak_by_worker: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            workers = [pid for pid in _descendants(self.root_pid) if _is_python_worker(pid)]
            sizes = {pid: _rss_bytes(pid) for pid in workers}
            for pid, size in sizes.items():
                self.peak_by_worker[pid] = max(size, self.peak_by_worker.get(pid, 0))
            self.samples.append((time.monotonic(), sum(sizes.values())))

    def stop(self) -> None:
        self._stopped.set()
        self.join(10)

    def summary(self) -> dict[str, Any]:
        """Peak summed RSS, the largest worker's peak, and the summed RSS in the first and
        last tenth of the samples that saw any worker (MiB)."""
        busy = [size for _, size in self.samples if size > 0]
        if not busy:
            return {"samples": 0}
        tenth = max(1, len(busy) // 10)
        mib = 1 << 20
        return {
            "samples": len(busy),
            "workers": len(self.peak_by_worker),
            "peak_total_mib": round(max(busy) / mib, 1),
            "peak_worker_mib": round(max(self.peak_by_worker.values()) / mib, 1),
            "first_tenth_mib": round(max(busy[:tenth]) / mib, 1),
            "last_tenth_mib": round(max(busy[-tenth:]) / mib, 1),
        }
