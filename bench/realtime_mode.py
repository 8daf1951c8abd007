"""Which parts of the stream job could run under Spark's Real-Time Mode (the installed pyspark)?

Real-Time Mode (Spark 4.1+, ``trigger(realTime=...)``) runs long-lived tasks that stream records
through, instead of micro-batches; it accepts only the operators and sinks on its allowlist.
This probe asks the installed Spark rather than its documentation: each candidate is one piece of
featureflow's query (the same Kafka source, a topic of 2 partitions holding 200 events, 100 of
them unusable), started with a 5 s real-time trigger and a Kafka sink, so that a query that runs
shows the records it delivered. Per candidate it records whether Spark accepted it, how many
records reached the output topic within ``--seconds``, or the error class Spark raised.

Writes bench/results/realtime_mode.{json,md}::

    python bench/realtime_mode.py [--seconds 15]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import pyarrow as pa  # noqa: E402

from featureflow import cli  # noqa: E402
from featureflow.infra import kafka_broker, kafka_client  # noqa: E402
from featureflow.repo import load_store, stream_view_specs  # noqa: E402
from featureflow.spark.parse import parse_events  # noqa: E402
from featureflow.spark.session import build_session  # noqa: E402

RESULTS = ROOT / "bench" / "results"
FOREACH_BATCH = "foreachBatch sink (the job's sink: one Arrow pass per micro-batch)"


def _events(count: int) -> list[tuple[bytes, bytes]]:
    """``count`` records: even ones valid transactions, odd ones not JSON (dead letters)."""
    now_ms = int(time.time() * 1000)
    records = []
    for i in range(count):
        value = (
            json.dumps({"user_id": i % 7, "amount": 1.5, "event_timestamp": now_ms - i}).encode()
            if i % 2 == 0
            else b"not json"
        )
        records.append((str(i % 7).encode(), value))
    return records


def _identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def candidates(spec: Any) -> dict[str, Callable[[Any], Any]]:
    """Each piece of the job's query, from the raw Kafka frame to a frame of (key, value)."""
    return {
        "Kafka source -> Kafka sink (no processing)": lambda raw: raw.select("key", "value"),
        "Spark SQL from_json (a pure-SQL parser) -> Kafka sink": lambda raw: raw.selectExpr(
            "key",
            "to_json(from_json(CAST(value AS STRING), 'user_id BIGINT, amount DOUBLE')) AS value",
        ),
        "featureflow's parser (mapInArrow) -> dead letters to Kafka": lambda raw: (
            parse_events(raw, spec).where("error_reason IS NOT NULL").select("key", "value")
        ),
        "mapInArrow (any Arrow batch UDF, as the kernels use)": lambda raw: raw.select(
            "key", "value"
        ).mapInArrow(_identity, "key BINARY, value BINARY"),
        "repartition(entity key) (the shuffle before the kernels)": lambda raw: raw.select(
            "key", "value"
        ).repartition(4, "key"),
        FOREACH_BATCH: lambda raw: raw.select("key", "value"),
    }


def _run(
    spark: Any, bootstrap: str, topic: str, name: str, build: Callable[[Any], Any], seconds: float
) -> dict[str, Any]:
    out_topic = f"{topic}-out-{uuid.uuid4().hex[:6]}"
    kafka_broker.create_topic(bootstrap, out_topic, partitions=1)
    checkpoint = tempfile.mkdtemp(prefix="featureflow-rtm-")
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    try:
        writer = build(raw).writeStream
        if name == FOREACH_BATCH:
            writer = writer.foreachBatch(lambda batch, _: batch.write.format("noop").save())
        else:
            writer = (
                writer.format("kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", out_topic)
            )
        query = (
            writer.option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 seconds")
            .start()
        )
    except Exception as error:  # Spark refuses some queries at start, others when they run
        return {"accepted": False, "error": _error_class(str(error)), "message": str(error)[:300]}
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and query.exception() is None:
            time.sleep(0.5)
        failure = query.exception()
    finally:
        query.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    delivered = sum(kafka_client.end_offsets(bootstrap, out_topic).values())
    if failure is not None:
        text = str(failure)
        return {"accepted": False, "error": _error_class(text), "message": text[:300]}
    return {"accepted": True, "records_delivered": delivered}


def _error_class(text: str) -> str:
    return text.split("]", 1)[0].lstrip("[") if text.startswith("[") else text[:80]


def _repo_copy() -> Path:
    """The example repo, applied in a scratch copy (as the tests do)."""
    target = Path(tempfile.mkdtemp(prefix="featureflow-rtm-repo-")) / "repo"
    shutil.copytree(ROOT / "feature_repo", target, ignore=shutil.ignore_patterns("data"))
    if cli.main(["apply", "--repo", str(target), "--schemas", str(ROOT / "schemas")]) != 0:
        raise SystemExit("featureflow apply failed on the example repo")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="run time per candidate")
    args = parser.parse_args()
    import pyspark

    bootstrap = kafka_broker.start()
    topic = f"featureflow-rtm-{uuid.uuid4().hex[:6]}"
    kafka_broker.create_topic(bootstrap, topic, partitions=2)
    kafka_client.produce(bootstrap, topic, _events(200))
    spec = stream_view_specs(load_store(_repo_copy()))[0]
    spark = build_session("featureflow-realtime-mode-probe", shuffle_partitions=2)
    results = {name: _run(spark, bootstrap, topic, name, build, args.seconds)
               for name, build in candidates(spec).items()}  # fmt: skip
    spark.stop()
    report = {
        "benchmark": "Spark Real-Time Mode: which pieces of the stream job it accepts",
        "pyspark": pyspark.__version__,
        "recorded": datetime.now(UTC).isoformat(timespec="seconds"),
        "input": {"records": 200, "unusable": 100, "partitions": 2},
        "candidates": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "realtime_mode.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"# {report['benchmark']}",
        "",
        f"pyspark {report['pyspark']}, {report['recorded']}; trigger(realTime='5 seconds'), "
        "Kafka source and sink, 200 records (100 unusable) on 2 partitions.",
        "",
        "| piece of the job | accepted | records delivered / error |",
        "|---|---|---|",
    ]
    for name, result in results.items():
        outcome = str(result["records_delivered"]) if result["accepted"] else f"`{result['error']}`"
        lines.append(f"| {name} | {'yes' if result['accepted'] else 'no'} | {outcome} |")
    (RESULTS / "realtime_mode.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
