"""A worker settles once per process, and again after a task that imported modules: what
is alive then is frozen, what comes later is still collected."""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import sys
import weakref
from multiprocessing.connection import Connection


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def _in_child(out: Connection) -> None:
    from featureflow.spark import worker_gc

    alive = _Node()
    before = len(gc.get_objects())
    first, again = worker_gc.settle(), worker_gc.settle()
    # the collector's generations (frozen objects are left out)
    frozen = gc.get_freeze_count() > 0 and not any(o is alive for o in gc.get_objects())
    walked = len(gc.get_objects())
    # a task that imports (a topic pass after a parse) settles again
    module = next(name for name in ("wave", "sndhdr", "mailbox") if name not in sys.modules)
    importlib.import_module(module)
    imported_then_settled = worker_gc.settle() and not worker_gc.settle()
    later = _Node()
    gone = weakref.ref(later)
    del later
    gc.collect()
    kept = weakref.ref(alive)
    del alive
    gc.collect()
    out.send((first, again, frozen, walked < before // 10, imported_then_settled,
              gone() is None, kept() is not None))  # fmt: skip


def test_settle_freezes_once_per_imports_and_later_garbage_is_collected() -> None:
    context = multiprocessing.get_context("fork")  # a fresh pid, as a forked Python worker
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_in_child, args=(send,))
    child.start()
    first, again, frozen_all, walks_few, imported_then_settled, later_freed, frozen_kept = (
        receive.recv()
    )
    child.join(30)
    assert child.exitcode == 0
    assert first and not again  # once per process
    assert frozen_all  # everything alive at the first task's end is frozen
    assert walks_few  # so a collection no longer walks it
    assert imported_then_settled  # once more after an import, then not again
    assert later_freed  # a cycle made after the freeze is still collected
    assert frozen_kept  # (the price: a frozen cycle stays)
