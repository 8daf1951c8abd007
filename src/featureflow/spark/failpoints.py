"""Failpoints: SIGKILL the stream job at a named point of a micro-batch, for crash tests.

Armed only by the environment variable ``FEATUREFLOW_FAILPOINT`` (unset in
production, where every call here is one dictionary lookup)::

    FEATUREFLOW_FAILPOINT=<name>          the first time any process of the job reaches <name>
    FEATUREFLOW_FAILPOINT=<name>@<batch>  only in micro-batch <batch>

Points (in the order a micro-batch reaches them):

- ``mid_online_write``: on an executor, after half of a partition's online rows are
  written and before the other half;
- ``mid_offline_write``: on an executor, after a partition's history file is written
  to its temporary name and before it is moved into place;
- ``after_state_save``: on the driver, after every view saved its state and the
  watermarks of the batch, before ``foreachBatch`` returns (so before Spark commits);
- ``mid_session_close``: on an executor, in the sessions close at the end of a run
  (:class:`~featureflow.spark.topic_pass.SessionCloser`, its ``<batch>`` the settled
  batch), after one partition's closed sessions and state are written, while
  other partitions may still be closing.

Reaching an armed point kills every process of the job's session with SIGKILL:
the job must run as the leader of its own session (``setsid``, or
``subprocess.Popen(..., start_new_session=True)`` as the tests do), so that
the driver, the JVM and the Python workers (which Spark moves into process
groups of their own, but not out of the session) die together, as in a
machine failure. ``FEATUREFLOW_FAILPOINT_ONCE=<file>`` makes a point fire only
if the file does not exist yet (it is created first), so a restart with the
same environment runs through; the marker says which point fired, in which
batch (the proof a test reads: a worker's last words on stderr die with the
JVM that relays them).
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "FEATUREFLOW_FAILPOINT"
ONCE_ENV = "FEATUREFLOW_FAILPOINT_ONCE"
POINTS = ("mid_online_write", "mid_offline_write", "after_state_save", "mid_session_close")


def armed(name: str, batch: int) -> bool:
    """Whether reaching ``name`` in micro-batch ``batch`` kills the job."""
    spec = os.environ.get(ENV)
    if not spec:
        return False
    point, _, at_batch = spec.partition("@")
    if point not in POINTS:
        msg = f"{ENV}={spec!r}: unknown failpoint {point!r}; known: {', '.join(POINTS)}"
        raise ValueError(msg)
    return point == name and (not at_batch or int(at_batch) == batch)


def reach(name: str, batch: int) -> None:
    """Kill the job here if ``name`` is armed for ``batch`` (see the module docstring)."""
    if not armed(name, batch):
        return
    once = os.environ.get(ONCE_ENV)
    if once:
        try:
            with open(once, "x") as marker:
                marker.write(f"{name}@{batch} pid {os.getpid()}\n")
        except FileExistsError:
            return
    print(f"featureflow failpoint {name} reached in batch {batch}: SIGKILL", file=sys.stderr,
          flush=True)  # fmt: skip
    session = os.getsid(0)
    if session != os.getpgrp() and _is_spark_job(session):
        os.killpg(session, signal.SIGKILL)  # the driver and the JVM
    os.killpg(os.getpgrp(), signal.SIGKILL)  # this process and its group


def _is_spark_job(pid: int) -> bool:
    """Whether process ``pid`` (the session leader) runs Spark: never kill the session of a
    shell or test runner that started the job without a session of its own."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"spark" in cmdline.read()
    except OSError:
        return False
