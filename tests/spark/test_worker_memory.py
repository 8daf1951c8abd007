"""A worker hands its allocators' free pages back between tasks."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from featureflow.spark import worker_memory


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(worker_memory._malloc_trim() is None, reason="needs glibc's malloc_trim")
def test_free_pages_between_live_arrays_go_back_to_the_os() -> None:
    """Arrays below malloc's mmap threshold come from its heap; freeing every other
    one leaves holes that free() alone never returns (only the heap's top is)."""
    arrays = [np.ones(8_000) for _ in range(6_000)]  # 64 kB each, 384 MB in all
    del arrays[::2]
    before = _rss_bytes()
    worker_memory.release_unused()
    returned = before - _rss_bytes()
    assert returned > 100 << 20, f"only {returned >> 20} MiB returned"
    assert sum(float(a[0]) for a in arrays) == len(arrays)  # the live ones are intact


def test_arrow_memory_in_use_stays() -> None:
    table = pa.table({"x": np.arange(1_000_000)})
    in_use = pa.total_allocated_bytes()
    worker_memory.release_unused()
    assert pa.total_allocated_bytes() == in_use
    assert table.column("x")[999_999].as_py() == 999_999
