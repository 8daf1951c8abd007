"""Resident memory of a Spark job's Python workers, sampled from /proc while the job runs.

Spark's Python workers (``pyspark.daemon`` and the workers it forks) are
descendants of the ``spark-submit`` process. :class:`WorkerMemory` walks that
process tree every ``interval_s`` and keeps, per sample, the summed RSS of the
workers, and per worker its peak: a worker holds its partitions' window state
between micro-batches (:mod:`featureflow.spark.state`), so their growth over a
run is the state's footprint plus what the kernels and Arrow allocate.

A worker's size before any batch (the interpreter with pyarrow, Feast's
repo, the Mojo kernels and the job's modules loaded) is not growth:
:func:`baseline_bytes` measures it in a fresh process with the same imports,
and :meth:`WorkerMemory.summary` reports each worker's peak above it. The
summed RSS of the run's first and last tenth is kept beside it; its first
tenth often sees fewer workers than the last, or workers still importing.
Linux only (reads ``/proc/<pid>/{stat,status,cmdline}``).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _process_cpu import descendants

SHUTDOWN_S = 1.0
"""The job's last seconds, when its workers exit: not sampled for the kept growth."""


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


_BASELINE = """
import sys
import pyspark.daemon, pyspark.worker  # noqa: F401  (what a forked worker starts from)
from featureflow import ops, schema  # noqa: F401
from featureflow.repo import cached_store
from featureflow.spark import topic_pass  # noqa: F401
ops.backend()  # loads the kernels
cached_store(sys.argv[1])  # Feast, imported as a worker imports it (repo.load_store)
from featureflow import online  # noqa: F401
for line in open("/proc/self/status"):
    if line.startswith("VmRSS:"):
        print(int(line.split()[1]) * 1024)
"""


def baseline_bytes(repo: str, env: dict[str, str] | None = None) -> int:
    """RSS of a fresh Python that loaded what a worker loads before its first batch:
    pyspark's worker modules, the job's modules, the kernels and ``repo``'s Feast store."""
    done = subprocess.run(
        [sys.executable, "-c", _BASELINE, repo], capture_output=True, text=True,
        env=env, check=True,
    )  # fmt: skip
    return int(done.stdout.split()[-1])


@dataclass(eq=False)
class WorkerMemory(threading.Thread):
    """Samples the Python workers under ``root_pid`` until :meth:`stop`."""

    root_pid: int
    baseline_bytes: int = 0
    """A worker's RSS before any batch (:func:`baseline_bytes`); 0: not measured."""
    interval_s: float = 0.5
    samples: list[tuple[float, int]] = field(default_factory=list)
    """(monotonic s, summed worker RSS bytes) per sample."""
    growth_samples: list[int] = field(default_factory=list)
    """Per sample: the workers' RSS above the baseline, summed over those alive then."""
    sampled_at: list[float] = field(default_factory=list)
    """Per sample: its epoch seconds (to place the peak among the job's batches)."""
    peak_by_worker: dict[int, int] = field(default_factory=dict)
    by_worker: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    """Per worker pid: (monotonic s, RSS bytes) per sample."""

    def __post_init__(self) -> None:
        super().__init__(daemon=True)
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            workers = [pid for pid in descendants(self.root_pid) if _is_python_worker(pid)]
            sizes = {pid: _rss_bytes(pid) for pid in workers}
            now = time.monotonic()
            for pid, size in sizes.items():
                self.peak_by_worker[pid] = max(size, self.peak_by_worker.get(pid, 0))
                self.by_worker.setdefault(pid, []).append((now, size))
            self.samples.append((now, sum(sizes.values())))
            self.growth_samples.append(
                sum(max(0, size - self.baseline_bytes) for size in sizes.values()))
            self.sampled_at.append(time.time())

    def stop(self) -> None:
        self._stopped.set()
        self.join(10)

    def summary(self) -> dict[str, Any]:
        """Peak summed RSS, the largest worker's peak, the summed RSS in the first and
        last tenth of the samples that saw any worker, the baseline and the workers'
        growth (MiB). The daemon, which only forks workers, stays under the baseline
        and adds nothing.

        ``growth_mib`` is the workers' peak growth: the largest, over the samples, of
        the RSS above the baseline summed over the workers alive at that sample.
        ``sum_of_peaks_mib`` (each worker's own peak above the baseline, summed) is
        kept beside it: it adds the peaks of workers that never lived at the same
        time (Spark forks a new worker when one exits, e.g. after idling) and of
        peaks at different moments, so it overstates what the machine held.
        ``workers_seen`` lists each worker: when it was first and last seen (s
        from the first sample) and its peak RSS (MiB); ``peak_growth_epoch_s`` when the
        peak growth was sampled (epoch s).

        ``kept_growth_mib`` is what the workers keep between tasks at the run's end:
        per worker alive then, its lowest RSS in the run's last tenth before the
        job's shutdown (:data:`SHUTDOWN_S`; a worker between tasks holds its state,
        a batch's transient columns are gone) above the baseline, summed."""
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
            "baseline_mib": round(self.baseline_bytes / mib, 1),
            "growth_mib": round(max(self.growth_samples) / mib, 1)
            if self.baseline_bytes else None,
            "sum_of_peaks_mib": round(
                sum(max(0, peak - self.baseline_bytes) for peak in self.peak_by_worker.values())
                / mib, 1,
            ) if self.baseline_bytes else None,
            "workers_seen": [
                {"pid": pid, "first_s": round(series[0][0] - self.samples[0][0], 1),
                 "last_s": round(series[-1][0] - self.samples[0][0], 1),
                 "peak_mib": round(self.peak_by_worker[pid] / mib, 1)}
                for pid, series in self.by_worker.items()
            ],
            "kept_growth_mib": round(self._kept_growth_bytes() / mib, 1)
            if self.baseline_bytes else None,
            "peak_growth_epoch_s": self.sampled_at[self.growth_samples.index(
                max(self.growth_samples))],
        }

    def _kept_growth_bytes(self) -> int:
        start, end = self.samples[0][0], self.samples[-1][0]
        last_tenth = end - (end - start) / 10
        # the job's last second is its shutdown: a worker that is exiting frees its
        # state, and a sample then would read as a worker between tasks holding less
        running_until = end - SHUTDOWN_S
        kept = 0
        for series in self.by_worker.values():
            late = [size for at, size in series if last_tenth <= at <= running_until]
            if late:
                kept += max(0, min(late) - self.baseline_bytes)
        return kept
