"""A worker's free allocator pages go back to the system after a task
(featureflow.spark.worker_memory)."""

from __future__ import annotations

import subprocess
import sys

_CHILD = """
import numpy as np, pyarrow as pa
from featureflow.spark.worker_memory import release_free_pages

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) >> 10

before = rss_mib()
buffers = [pa.allocate_buffer(4 << 20) for _ in range(64)]  # 256 MiB from Arrow's pool
for buffer in buffers:
    np.frombuffer(buffer, dtype=np.uint8)[:] = 1  # touched: resident
del buffers, buffer
freed = rss_mib()
release_free_pages()
print(before, freed, rss_mib())
"""


def test_free_pages_of_arrows_pool_are_returned() -> None:
    """256 MiB allocated, touched and freed stay resident in Arrow's pool until
    released; after :func:`release_free_pages` the process is back near where it was.
    (A fresh process: the suite's own allocations would blur the figures.)"""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True
    )
    before, freed, released = (int(x) for x in done.stdout.split())
    assert freed - before > 200, "the pool kept the freed pages (the case released)"
    assert released - before < 40
