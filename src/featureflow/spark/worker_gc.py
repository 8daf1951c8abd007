"""Keep a reused Python worker's per-task garbage collection cheap.

PySpark's daemon runs ``gc.collect()`` in a reused Python worker after every
task (``pyspark/daemon.py``). A full collection walks every object the worker
holds, and a featureflow worker holds a lot once it has imported its modules
(pyarrow, Feast, pydantic, typeguard): 60-120 ms a collection here. In a live
run at 20,000 events/s on 2 cores, py-spy found 86 % of the parse workers' CPU
in that one call (two tasks a micro-batch), CPU that the driver's pass of the
same batch was waiting for.

:func:`settle` runs at the end of a process's first task: a full collection,
then ``gc.freeze()``, which moves everything still alive (the imported
modules, the cached Feast store) to a generation the collector no longer
walks. Objects created later are collected as before, so the per-task
collection costs what the task left behind. It runs again after a task that
imported modules: a worker's first task may be a parse, and its first topic
pass then imports Feast and the online stores (py-spy, 1 M records a
micro-batch: with one settle per process the daemon's collection was still
11 % of the workers' CPU). The cost: an object alive at such a moment that
later becomes part of an unreachable cycle is never freed (objects without
cycles still are, by reference counting); what lives then is long-lived by
nature (modules, caches), or the state a worker holds, whose versions are
dropped by reference.
"""

from __future__ import annotations

import gc
import os
import sys

_settled: tuple[int, int] | None = None
"""The pid of the process that last settled and how many modules it had imported then
(a forked worker starts unsettled)."""


def settle() -> bool:
    """Collect, then freeze what survives, at a process's first call and after any call
    whose task imported modules; returns whether it did now."""
    global _settled
    now = (os.getpid(), len(sys.modules))
    if _settled == now:
        return False
    gc.collect()
    gc.freeze()
    _settled = now
    return True
