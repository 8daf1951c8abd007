"""A progress bar on the driver: Spark tasks done of the backfill's jobs, polled twice a second.

Spark reports progress per task, not per row, so the bar counts finished
tasks over every stage of the jobs started under one job group (read,
shuffle, compute). Drawn with rich on a terminal; elsewhere rich prints
nothing until the end, so logs stay clean.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from pyspark import SparkContext

T = TypeVar("T")

POLL_S = 0.5


def _task_counts(context: SparkContext, group: str) -> tuple[int, int]:
    tracker = context.statusTracker()
    done = total = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done += stage.numCompletedTasks
                total += stage.numTasks
    return done, total


def with_progress(context: SparkContext, description: str, action: Callable[[], T]) -> T:
    """Run ``action`` (which starts Spark jobs) under a job group, showing its tasks' progress."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    group = f"featureflow-{threading.get_ident()}-{id(action)}"
    context.setJobGroup(group, description)
    finished = threading.Event()
    with Progress(
        "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
        "tasks", TimeElapsedColumn(), transient=False,
    ) as bar:  # fmt: skip
        task = bar.add_task(description, total=None)

        def poll() -> None:
            while not finished.wait(POLL_S):
                done, total = _task_counts(context, group)
                bar.update(task, completed=done, total=total or None)

        poller = threading.Thread(target=poll, name="featureflow-progress", daemon=True)
        poller.start()
        try:
            return action()
        finally:
            finished.set()
            poller.join()
            done, total = _task_counts(context, group)
            bar.update(task, completed=done, total=total or done)
