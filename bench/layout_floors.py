"""What the job's layout costs before any view runs, against the layouts it could take.

The stream job (``bench/stream.py``'s shuffle floor) reads Kafka, parses each record
in one ``mapInArrow`` pass whose rows go back to the JVM for the checks and the
event-time rules, hash partitions them by the entity key and hands each partition to
a second ``mapInArrow`` pass that runs the views. Every row crosses the JVM/Python
boundary three times. This measures, on one topic in one Spark session, rounds
alternating, each system into the ``noop`` sink:

- the read floor: the Kafka source alone;
- the parse floor: the Kafka source and the job's parser with its checks;
- the shuffle floor: the job's own layout with no views (parse, checks, event-time
  marks, shuffle, second pass reading every batch);
- **one pass per Kafka partition**: the Kafka source's tasks hand the raw records to
  one ``mapInArrow`` that decodes them (the job's vectorised parser and timestamp
  reading) and returns one count: the floor of a layout without a shuffle, which is
  exact only where every entity's records are in one Kafka partition (a topic keyed
  by the entity, as the benchmark's producer keys it: checked and reported);
- **raw records shuffled by an entity key read on the JVM** (``json_tuple``, cast to
  ``long``), then one ``mapInArrow`` that decodes them: a layout with one Python pass
  that needs no co-partitioned topic.

Writes ``bench/results/layout_floors.{json,md}``::

    python bench/layout_floors.py [--events 10000000] [--users 100000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _process_cpu import ProcessCpu  # noqa: E402
from _stream_peers import (  # noqa: E402
    StreamRun,
    kafka_records,
    parsed_topic,
    run_into_noop,
    run_parse_floor,
    run_read_floor,
    run_shuffle_floor,
)
from stream import RESULTS, private_repo, produce_events, warm_broker  # noqa: E402

from featureflow.infra import kafka_broker  # noqa: E402

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from featureflow.repo import StreamViewSpec

PER_PARTITION = "one Python pass per Kafka partition (decode, nothing back)"
RAW_SHUFFLE = "raw records shuffled by a JVM-read entity key, one Python pass (decode)"


def decoding_pass(spec: StreamViewSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[Any]]:
    """A ``mapInArrow`` function that decodes every record's ``value`` as the job's parse
    pass does (:class:`~featureflow.events.json_batch.BatchJsonParser` and the timestamp
    reading) and returns one row: the records it saw."""
    from pyspark.sql.types import StructType

    from featureflow.events.json_batch import BatchJsonParser
    from featureflow.events.json_records import STAMP, JsonRecordParser

    schema = StructType.fromDDL(spec.json_schema)
    assert isinstance(schema, StructType)
    parser = JsonRecordParser(
        tuple((field.name, field.dataType.simpleString()) for field in schema.fields),
        spec.join_key, spec.timestamp_field,
    )  # fmt: skip
    decode = BatchJsonParser(parser)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from featureflow.events.timestamps import event_micros

        seen = 0
        for batch in batches:
            event_micros(decode(batch.column("value")).column(STAMP))
            seen += batch.num_rows
        yield pa.RecordBatch.from_pydict({"rows": [seen]})

    return run


def raw_records(spark: SparkSession, bootstrap: str, topic: str, offsets: int) -> DataFrame:
    return kafka_records(spark, bootstrap, topic, offsets).select(
        "topic", "partition", "offset", "key", "value"
    )


def run_per_partition(spark: SparkSession, repo: Path, bootstrap: str, topic: str,
                      checkpoint: Path, offsets: int) -> StreamRun:  # fmt: skip
    spec, _ = parsed_topic(spark, repo, bootstrap, checkpoint / "spec", offsets)
    frame = raw_records(spark, bootstrap, topic, offsets).mapInArrow(
        decoding_pass(spec), "rows long"
    )
    return run_into_noop(frame, checkpoint, PER_PARTITION)


def run_raw_shuffle(spark: SparkSession, repo: Path, bootstrap: str, topic: str,
                    checkpoint: Path, offsets: int) -> StreamRun:  # fmt: skip
    from pyspark.sql import functions as F

    from featureflow.spark.pipeline import shuffle_partitions

    spec, _ = parsed_topic(spark, repo, bootstrap, checkpoint / "spec", offsets)
    raw = raw_records(spark, bootstrap, topic, offsets)
    read = raw.select("*", F.json_tuple(F.col("value").cast("string"), spec.join_key))
    keyed = read.select(*raw.columns, F.col("c0").try_cast("long").alias(spec.join_key))
    partitions = shuffle_partitions([], spark.sparkContext.defaultParallelism)
    frame = keyed.repartition(partitions, spec.join_key).mapInArrow(
        decoding_pass(spec), "rows long"
    )
    return run_into_noop(frame, checkpoint, RAW_SHUFFLE)


def co_partitioned_share(spark: SparkSession, bootstrap: str, topic: str) -> dict[str, int]:
    """Entities of the topic and how many of them have records in more than one partition."""
    from pyspark.sql import functions as F

    records = (
        spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic).option("startingOffsets", "earliest").load()
    )  # fmt: skip
    per_key = records.groupBy("key").agg(F.countDistinct("partition").alias("partitions"))
    row = per_key.agg(
        F.count("*").alias("entities"),
        F.sum(F.when(F.col("partitions") > 1, 1).otherwise(0)).alias("in_several_partitions"),
    ).first()
    assert row is not None
    return {
        "entities": int(row["entities"]),
        "in_several_partitions": int(row["in_several_partitions"] or 0),
    }


def render(record: dict[str, Any]) -> str:
    """The results' Markdown: the last round (the JVM warm) as a table, then every round."""
    scale, keyed, rows = record["scale"], record["keys"], record["rows"]
    last = [row for row in rows if row["round"] == scale["rounds"] - 1]
    shuffle = next(row for row in last if row["key"] == "shuffle")
    lines = [
        "# The job's layout before any view, against the layouts it could take",
        "",
        f"{record['machine']}; load average {record['load_average'][0]} at the start, "
        f"{record['recorded']}; {scale['events']:,} events of {scale['users']:,} users "
        f"({scale['entities']:,} entities), {scale['max_offsets_per_trigger']:,} a "
        f"micro-batch, one Spark session (local[2]), {scale['rounds']} rounds alternating; "
        "the table is the last round (the JVM warm). The topic is keyed by entity: "
        f"{keyed['in_several_partitions']:,} of {keyed['entities']:,} keys in more than one "
        "partition.",
        "",
        "| system | wall s | events/s | CPU s | JIT | JVM other | Python workers "
        "| wall vs the job's layout (shuffle floor) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in last:
        spent = row["cpu"]
        lines.append(
            f"| {row['system']} | {row['wall_s']:.2f} | {row['events_per_s']:,} | "
            f"{row['cpu_s']:.1f} | {spent.get('jit', 0):.1f} | {spent.get('jvm', 0):.1f} | "
            f"{spent.get('python_workers', 0):.1f} | {row['wall_s'] / shuffle['wall_s']:.2f}x |"
        )
    lines += ["", "Every round:", "", "| round | system | wall s | CPU s |", "|---:|---|---:|---:|"]
    lines += [
        f"| {r['round']} | {r['system']} | {r['wall_s']:.2f} | {r['cpu_s']:.1f} |" for r in rows
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from featureflow.spark.session import build_session

    load = [round(x, 2) for x in os.getloadavg()]
    bootstrap = kafka_broker.start()
    topic = f"bench-layout-{uuid.uuid4().hex[:8]}"
    offsets = args.max_offsets_per_trigger
    produce_s, entities = produce_events(bootstrap, topic, args.events, args.users, seed=5)
    print(f"produced {args.events:,} events to {topic} in {produce_s:.0f} s", flush=True)
    warm_s, _ = warm_broker(bootstrap, topic, offsets)
    print(f"read the topic once in {warm_s:.0f} s (broker warm-up, not timed)", flush=True)
    spark = build_session(
        "bench-layout-floors", master="local[2]",
        extra_conf={"spark.sql.streaming.numRecentProgressUpdates": "100000"},
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    cpu = ProcessCpu(os.getpid())
    cpu.start()
    with tempfile.TemporaryDirectory(prefix="bench-layout-") as tmp:
        root = Path(tmp)
        repo = private_repo(root, "repo", topic)
        keyed = co_partitioned_share(spark, bootstrap, topic)
        systems: dict[str, Callable[[Path], StreamRun]] = {
            "read": lambda ckpt: run_read_floor(spark, bootstrap, topic, ckpt, offsets),
            "parse": lambda ckpt: run_parse_floor(spark, repo, bootstrap, ckpt, offsets),
            "shuffle": lambda ckpt: run_shuffle_floor(spark, repo, bootstrap, ckpt, offsets),
            "per_partition": lambda ckpt: run_per_partition(
                spark, repo, bootstrap, topic, ckpt, offsets
            ),
            "raw_shuffle": lambda ckpt: run_raw_shuffle(
                spark, repo, bootstrap, topic, ckpt, offsets
            ),
        }
        for round_index in range(args.rounds):
            for name, run_system in systems.items():
                run = run_system(root / f"ckpt-{name}-{round_index}")
                spent = cpu.between(*run.interval) if run.interval else {}
                rows.append(
                    {
                        "round": round_index,
                        "key": name,
                        "system": run.system,
                        "events": run.events,
                        "wall_s": round(run.wall_s, 2),
                        "events_per_s": round(run.events_per_s),
                        "cpu_s": round(spent.get("total", 0.0), 1),
                        "cpu": {
                            k: round(v, 1)
                            for k, v in spent.items()
                            if k not in ("total", "seconds")
                        },
                    }
                )
                print(f"round {round_index}: {run.system}: {run.wall_s:.2f} s, "
                      f"{spent.get('total', 0.0):.1f} CPU-s", flush=True)  # fmt: skip
    cpu.stop()
    spark.stop()
    kafka_broker.delete_topic(bootstrap, topic)
    record = {
        "benchmark": "the job's layout before any view, against the layouts it could take",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared with other work",
        "recorded": datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_average": [load, [round(x, 2) for x in os.getloadavg()]],
        "scale": {"events": args.events, "users": args.users, "entities": entities,
                  "max_offsets_per_trigger": offsets, "rounds": args.rounds},
        "keys": keyed, "rows": rows,
    }  # fmt: skip
    (RESULTS / "layout_floors.json").write_text(json.dumps(record, indent=1) + "\n")
    text = render(record)
    (RESULTS / "layout_floors.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
