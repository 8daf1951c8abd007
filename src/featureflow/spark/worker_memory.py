"""Handing a Python worker's freed memory back to the operating system between tasks.

A micro-batch's compute allocates and frees far more than the state it keeps
(the batch's columns, sort orders, feature outputs). Both allocators a worker
uses keep freed pages for reuse: Arrow's pool (mimalloc or jemalloc) and
glibc's malloc (numpy's small and medium arrays, Python objects). Between
micro-batches nothing reuses them for seconds, so the worker's resident size
would hold the largest batch's peak on top of its state for the rest of its
life. :func:`release_unused` returns those pages after each task; it costs
well under a millisecond when there is little to return.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

import pyarrow as pa


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None where the C library has none: musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_unused() -> None:
    """Return the pages Arrow's default pool and glibc's malloc hold free to the OS."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
