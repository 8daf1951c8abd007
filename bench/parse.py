"""Parsing Kafka JSON values: the per-record parser against the vectorised batch parser.

Two measurements, each system against its peers in the same run:

1. **Micro** (no Spark): records/s of
   :class:`~featureflow.events.json_records.JsonRecordParser` (one ``orjson``
   decode and a Python loop per record) and
   :class:`~featureflow.events.json_batch.BatchJsonParser` (a column at a time:
   ``orjson`` mapped over the batch, each field's values to Arrow in one call,
   per value only for a column holding a value of another type) on the sample events
   in Spark's Arrow batches of 10,000 records, clean and with 1 % bad records
   (wrong types, non-JSON, missing keys: the per-value fallbacks' cost). Rounds
   alternate between the parsers; the median round counts.
2. **Source stage** (Spark ``local[2]``, the shared broker, a topic of its
   own): Kafka -> ``parse_events`` -> ``noop`` sink, ``availableNow``, per-record
   and vectorised, and the Kafka source alone into ``noop`` (the read floor);
   wall time from the queries' progress reports, best of ``--stream-rounds``
   rounds whose order rotates (the session's first query also warms the JVM).

Run: ``.venv/bin/python bench/parse.py [--events N] [--skip-stream]``; writes
``bench/results/parse.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stream_peers import StreamRun, kafka_records, run_into_noop, run_read_floor  # noqa: E402

from featureflow.events import sample  # noqa: E402
from featureflow.events.json_batch import BatchJsonParser  # noqa: E402
from featureflow.events.json_records import JsonRecordParser  # noqa: E402
from featureflow.repo import StreamViewSpec  # noqa: E402

RESULTS = ROOT / "bench" / "results"
ARROW_BATCH = 10_000
"""Spark's default ``spark.sql.execution.arrow.maxRecordsPerBatch``."""
FIELDS = (
    ("user_id", "bigint"), ("amount", "double"), ("merchant", "string"),
    ("event_timestamp", "string"),
)  # fmt: skip
BAD = (
    b'{"user_id":1.5,"amount":1,"event_timestamp":1}', b"not json",
    b'{"amount":2,"event_timestamp":"2026-11-30T00:00:00Z"}', b'{"user_id":2,"amount":"x"}',
)  # fmt: skip


def _spec(topic: str, bootstrap: str) -> StreamViewSpec:
    ddl = ", ".join(f"{name} {kind}" for name, kind in FIELDS)
    return StreamViewSpec(
        name="parse_bench", join_key="user_id", timestamp_field="event_timestamp",
        topic=topic, bootstrap_servers=bootstrap, json_schema=ddl, watermark_ns=0,
        aggregations=(),
    )  # fmt: skip


def _batches(events: int, bad_share: float, seed: int) -> list[pa.Array]:
    values = [value for _, value in sample.to_json(sample.generate(events, seed=seed))]
    if bad_share:
        step = round(1 / bad_share)
        for index in range(0, len(values), step):
            values[index] = BAD[(index // step) % len(BAD)]
    return [
        pa.array(values[start : start + ARROW_BATCH], pa.binary())
        for start in range(0, len(values), ARROW_BATCH)
    ]


def micro(events: int, rounds: int) -> list[dict[str, Any]]:
    """Records/s of both parsers (median of alternating rounds), clean and with bad records."""
    records = JsonRecordParser(FIELDS, "user_id", "event_timestamp")
    batch = BatchJsonParser(records)
    rows = []
    for label, bad_share in (("clean", 0.0), ("1 % bad records", 0.01)):
        batches = _batches(events, bad_share, seed=7)
        for arrays in batches:  # the same table, or the benchmark would compare nothing
            assert batch(arrays).equals(records(arrays))
        per_record: list[float] = []
        vectorised: list[float] = []
        for _ in range(rounds):
            for parser, times in ((records, per_record), (batch, vectorised)):
                started = time.perf_counter()
                for arrays in batches:
                    parser(arrays)
                times.append(time.perf_counter() - started)
        stats = [batch.decode(arrays)[1] for arrays in batches]
        rows.append(
            {
                "values": label,
                "records": events,
                "per_record_per_s": events / statistics.median(per_record),
                "vectorised_per_s": events / statistics.median(vectorised),
                "batches": len(batches),
                "refused_by_orjson": sum(s.refused for s in stats),
                "columns_converted": sum(len(s.converted) for s in stats),
            }
        )
        rows[-1]["ratio"] = rows[-1]["vectorised_per_s"] / rows[-1]["per_record_per_s"]
    return rows


def _parse_stage(
    spark: Any, spec: StreamViewSpec, checkpoint: Path, *, vectorised: bool
) -> StreamRun:
    from featureflow.spark.parse import parse_events

    raw = kafka_records(spark, spec.bootstrap_servers, spec.topic, 1_000_000)
    how = "vectorised" if vectorised else "per record"
    return run_into_noop(
        parse_events(raw, spec, vectorised=vectorised),
        checkpoint,
        f"Kafka -> parse_events ({how}) -> noop",
    )


def source_stage(events: int, bootstrap: str, rounds: int) -> list[dict[str, Any]]:
    """The three queries over one topic of ``events`` sample records (2 partitions), each
    ``rounds`` times in rotating order; the best round of each counts."""
    from featureflow.infra import kafka_broker, kafka_client
    from featureflow.spark.session import build_session

    topic = f"bench-parse-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(bootstrap, topic, partitions=2)
    generated = sample.generate(events, users=100_000, seed=11)
    kafka_client.produce(bootstrap, topic, sample.to_json(generated), timeout_s=900)
    spec = _spec(topic, bootstrap)
    spark = build_session("bench-parse", master="local[2]", shuffle_partitions=2)
    systems = ("floor", "per record", "vectorised")
    best: dict[str, StreamRun] = {}
    with tempfile.TemporaryDirectory(prefix="bench-parse-") as root:
        for round_ in range(rounds):  # the order rotates: the first query warms the JVM up
            for offset in range(len(systems)):
                system = systems[(round_ + offset) % len(systems)]
                checkpoint = Path(root) / f"{round_}-{offset}"
                if system == "floor":
                    run = run_read_floor(spark, bootstrap, topic, checkpoint, 1_000_000)
                else:
                    run = _parse_stage(spark, spec, checkpoint, vectorised=system == "vectorised")
                print(f"  round {round_}: {run.system}: {run.wall_s:.2f} s", flush=True)
                if system not in best or run.wall_s < best[system].wall_s:
                    best[system] = run
    spark.stop()
    runs = [best[system] for system in systems]
    floor = runs[0].wall_s
    return [
        {
            "system": run.system,
            "events": run.events,
            "wall_s": run.wall_s,
            "events_per_s": run.events_per_s,
            "share_of_read_floor": floor / run.wall_s if run.wall_s else 0.0,
        }
        for run in runs
    ]


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Parsing JSON values: per record vs vectorised",
        "",
        f"{result['recorded']}, {result['machine']}. `bench/parse.py`.",
        "",
        f"Micro (no Spark), Arrow batches of {ARROW_BATCH:,} records, median of "
        f"{result['rounds']} alternating rounds:",
        "",
        "| values | records | per record (rec/s) | vectorised (rec/s) | vectorised / per record "
        "| batches | values orjson refused | columns converted per value |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["micro"]:
        lines.append(
            f"| {row['values']} | {row['records']:,} | {row['per_record_per_s']:,.0f} "
            f"| {row['vectorised_per_s']:,.0f} | {row['ratio']:.2f}x "
            f"| {row['batches']:,} | {row['refused_by_orjson']:,} "
            f"| {row['columns_converted']:,} |"
        )
    if result.get("stream"):
        lines += [
            "",
            f"Source stage: Spark local[2], the shared broker, `availableNow`, noop sink, "
            f"best of {result['stream_rounds']} rounds in rotating order:",
            "",
            "| query | events | wall s | events/s | share of the read floor |",
            "|---|---:|---:|---:|---:|",
        ]
        for row in result["stream"]:
            lines.append(
                f"| {row['system']} | {row['events']:,} | {row['wall_s']:.2f} "
                f"| {row['events_per_s']:,.0f} | {row['share_of_read_floor']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--events", type=int, default=1_000_000, help="source stage's topic")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--stream-rounds", type=int, default=2)
    parser.add_argument("--skip-stream", action="store_true")
    args = parser.parse_args()
    result: dict[str, Any] = {
        "recorded": datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}, pyarrow {pa.__version__}",
        "rounds": args.rounds,
        "stream_rounds": args.stream_rounds,
        "micro": micro(args.micro_events, args.rounds),
    }
    print(_markdown(result), flush=True)
    if not args.skip_stream:
        result["stream"] = source_stage(args.events, args.bootstrap, args.stream_rounds)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "parse.json").write_text(json.dumps(result, indent=2) + "\n")
    markdown = _markdown(result)
    (RESULTS / "parse.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
