"""The stream benchmark's report (bench/stream.py): a run's wall time from its metrics
lines, and where the workers' peak memory growth fell among its micro-batches."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


# The benchmarks import their helpers from bench/ (stream.py puts it first on sys.path
# itself); put sys.path back after loading them, or bench/backfill.py would shadow the
# tests' own backfill package for every test collected later.
_PATH = list(sys.path)
sys.path.insert(0, str(BENCH))
try:
    stream = _module("stream")
    worker_memory = _module("_worker_memory")
finally:
    sys.path[:] = _PATH

MIB = 1 << 20


def _lines() -> list[dict[str, object]]:
    """Two views' metrics lines of three micro-batches (epoch s): batch 0 runs 100-110,
    batch 1 111-115, batch 2 116-120; each view's line has the batch's duration."""
    lines = []
    for batch_id, end, duration in ((0, 110.0, 10.0), (1, 115.0, 4.0), (2, 120.0, 4.0)):
        for view, lag in (("rolling", 0.0), ("sessions", 0.2)):
            lines.append({"view": view, "batch_id": batch_id, "records": 1_000,
                          "end_s": end + lag, "duration_s": duration})  # fmt: skip
    return lines


def test_a_run_spans_its_first_batch_start_to_its_last_batch_end() -> None:
    run = stream.job_run("featureflow", 3_000, _lines())

    assert run.interval == (100.0, 120.2)
    assert run.wall_s == pytest.approx(20.2)
    assert stream.job_run("featureflow", 0, []).note == "no metrics line with records"


@pytest.mark.parametrize(
    ("at", "batch_id", "moment"),
    [
        (105.0, 0, "in batch 0 of 3"),
        (110.1, 0, "in batch 0 of 3"),  # the second view's line ends the batch
        (110.5, 0, "between batches 0 and 1"),
        (117.0, 2, "in batch 2 of 3"),
        (123.2, 2, "3.0 s after the last batch"),
        (99.0, None, "before the first batch"),
        (None, None, "-"),
    ],
)
def test_the_peak_is_placed_among_the_batches(
    at: float | None, batch_id: int | None, moment: str
) -> None:
    run = stream.job_run("featureflow", 3_000, _lines())
    run.memory = {"peak_growth_epoch_s": at} if at is not None else {}

    assert stream.peak_moment(run) == (batch_id, moment)


def _with_state(at: float) -> object:
    """The run of :func:`_lines` whose views hold (rolling, sessions) bytes after each
    batch: 0: (10, 20); 1: (30, 40); 2: rolling 50, sessions without a line (it holds 40)."""
    lines = [line for line in _lines() if (line["batch_id"], line["view"]) != (2, "sessions")]
    held = {(0, "rolling"): 10, (0, "sessions"): 20, (1, "rolling"): 30,
            (1, "sessions"): 40, (2, "rolling"): 50}  # fmt: skip
    for line in lines:
        line["state_bytes"] = held[(line["batch_id"], line["view"])]
    run = stream.job_run("featureflow", 3_000, lines)
    run.memory = {"peak_growth_epoch_s": at}
    return run


def test_the_state_after_each_batch_carries_a_view_without_a_line() -> None:
    assert stream.state_after_batches(_with_state(0.0)) == {0: 30, 1: 70, 2: 90}


@pytest.mark.parametrize(
    ("at", "held"),
    [
        (105.0, 30),  # in batch 0: nothing before it, what it left
        (112.0, 30),  # in batch 1: the smaller of before (30) and after (70)
        (110.5, 30),  # between batches 0 and 1: what batch 0 left
        (125.0, 90),  # after the last batch
        (99.0, None),
    ],
)
def test_the_state_held_at_the_peak(at: float, held: int | None) -> None:
    assert stream.state_at_peak(_with_state(at)) == held


def test_the_memory_summary_says_when_the_peak_growth_was_sampled() -> None:
    sampler = worker_memory.WorkerMemory(root_pid=1, baseline_bytes=100 * MIB)
    for at, sizes in ((50.0, {7: 150 * MIB, 8: 90 * MIB}), (51.0, {7: 400 * MIB, 8: 130 * MIB}),
                      (52.0, {7: 300 * MIB})):  # fmt: skip
        sampler.samples.append((at, sum(sizes.values())))
        sampler.growth_samples.append(sum(max(0, s - 100 * MIB) for s in sizes.values()))
        sampler.sampled_at.append(1_000.0 + at)
        for pid, size in sizes.items():
            sampler.peak_by_worker[pid] = max(size, sampler.peak_by_worker.get(pid, 0))
            sampler.by_worker.setdefault(pid, []).append((at, size))

    summary = sampler.summary()

    assert summary["growth_mib"] == 330.0  # (400 - 100) + (130 - 100) at 51 s
    assert summary["peak_growth_epoch_s"] == 1_051.0
