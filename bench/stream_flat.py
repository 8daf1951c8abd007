"""Flat per-batch cost: one micro-batch of a fixed size with empty state vs 24 h of state.

Drives the stream job's executor path for shuffle partition 0
(:meth:`featureflow.spark.online_sink.OnlineFeatureWriter.run_partition`: state
load -> window-state compute -> offline write -> state save) without Kafka or
Spark, for both example views (``user_txn_stats``: rolling 10m/1h/24h;
``user_sessions``). Events come from :func:`featureflow.events.sample.generate`
(``--users`` users over 24 h and a bit, 1 % out of order; a batch's events behind the
watermark, the 1-3 h late ones, are left out as the job dead-letters them):

- *24 h state*: the first ``--state-events`` events are folded into the state
  (what the job keeps after them: every event within 24 h of the watermark for
  the rolling view, the open sessions' events for the session view), then
  ``--batches`` consecutive batches of ``--batch`` events run against it. The
  first of them loads the state cold from disk; the others find it resident in
  the worker (:mod:`featureflow.spark.state`); the ratio uses those. Each batch
  saves its state's delta; once 10 deltas follow the snapshot (sooner when they
  hold half its bytes) the worker writes a new snapshot in a background thread,
  which the batches after it run beside (``--batches 12`` includes one for
  ``user_txn_stats``); ``snapshot_wait_s`` is how long the end of the run still
  waited for it.
- *empty state*: each of the same batches runs alone against a new state root.

The online write (SQLite via Feast) depends on the touched entities only and
costs tens of seconds here, so it is left out unless ``--online``; the offline
history goes to scratch Parquet. Writes bench/results/stream_flat.{json,md}::

    python bench/stream_flat.py [--state-events 10000000] [--users 100000]
                                [--batch 200000] [--batches 3] [--online]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from featureflow.events import sample  # noqa: E402
from featureflow.repo import StreamViewSpec  # noqa: E402
from featureflow.spark import online_sink  # noqa: E402
from featureflow.spark.offline_sink import OfflineFeatureLog  # noqa: E402
from featureflow.spark.state import StateStore, drop_resident, wait_for_snapshots  # noqa: E402
from featureflow.window_state import rolling_step, session_step, state_events  # noqa: E402

RESULTS = ROOT / "bench" / "results"
STATE_PHASES = ("state_load", "compute", "state_save")
"""The phases whose cost the window state could drive (the writes depend on the batch only)."""


def view_specs(root: Path) -> tuple[str, list[StreamViewSpec]]:
    """The example views, applied in a scratch copy of feature_repo/ (whose SQLite the
    online write uses): (repo path, view specs)."""
    from stream import private_repo

    from featureflow.repo import load_store, stream_view_specs

    repo = private_repo(root, "repo-flat", "unused")
    return str(repo), stream_view_specs(load_store(repo))


def build_state(
    store: StateStore, spec: StreamViewSpec, events: pa.Table, *, carried: bool = False
) -> int:
    """Save, as version 0, the state the job keeps after ``events``; returns the watermark (ns).

    ``carried``: also hold, resident beside it, what the computation carries to the
    next batch (a rolling view's frame states, a session view's open sessions), as a
    worker that computed the state itself holds it; otherwise the state alone, as a
    worker finds it after a restart (the carried states are never written)."""
    watermark = int(pc.max(events.column("event_ns")).as_py()) - spec.watermark_ns
    if spec.is_session_view:
        step = session_step(events, events.num_rows, spec, watermark)
    else:
        step = rolling_step(events, events.num_rows, spec, watermark)
    store.save_events(0, 0, step.kept, frames=step.frames if carried else None)
    return watermark


def run_batch(
    spec: StreamViewSpec, repo: str, store: StateStore, offline: OfflineFeatureLog,
    batch_id: int, new: pa.Table, watermark_ns: int,
) -> dict[str, Any]:  # fmt: skip
    """One partition's micro-batch through the job's executor path: seconds per phase,
    and the process's CPU seconds (less moved by other work on a loaded machine)."""
    cpu = time.process_time()
    writer = online_sink.OnlineFeatureWriter(
        spec=spec, repo_path=repo, batch_id=batch_id, state=store,
        watermark_ns=watermark_ns, offline=offline,
    )  # fmt: skip
    stats = writer.run_partition(0, new.to_batches())
    cpu = time.process_time() - cpu
    assert stats is not None
    seconds = stats.column("seconds")[0].as_py()
    phases = dict(zip(online_sink.EXECUTOR_PHASES, seconds, strict=True))
    return {
        "batch": batch_id,
        "state_rows": int(stats.column("state_rows")[0].as_py()),
        "seconds": {k: round(v, 4) for k, v in phases.items()},
        "state_s": round(sum(phases[p] for p in STATE_PHASES), 4),
        "total_s": round(sum(seconds), 4),
        "cpu_s": round(cpu, 4),
    }


def state_memory(store: StateStore, spec: StreamViewSpec, batch: int) -> dict[str, Any]:
    """Bytes of the partition's state after ``batch``: in memory (Arrow) per held event and
    per entity, and on disk (the snapshot and the deltas after it)."""
    kept = store.load_events(0, before_batch=batch + 1)
    assert kept is not None
    # a session view's runs also hold rows of closed sessions until a compaction
    live = state_events(kept, spec).num_rows if spec.is_session_view else None
    entities = len(pc.unique(kept.column(spec.join_key)))
    directory = Path(store.root) / f"partitions={store.partitions}" / "part-00000"
    on_disk = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
    return {
        "events": kept.num_rows,
        "live_events": live,
        "entities": entities,
        "bytes": kept.nbytes,
        "bytes_per_event": round(kept.nbytes / max(kept.num_rows, 1), 1),
        "bytes_per_entity": round(kept.nbytes / max(entities, 1), 1),
        "disk_bytes": on_disk,
        "files": sorted(f.name for f in directory.rglob("batch-*") if f.is_file()),
    }


def measure(
    spec: StreamViewSpec, repo: str, root: Path, events: pa.Table, state_events: int,
    batch: int, batches: int, log: Callable[[str], None],
) -> dict[str, Any]:  # fmt: skip
    """The cases of one view: the 24 h state's batches (the state alone, as after a
    restart; and with what a worker that computed it carries), and the same batches on
    empty state."""
    store = StateStore(str(root / "state" / spec.name), 1)
    offline = OfflineFeatureLog(str(root / "offline"), spec.name)
    started = datetime.now()
    watermark = build_state(store, spec, events.slice(0, state_events))
    log(f"{spec.name}: state of {state_events:,} events built in "
        f"{(datetime.now() - started).total_seconds():.0f} s")  # fmt: skip
    drop_resident()  # the first batch loads the state from disk, as after a restart
    carried_store = StateStore(str(root / "state-carried" / spec.name), 1)
    build_state(carried_store, spec, events.slice(0, state_events), carried=True)
    seen_max = watermark + spec.watermark_ns
    full, carried, empty = [], [], []
    for index in range(batches):
        # as in the job: a batch is judged against the watermark before it (events
        # behind it are dead-lettered and never reach the state), and its state is
        # kept for events at or after that watermark
        mark = seen_max - spec.watermark_ns
        new = events.slice(state_events + index * batch, batch)
        new = new.filter(pc.greater_equal(new.column("event_ns"), mark))
        seen_max = max(seen_max, int(pc.max(new.column("event_ns")).as_py()))
        full.append(run_batch(spec, repo, store, offline, index + 1, new, mark))
        carried.append(run_batch(spec, repo, carried_store, offline, index + 1, new, mark))
        alone = StateStore(str(root / "empty" / spec.name / str(index)), 1)
        empty.append(run_batch(spec, repo, alone, offline, index + 1, new, mark))
        log(f"{spec.name} batch {index + 1}: 24 h state {full[-1]['total_s']:.2f} s, "
            f"carried {carried[-1]['total_s']:.2f} s, "
            f"empty {empty[-1]['total_s']:.2f} s")  # fmt: skip
    waited = time.perf_counter()
    wait_for_snapshots()
    waited = time.perf_counter() - waited
    warm = full[1:] or full

    def median(runs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    def phase_median(runs: list[dict[str, Any]]) -> dict[str, float]:
        return {
            p: round(statistics.median(r["seconds"][p] for r in runs), 4)
            for p in online_sink.EXECUTOR_PHASES
        }

    return {
        "view": spec.name,
        "state_events_in": state_events,
        "full_state": full,
        "empty_state": empty,
        "full_median": phase_median(warm),
        "empty_median": phase_median(empty),
        "ratio_total": round(median(warm, "total_s") / median(empty, "total_s"), 2),
        "ratio_state_phases": round(median(warm, "state_s") / median(empty, "state_s"), 2),
        "full_cpu_s": median(warm, "cpu_s"),
        "empty_cpu_s": median(empty, "cpu_s"),
        "ratio_cpu": round(median(warm, "cpu_s") / median(empty, "cpu_s"), 2),
        "carried_state": carried,
        "carried_median": phase_median(carried[1:] or carried),
        "ratio_total_carried": round(
            median(carried[1:] or carried, "total_s") / median(empty, "total_s"), 2
        ),
        "carried_cpu_s": median(carried[1:] or carried, "cpu_s"),
        "cold_first_batch": full[0],
        "snapshot_wait_s": round(waited, 3),
        "memory": state_memory(store, spec, batches),
    }


def markdown(record: dict[str, Any]) -> str:
    """The md file: one table of median seconds per phase, then the memory per view."""
    phases = online_sink.EXECUTOR_PHASES
    lines = [
        f"# {record['benchmark']}\n",
        f"{record['machine']}; load average {record['load_average_1m']} at the start, "
        f"{record['load_average_end']} at the end. "
        f"Scale: {record['scale']}.\n",
        "Median seconds per phase of partition 0's batch (24 h state: batches after the "
        "first, which loads the state cold; the first is the `cold` row. `carried`: the same "
        "state, held with what the worker that computed it carries to the next batch, a "
        "rolling view's frame states or a session view's open sessions; the plain 24 h rows "
        "start without them, as after a restart).\n",
        "| view | state | state rows | " + " | ".join(phases) + " | total | ratio | CPU s "
        "| CPU ratio |",
        "|---|---|---:|" + "---:|" * (len(phases) + 4),
    ]
    for view in record["views"]:
        cold = view["cold_first_batch"]
        cases = (
            ("empty", view["empty_median"], view["empty_state"][0]["state_rows"], "",
             view["empty_cpu_s"], ""),
            ("24 h", view["full_median"], view["full_state"][-1]["state_rows"],
             f"{view['ratio_total']:.2f}x", view["full_cpu_s"], f"{view['ratio_cpu']:.2f}x"),
            ("24 h, carried", view["carried_median"], view["carried_state"][-1]["state_rows"],
             f"{view['ratio_total_carried']:.2f}x", view["carried_cpu_s"],
             f"{view['carried_cpu_s'] / view['empty_cpu_s']:.2f}x"),
            ("24 h, cold", cold["seconds"], cold["state_rows"], "", cold["cpu_s"], ""),
        )  # fmt: skip
        for case, seconds, rows, ratio, cpu, cpu_ratio in cases:
            cells = " | ".join(f"{seconds[p]:.3f}" for p in phases)
            lines.append(
                f"| {view['view']} | {case} | {rows:,} | {cells} "
                f"| {sum(seconds.values()):.3f} | {ratio} | {cpu:.3f} | {cpu_ratio} |"
            )
    lines += ["", "State held after the last batch (Arrow in memory; files on disk; of a "
              "session view's events held, those of open sessions):", "",
              "| view | events | of them live | entities | bytes/event | bytes/entity "
              "| disk bytes | files | snapshot wait s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for view in record["views"]:
        m = view["memory"]
        live = m.get("live_events")
        lines.append(
            f"| {view['view']} | {m['events']:,} | {'–' if live is None else f'{live:,}'} "
            f"| {m['entities']:,} "
            f"| {m['bytes_per_event']} "
            f"| {m['bytes_per_entity']} | {m['disk_bytes']:,} | {len(m.get('files', []))} "
            f"| {view.get('snapshot_wait_s', '')} |"
        )
    lines += ["", *(f"- {note}" for note in record["notes"])]
    return "\n".join(lines) + "\n"


def scale_arguments(parser: argparse.ArgumentParser, batches: int) -> None:
    """The flat-cost benches' common options: the state's and the batches' sizes, a label."""
    parser.add_argument("--state-events", type=int, default=10_000_000)
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=batches)
    parser.add_argument("--label", default="", help="what the run measures (kept in the notes)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    scale_arguments(parser, batches=3)
    parser.add_argument("--online", action="store_true", help="also write the SQLite online store")
    args = parser.parse_args()
    if not args.online:  # the online write depends on the touched entities, not on the state
        online_sink.write_online = lambda store, rows: None
        online_sink.cached_store = lambda repo_path: None  # type: ignore[assignment,return-value]
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"load average at start: {load}", flush=True)
    views = []
    with tempfile.TemporaryDirectory(prefix="bench-stream-flat-") as tmp:
        root = Path(tmp)
        repo, specs = view_specs(root)
        # The state spans 24 h: the batches' events continue the same stream after it.
        total = args.state_events + args.batch * args.batches
        scale = total / args.state_events
        generated = sample.generate(total, users=args.users, seed=11, span_s=86_400.0 * scale)
        events = pa.table(
            {
                "user_id": generated.user_id,
                "event_ns": generated.event_ns,
                "amount": pa.array(generated.amount, from_pandas=True),
            }
        )
        del generated
        for spec in specs:
            views.append(measure(spec, repo, root, events, args.state_events, args.batch,
                                 args.batches, lambda line: print(line, flush=True)))  # fmt: skip
    record: dict[str, Any] = {
        "benchmark": "stream job: one partition's micro-batch, empty state vs 24 h of state",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared with other work",
        "load_average_1m": load,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "recorded": datetime.now().astimezone().isoformat(timespec="seconds"),
        "scale": {
            "state_events": args.state_events,
            "users": args.users,
            "events_per_batch": args.batch,
            "batches": args.batches,
            "online_write": args.online,
        },
        "views": views,
        "notes": [n for n in (args.label,) if n],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "stream_flat.json"
    history = json.loads(path.read_text()).get("history", []) if path.exists() else []
    summary: dict[str, Any] = {
        "recorded": record["recorded"], "label": args.label, "scale": record["scale"],
    }  # fmt: skip
    for v in views:
        summary[v["view"]] = {
            "ratio_total": v["ratio_total"],
            "ratio_state_phases": v["ratio_state_phases"],
            "ratio_cpu": v["ratio_cpu"],
            "full_total_s": round(sum(v["full_median"].values()), 3),
            "empty_total_s": round(sum(v["empty_median"].values()), 3),
            "full_state_save_s": v["full_median"]["state_save"],
            "carried_total_s": round(sum(v["carried_median"].values()), 3),
            "ratio_total_carried": v["ratio_total_carried"],
            "empty_state_save_s": v["empty_median"]["state_save"],
        }
    record["history"] = [*history, summary]
    path.write_text(json.dumps(record, indent=2) + "\n")
    md = markdown(record)
    md += ("\n## Runs so far\n\n| recorded | label | view | 24 h total s | empty total s "
           "| ratio | 24 h state_save s | empty state_save s |\n")
    md += "|---|---|---|---:|---:|---:|---:|---:|\n"
    for run in record["history"]:
        for view in (v["view"] for v in views):
            if view in run:
                r = run[view]
                md += (f"| {run['recorded']} | {run['label']} | {view} | {r['full_total_s']} "
                       f"| {r['empty_total_s']} | {r['ratio_total']}x "
                       f"| {r.get('full_state_save_s', '')} "
                       f"| {r.get('empty_state_save_s', '')} |\n")  # fmt: skip
    (RESULTS / "stream_flat.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
