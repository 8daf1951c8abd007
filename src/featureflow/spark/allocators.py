"""The allocators of the job's Python processes: set to hand freed pages back at once.

A Python worker holds its partitions' window state between micro-batches and, per
task, allocates a batch's transient columns on top of it. Two allocators serve it:
Arrow's pool (the state tables, the batch's Arrow columns) and glibc's ``malloc``
(numpy arrays, Python objects, the kernels' buffers). Each keeps freed pages by
default, so a worker's RSS is the state, plus the transients it allocates, plus what
the allocators kept of earlier transients:

- pyarrow's default pool on Linux, mimalloc, keeps most of a task's freed columns.
  Measured in 10 M-event runs of the job (``bench/stream.py``, 1 M records a
  micro-batch, 8 shuffle partitions, 2 cores, Redis, 2026-12-03; 370 MiB of state),
  the workers' growth kept at the run's end and at its peak: mimalloc 722-808 MiB
  kept (1.95-2.18x the state) and 1,038-1,245 MiB at the peak in four runs;
  jemalloc 559 MiB kept (1.51x), 1,064 MiB at the peak; the system allocator 1,202
  and 1,280 MiB. So Arrow allocates from jemalloc (:func:`use_returning_allocators`).
- Arrow's jemalloc purges a freed page only after a decay of 1 s (its build's
  ``dirty_decay_ms:1000,muzzy_decay_ms:1000``), per arena, and the state host runs
  the executor's tasks on threads that each have an arena. :data:`JEMALLOC_CONF`
  sets the decay to 0.
- glibc raises its ``mmap`` threshold each time a large block is freed (up to
  32 MiB), so after the first batch most numpy columns come from the heap, and its
  free chunks stay in RSS: 90-140 MiB of the state host's heap at its peak was free.
  :data:`GLIBC_MALLOC` fixes the threshold at 128 KiB, so a large array is mapped on
  its own and unmapped when freed, and trims the heap's top past 128 KiB.

Measured with these settings against jemalloc alone, featureflow alone on the same
10 M-event command, one run each (2026-12-04 14:54-15:03 UTC; the state host's RSS
split by ``mallinfo2`` and Arrow's pool, a measurement patch not kept): growth kept
539 -> 299 MiB (1.46x -> 0.81x the state), at the peak 894 -> 761 MiB (2.41x ->
2.06x), 140,995 -> 146,520 events/s after batch 0. The pages a task frees are faulted
in again by the next one: that cost did not show at this scale (jemalloc's decay
alone: 140,922 events/s).

The executors' workers get the settings from their environment, which glibc and
jemalloc read as a process starts (:func:`spark_conf`, as ``spark.executorEnv``;
the daemon that forks the workers starts with it). A process that started without
them (the driver, which runs small batches itself) gets the same from
:func:`use_returning_allocators`, for the arenas and blocks it allocates from then
on. A setting the deployment made (``$ARROW_DEFAULT_MEMORY_POOL``,
``$JE_ARROW_MALLOC_CONF``, ``$MALLOC_MMAP_THRESHOLD_``, ``$MALLOC_TRIM_THRESHOLD_``)
is kept, and a pyarrow built without jemalloc keeps its default pool.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os

import pyarrow as pa

POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
"""pyarrow's own setting of its default pool (``jemalloc``, ``mimalloc``, ``system``)."""
JEMALLOC_ENV = "JE_ARROW_MALLOC_CONF"
"""Options of Arrow's jemalloc, read as it starts (its symbols carry the ``je_arrow_``
prefix, and so does the variable)."""
JEMALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"
"""Purge freed pages at once (Arrow's build: after 1 s)."""
GLIBC_MALLOC: dict[str, int] = {"MALLOC_MMAP_THRESHOLD_": 128 << 10,
                                "MALLOC_TRIM_THRESHOLD_": 128 << 10}  # fmt: skip
"""glibc's ``malloc`` settings (``mallopt(3)``), as the environment names them: blocks
of 128 KiB or more are mapped on their own; the heap's top is trimmed past 128 KiB."""
_MALLOPT = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_MMAP_THRESHOLD_": -3}
"""``mallopt``'s parameter numbers (``M_TRIM_THRESHOLD``, ``M_MMAP_THRESHOLD``)."""

_chosen: str | None = None
"""The Arrow pool's backend this process settled on (None: not yet)."""


def environment() -> dict[str, str]:
    """The allocators' settings as a process's environment, except those this one's
    environment already sets: for processes to start with (glibc and jemalloc read
    them as a process starts)."""
    wanted = {JEMALLOC_ENV: JEMALLOC_CONF} | {name: str(v) for name, v in GLIBC_MALLOC.items()}
    return {name: value for name, value in wanted.items() if not os.environ.get(name)}


def spark_conf() -> dict[str, str]:
    """Spark settings that start the executors' Python workers with :func:`environment`."""
    return {f"spark.executorEnv.{name}": value for name, value in environment().items()}


def use_returning_allocators() -> str:
    """Once per process: make jemalloc Arrow's default pool unless ``$ARROW_DEFAULT_MEMORY_POOL``
    names one, set its decay to 0 for the arenas it creates from now on, and glibc's
    thresholds (:data:`GLIBC_MALLOC`), each unless the environment sets it. Returns the
    default pool's backend."""
    global _chosen
    if _chosen is None:
        if not os.environ.get(POOL_ENV):
            with contextlib.suppress(NotImplementedError):  # pyarrow built without jemalloc
                pa.set_memory_pool(pa.jemalloc_memory_pool())
        if not os.environ.get(JEMALLOC_ENV):
            with contextlib.suppress(NotImplementedError):
                pa.jemalloc_set_decay_ms(0)
        _set_glibc_malloc()
        _chosen = pa.default_memory_pool().backend_name
    return _chosen


def _set_glibc_malloc() -> None:
    name = ctypes.util.find_library("c")
    if name is None or "libc.so" not in name:  # not glibc: its own defaults
        return
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return
    for env, value in GLIBC_MALLOC.items():
        if not os.environ.get(env):
            libc.mallopt(_MALLOPT[env], value)
