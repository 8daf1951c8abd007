"""The allocators of the job's Python processes: Arrow's jemalloc, and glibc's ``malloc``
set to hand large freed blocks back at once.

A Python worker holds its partitions' window state between micro-batches and, per
task, allocates a batch's transient columns on top of it. Two allocators serve it:
Arrow's pool (the state tables, the batch's Arrow columns, the kernels' pooled
outputs) and glibc's ``malloc`` (numpy arrays, Python objects). What a worker's RSS
holds beyond the state and the transients is what they kept of earlier transients:

- pyarrow's default pool on Linux, mimalloc, keeps most of a task's freed columns.
  Measured in 10 M-event runs of the job (``bench/stream.py``, 1 M records a
  micro-batch, 8 shuffle partitions, 2 cores, Redis, 2026-12-03; 370 MiB of state),
  the workers' growth kept at the run's end and at its peak: mimalloc 722-808 MiB
  kept (1.95-2.18x the state) and 1,038-1,245 MiB at the peak in four runs;
  jemalloc 559 MiB kept (1.51x), 1,064 MiB at the peak; the system allocator 1,202
  and 1,280 MiB. So Arrow allocates from jemalloc (:func:`use_returning_allocators`).
  Its freed pages decay over 1 s (Arrow's build), so the next task reuses them
  without faulting them in again. A decay of 0 (with the glibc settings below) made a
  topic batch over 24 h of state (``bench/stream_flat_topic.py``) take 1.13-1.27 s
  against 0.93-1.03 s, so it is not set.
- glibc raises its ``mmap`` threshold each time a large block is freed (up to
  32 MiB), so after the first batch most numpy columns come from the heap, and its
  free chunks stay in RSS: at the state host's peak in a 10 M run, 232-276 MiB of
  heap held 151-189 MiB in use. :data:`GLIBC_MALLOC` fixes the threshold at 128 KiB,
  so a large array is mapped on its own and unmapped when freed, and trims the heap's
  top past 128 KiB. The topic batch over 24 h of state took 0.93-1.03 s with it against
  0.91 s with thresholds of 32 and 64 MiB (where glibc's own grow to): the compute's
  state-sized arrays are mapped afresh each batch.

The Python workers' summed RSS at the peak of a 10 M-event run on Redis (2026-12-04
afternoon): 1,185-1,512 MiB with jemalloc alone (four featureflow-only runs; three of
them 1,437-1,512), 1,303-1,311 MiB with these settings (two runs).

The executors' workers get the glibc settings from their environment, which glibc
reads as a process starts (:func:`spark_conf`, as ``spark.executorEnv``: the daemon
that forks the workers starts with it). A process that started without them (the
driver, which runs small batches itself) gets the same by ``mallopt`` from
:func:`use_returning_allocators`. A setting the deployment made
(``$ARROW_DEFAULT_MEMORY_POOL``, ``$MALLOC_MMAP_THRESHOLD_``,
``$MALLOC_TRIM_THRESHOLD_``) is kept, and a pyarrow built without jemalloc keeps its
default pool.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Mapping

import pyarrow as pa

POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
"""pyarrow's own setting of its default pool (``jemalloc``, ``mimalloc``, ``system``)."""
GLIBC_MALLOC: dict[str, int] = {"MALLOC_MMAP_THRESHOLD_": 128 << 10,
                                "MALLOC_TRIM_THRESHOLD_": 128 << 10}  # fmt: skip
"""glibc's ``malloc`` settings (``mallopt(3)``), as the environment names them: blocks
of 128 KiB or more are mapped on their own; the heap's top is trimmed past 128 KiB."""
_MALLOPT = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_MMAP_THRESHOLD_": -3}
"""``mallopt``'s parameter numbers (``M_TRIM_THRESHOLD``, ``M_MMAP_THRESHOLD``)."""

_chosen: str | None = None
"""The Arrow pool's backend this process settled on (None: not yet)."""


def environment(current: Mapping[str, str] = os.environ) -> dict[str, str]:
    """glibc's settings as a process's environment, except those ``current`` (this
    process's environment) already sets: for processes to start with (glibc reads them
    as a process starts)."""
    return {name: str(value) for name, value in GLIBC_MALLOC.items() if not current.get(name)}


def spark_conf(current: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Spark settings that start the executors' Python workers with :func:`environment`."""
    return {f"spark.executorEnv.{name}": value for name, value in environment(current).items()}


def use_returning_allocators() -> str:
    """Once per process: make jemalloc Arrow's default pool unless ``$ARROW_DEFAULT_MEMORY_POOL``
    names one, and set glibc's thresholds (:data:`GLIBC_MALLOC`) that the environment
    does not set. Returns the default pool's backend."""
    global _chosen
    if _chosen is None:
        if not os.environ.get(POOL_ENV):
            with contextlib.suppress(NotImplementedError):  # pyarrow built without jemalloc
                pa.set_memory_pool(pa.jemalloc_memory_pool())
        _set_glibc_malloc()
        _chosen = pa.default_memory_pool().backend_name
    return _chosen


def _set_glibc_malloc() -> None:
    libc = ctypes.CDLL(None)  # the symbols the process already has: its C library's
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return  # not glibc: its own defaults
    for env, value in GLIBC_MALLOC.items():
        if not os.environ.get(env):
            libc.mallopt(_MALLOPT[env], value)
