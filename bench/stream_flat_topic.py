"""Flat per-batch cost of a whole topic batch: both views and their one Redis write.

``bench/stream_flat.py`` times each view's phases alone, without the online write. The
job runs a partition's batch as one topic pass
(:func:`featureflow.spark.online_sink.run_views`): both example views' state loads and
computes, one online write of both views' rows (Redis, one hash per entity), the offline
writes and the state saves. This times that call for shuffle partition 0, with 24 h of
state behind it (10 M events, held resident with what the worker carries, as in a
running job) and with empty state, on the same events:

- the events, the state and the batches are ``stream_flat.py``'s (same generator, seed
  and watermark rule);
- a local redis-server holds the online store. Before each measured pair, the same
  batch runs once unmeasured on empty state, so both measured writes find every entity
  already stored with the same event times: each is the steady state's update (an
  equal event time replaces), never the cheaper creation of new hashes;
- the process runs with the allocators' settings of the job's Python workers
  (:mod:`featureflow.spark.allocators`).

Writes ``bench/results/stream_flat_topic.{json,md}``::

    python bench/stream_flat_topic.py [--state-events 10000000] [--batch 200000]
                                      [--batches 8] [--label TEXT]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from stream import private_repo  # noqa: E402
from stream_flat import RESULTS, build_state, scale_arguments  # noqa: E402

from featureflow.events import sample  # noqa: E402
from featureflow.infra.redis_server import RedisServer  # noqa: E402
from featureflow.repo import StreamViewSpec, load_store, stream_view_specs  # noqa: E402
from featureflow.spark import allocators  # noqa: E402
from featureflow.spark.offline_sink import OfflineFeatureLog  # noqa: E402
from featureflow.spark.online_sink import EXECUTOR_PHASES, ViewTask, run_views  # noqa: E402
from featureflow.spark.state import StateStore, wait_for_snapshots  # noqa: E402
from featureflow.spark.topic_pass import after_task  # noqa: E402


def topic_batch(specs: list[StreamViewSpec], stores: dict[str, StateStore], repo: str,
                root: Path, batch_id: int, new: dict[str, pa.Table], marks: dict[str, int],
                ) -> dict[str, Any]:  # fmt: skip
    """One topic pass over partition 0: wall seconds, CPU seconds, and the median
    seconds per phase summed over the views (the online write counted once)."""
    tasks = [ViewTask(spec, batch_id, stores[spec.name], marks[spec.name],
                      OfflineFeatureLog(str(root / "offline"), spec.name)) for spec in specs]
    received = {0: {name: table.to_batches() for name, table in new.items()}}
    cpu, wall = time.process_time(), time.perf_counter()
    done = run_views(tasks, repo, batch_id, received)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    # as a reused PySpark worker after each task: the job's own after-task step (drops
    # replaced state versions, freezes long-lived objects for the collector), then the
    # daemon's full collection, outside the timed call
    after_task(batch_id)
    gc.collect()
    phases: dict[str, float] = {}
    views: dict[str, dict[str, float]] = {}
    for _, task, stats in done:
        seconds_of: list[float] = stats["seconds"]  # type: ignore[assignment,unused-ignore]
        views[task.spec.name] = dict(zip(EXECUTOR_PHASES, seconds_of, strict=True))
        for phase, seconds in zip(EXECUTOR_PHASES, seconds_of, strict=True):
            if phase == "online_write":
                phases[phase] = seconds
            else:
                phases[phase] = phases.get(phase, 0.0) + seconds
    return {"batch": batch_id, "wall_s": round(wall, 4), "cpu_s": round(cpu, 4),
            "seconds": {k: round(v, 4) for k, v in phases.items()},
            "views": {name: {k: round(v, 4) for k, v in seconds.items()}
                      for name, seconds in views.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    scale_arguments(parser, batches=8)
    args = parser.parse_args()
    if missing := allocators.environment():  # start as the job's Python workers start
        os.execve(sys.executable, [sys.executable, *sys.argv], os.environ | missing)
    allocators.use_returning_allocators()
    load = [round(x, 2) for x in os.getloadavg()]
    full: list[dict[str, Any]] = []
    empty: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-flat-topic-") as tmp, RedisServer() as redis:
        root = Path(tmp)
        repo = str(private_repo(root, "repo-flat-topic", "unused", redis=redis.connection_string))
        specs = stream_view_specs(load_store(Path(repo)))
        total = args.state_events + args.batch * args.batches
        generated = sample.generate(total, users=args.users, seed=11,
                                    span_s=86_400.0 * total / args.state_events)
        events = pa.table({"user_id": generated.user_id, "event_ns": generated.event_ns,
                           "amount": pa.array(generated.amount, from_pandas=True)})
        del generated
        stores, seen_max = {}, {}
        for spec in specs:
            stores[spec.name] = StateStore(str(root / "state" / spec.name), 1)
            mark = build_state(stores[spec.name], spec, events.slice(0, args.state_events),
                               carried=True)
            seen_max[spec.name] = mark + spec.watermark_ns
            print(f"{spec.name}: state of {args.state_events:,} events built", flush=True)
        for index in range(args.batches):
            batch_id = index + 1
            new, marks = {}, {}
            for spec in specs:  # the job's rule: judged against the watermark before
                marks[spec.name] = seen_max[spec.name] - spec.watermark_ns
                chunk = events.slice(args.state_events + index * args.batch, args.batch)
                new[spec.name] = chunk.filter(pc.greater_equal(chunk.column("event_ns"),
                                                               marks[spec.name]))
                seen_max[spec.name] = max(seen_max[spec.name],
                                          int(pc.max(new[spec.name].column("event_ns")).as_py()))

            def fresh(case: str, index: int = index) -> dict[str, StateStore]:
                return {s.name: StateStore(str(root / case / s.name / str(index)), 1)
                        for s in specs}

            topic_batch(specs, fresh("prime"), repo, root, batch_id, new, marks)
            full.append(topic_batch(specs, stores, repo, root, batch_id, new, marks))
            empty.append(topic_batch(specs, fresh("empty"), repo, root, batch_id, new, marks))
            print(f"batch {batch_id}: 24 h {full[-1]['wall_s']:.3f} s, "
                  f"empty {empty[-1]['wall_s']:.3f} s", flush=True)
        wait_for_snapshots()
    warm = full[1:] or full

    def median(runs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    def phases(runs: list[dict[str, Any]]) -> dict[str, float]:
        return {p: round(statistics.median(r["seconds"].get(p, 0.0) for r in runs), 4)
                for p in runs[0]["seconds"]}

    record = {
        "benchmark": "stream job: a topic batch (both views, one Redis write), empty vs 24 h",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared with other work",
        "recorded": datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_average": [load, [round(x, 2) for x in os.getloadavg()]],
        "scale": {"state_events": args.state_events, "users": args.users,
                  "events_per_batch": args.batch, "batches": args.batches},
        "label": args.label,
        "full": full, "empty": empty,
        "full_median_s": median(warm, "wall_s"), "empty_median_s": median(empty, "wall_s"),
        "ratio": round(median(warm, "wall_s") / median(empty, "wall_s"), 2),
        "ratio_cpu": round(median(warm, "cpu_s") / median(empty, "cpu_s"), 2),
        "full_phases": phases(warm), "empty_phases": phases(empty),
    }
    (RESULTS / "stream_flat_topic.json").write_text(json.dumps(record, indent=1) + "\n")
    names = list(record["full_phases"])
    lines = [
        f"# {record['benchmark']}", "",
        f"{record['machine']}; load average {load} at the start. Scale: {record['scale']}. "
        "Median over the batches (24 h: batches after the first). Phases are summed over "
        "the two views; the online write is the one write of both.", "",
        "| state | " + " | ".join(names) + " | wall s | ratio | CPU s | CPU ratio |",
        "|---|" + "---:|" * (len(names) + 4),
        "| empty | " + " | ".join(f"{record['empty_phases'][p]:.3f}" for p in names)
        + f" | {record['empty_median_s']:.3f} | | {median(empty, 'cpu_s'):.3f} | |",
        "| 24 h | " + " | ".join(f"{record['full_phases'][p]:.3f}" for p in names)
        + f" | {record['full_median_s']:.3f} | {record['ratio']}x | "
        f"{median(warm, 'cpu_s'):.3f} | {record['ratio_cpu']}x |",
    ]
    if args.label:
        lines += ["", f"- {args.label}"]
    (RESULTS / "stream_flat_topic.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
