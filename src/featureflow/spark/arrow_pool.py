"""Arrow's memory pool in the job's Python processes: jemalloc, which returns freed pages.

A Python worker holds its partitions' window state between micro-batches and, per
task, allocates a batch's transient columns on top of it; its RSS between tasks is
the state plus what the allocator kept of those transients. pyarrow's default pool
on Linux (mimalloc) keeps most of it. Measured in 10 M-event runs of the job
(``bench/stream.py``, 1 M records a micro-batch, 8 shuffle partitions, 2 cores, Redis,
2026-12-03; 370 MiB of state), the workers' growth kept at the end of the run and at
the peak:

- mimalloc (pyarrow's default): 722-808 MiB kept (1.95-2.18x the state), 1,038-1,245
  MiB at the peak, in four runs;
- jemalloc: 559 MiB kept (1.51x), 1,064 MiB at the peak;
- the system allocator: 1,202 MiB kept, 1,280 MiB at the peak.

jemalloc hands dirty pages back after a delay instead of at once, so the next task
does not fault them all in again: the flat-cost topic batch (200 k events over 24 h of
state, ``bench/stream_flat_topic.py``) took 1.685 s (1.011 s of CPU) with it against
1.716 s (1.076 s) with mimalloc, the same hour. (Handing every free page back after
each task cost 13 %: :func:`featureflow.spark.topic_pass.after_task`.)

A deployment that names a pool in ``$ARROW_DEFAULT_MEMORY_POOL`` keeps it, and a
pyarrow built without jemalloc keeps its default.
"""

from __future__ import annotations

import contextlib
import os

import pyarrow as pa

POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
"""pyarrow's own setting of its default pool (``jemalloc``, ``mimalloc``, ``system``)."""

_chosen: str | None = None
"""The backend this process settled on (None: not yet)."""


def use_returning_pool() -> str:
    """Make jemalloc Arrow's default pool in this process, once, unless
    ``$ARROW_DEFAULT_MEMORY_POOL`` names one; returns the default pool's backend."""
    global _chosen
    if _chosen is None:
        if not os.environ.get(POOL_ENV):
            with contextlib.suppress(NotImplementedError):  # pyarrow built without jemalloc
                pa.set_memory_pool(pa.jemalloc_memory_pool())
        _chosen = pa.default_memory_pool().backend_name
    return _chosen
