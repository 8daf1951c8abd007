"""The threads the parts of a kernel call run on (the kernels release the GIL)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """A process-wide pool for the parts the calling thread does not run itself."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(workers, thread_name_prefix="featureflow-ops")
        return _executor


def on_threads(call: Callable[..., Any], calls: list[tuple[Any, ...]]) -> None:
    """``call(*args)`` for each args: the first here, the others on the pool."""
    others = [_pool(len(calls) - 1).submit(call, *c) for c in calls[1:]] if calls[1:] else []
    call(*calls[0])
    for f in others:
        f.result()
