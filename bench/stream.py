"""Stream job benchmark: sustained events/s and freshness, against Feast's and Spark's own.

1. Sustained throughput. ``--events`` sample events (``--users`` Zipf-skewed
   users, event time over the last day) go into a fresh topic of
   ``--topic-partitions`` partitions (default 2), keyed by the user as librdkafka
   places keys (CRC-32); the job (``spark-submit jobs/realtime.py --available-now``)
   runs on a private copy of the example repo with both views once per online store
   (``--stores``, default Redis — a redis-server of the benchmark's own — then
   SQLite), once with its pass per Kafka partition instead of the shuffle
   (``--keyed-topic crc32``, first store), and once with ``user_txn_stats`` alone.
   events/s = topic events / wall time of the query, from the start of its first
   micro-batch to the end of its last (``featureflow.metrics`` lines).
2. Peers on the same topic, in the same run: Feast's ``SparkKafkaProcessor``
   (ingest only, no windows), Spark's native hopping ``window()`` aggregation
   the Kafka source and the job's parser into a noop sink (the parse floor, which
   the job and ``window()`` share), the same plus the job's shuffle by entity and
   second Arrow pass with no views in it (the shuffle floor: the job's layout
   before any state, kernel or write), and the Kafka source alone into a noop
   sink (the read floor; see ``_stream_peers.py``). Same ``maxOffsetsPerTrigger``.
   Each run is reported as a ratio to featureflow on the first store and as a
   share of the floor, over the whole run and after its first micro-batch (the
   later batches' records over the time from the first batch's end to the last
   one's: without the cold start, ``StreamRun.steady_events_per_s``).
3. Freshness: the job runs continuously on a new topic while a producer writes
   events stamped "now" at a fixed rate (default half of step 1's rate) for
   ``--fresh-seconds``; freshness (online write time - event time, s) p50/p99
   from the metrics lines, weighted by each micro-batch's events.
   ``--fresh-rates 2000,...,40000`` sweeps the rates for every store instead and
   charts p50/p99 against the rate (``bench/results/stream_freshness.png``).
   Memory, per featureflow run: the state after the last batch (events held,
   bytes, bytes per event) and the Python workers' RSS sampled from /proc
   (``_worker_memory.py``): the peak, and the workers' growth above a fresh
   worker's baseline (same imports, measured in the same run) against the
   state's size, kept between tasks at the run's end and at its peak (summed
   over the workers alive at one sample).
4. ``--phases``: where a micro-batch's time goes on the executors (state load,
   compute, online write, offline write, state save), replayed for one shuffle
   partition outside Spark with the job's own functions.

Prints markdown tables; writes ``bench/results/stream.json`` and ``stream.md``,
one section per step (sustained, freshness, phases), each with its scale and
the load average: the machine has 2 cores shared with other work.

Usage: .venv/bin/python bench/stream.py [--events N] [--users U]
       [--max-offsets-per-trigger M] [--stores redis,sqlite]
       [--topic-partitions P] [--section NAME]
       [--skip sustained,keyed,rolling,window,feast,parse,shuffle,floor,fresh]
       [--fresh-rate R | --fresh-rates R1,R2,...] [--fresh-seconds S] [--phases]
(run by ``make bench``, not by the tests).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _process_cpu import ProcessCpu, wait_for_idle_broker  # noqa: E402
from _stream_peers import (  # noqa: E402
    StreamRun,
    batch_start_s,
    run_feast,
    run_parse_floor,
    run_read_floor,
    run_shuffle_floor,
    run_spark_window,
)
from _worker_memory import WorkerMemory, baseline_bytes  # noqa: E402

from featureflow.events import sample  # noqa: E402
from featureflow.infra import kafka_broker, kafka_client  # noqa: E402
from featureflow.infra.redis_server import RedisServer  # noqa: E402
from featureflow.spark.metrics import bucket_array, histogram_quantile  # noqa: E402

RESULTS = ROOT / "bench" / "results"
BIN = Path(sys.executable).parent
METRICS_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO featureflow\.metrics: (\{.*\})$"
)
SKIPPABLE = (
    "sustained", "keyed", "rolling", "window", "feast", "parse", "shuffle", "floor", "fresh"
)  # fmt: skip
STORES = ("redis", "sqlite")
SQLITE_STORE = "online_store:\n  type: sqlite\n  path: data/online_store.db\n"


def _env() -> dict[str, str]:
    return dict(
        os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
        PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
    )  # fmt: skip


def private_repo(root: Path, name: str, topic: str, redis: str | None = None) -> Path:
    """A copy of ``feature_repo/`` in ``root`` reading ``topic``, applied through the gate.

    ``redis``: ``host:port`` of the Redis online store to use instead of the repo's SQLite.
    """
    repo = root / name
    shutil.copytree(
        ROOT / "feature_repo", repo, ignore=shutil.ignore_patterns("data", "__pycache__")
    )
    if redis is not None:
        config = repo / "feature_store.yaml"
        text = config.read_text()
        if SQLITE_STORE not in text:
            raise RuntimeError(f"{config}: no SQLite online store block to replace")
        redis_store = f"online_store:\n  type: redis\n  connection_string: {redis}\n"
        config.write_text(text.replace(SQLITE_STORE, redis_store))
    definitions = repo / "features.py"
    definitions.write_text(
        definitions.read_text().replace('topic="transactions"', f'topic="{topic}"')
    )
    applied = subprocess.run(
        [str(BIN / "featureflow"), "apply", "--repo", str(repo),
         "--schemas", str(ROOT / "schemas")],
        capture_output=True, text=True, env=_env(), check=False,
    )  # fmt: skip
    if applied.returncode:
        raise RuntimeError(f"featureflow apply failed:\n{applied.stdout}{applied.stderr}")
    return repo


def job_command(
    repo: Path, bootstrap: str, checkpoint: Path, *extra: str, spark_conf: tuple[str, ...] = ()
) -> list[str]:
    """``spark-submit`` of the job; ``spark_conf``: ``key=value`` Spark settings (``--conf``)."""
    confs = [arg for setting in spark_conf for arg in ("--conf", setting)]
    return [
        str(BIN / "spark-submit"), "--master", "local[2]", *confs,
        str(ROOT / "jobs" / "realtime.py"),
        "--repo", str(repo), "--schemas", str(ROOT / "schemas"), "--bootstrap", bootstrap,
        "--checkpoint", str(checkpoint), *extra,
    ]  # fmt: skip


def metrics_lines(log: str) -> list[dict[str, Any]]:
    """The job's per-batch metrics, each with ``end_s`` (epoch s of the log line: batch end)."""
    lines = []
    for line in log.splitlines():
        match = METRICS_LINE.match(line)
        if match:
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone()
            lines.append({**json.loads(match.group(2)), "end_s": stamp.timestamp()})
    return lines


def job_run(system: str, topic_events: int, batches: list[dict[str, Any]]) -> StreamRun:
    """The job's wall time: :attr:`StreamRun.interval` over its batches with records."""
    busy = [b for b in batches if b["records"] > 0]
    if not busy:
        return StreamRun(system, 0, 0.0, note="no metrics line with records")
    keep = ("view", "batch_id", "records", "events", "state_rows", "state_bytes",
            "state_frame_bytes",
            "partitions_run", "cold_partitions", "entities_written", "duration_s",
            "freshness_p50_s", "freshness_p99_s", "phases_s", "end_s")  # fmt: skip
    run = StreamRun(system, topic_events, 0.0, [{k: b.get(k) for k in keep} for b in busy])
    start, end = run.interval or (0.0, 0.0)
    run.wall_s = end - start
    return run


def run_job(repo: Path, bootstrap: str, checkpoint: Path, events: int, system: str,
            max_offsets: int, *extra: str,
            spark_conf: tuple[str, ...] = ()) -> StreamRun:  # fmt: skip
    """The job with ``--available-now`` to the end of the topic."""
    command = job_command(repo, bootstrap, checkpoint, "--available-now",
                          "--max-offsets-per-trigger", str(max_offsets), *extra,
                          spark_conf=spark_conf)  # fmt: skip
    log_path = checkpoint.parent / f"{checkpoint.name}.log"
    with log_path.open("w") as log_file:
        job = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=_env())
        memory = WorkerMemory(job.pid, baseline_bytes(str(repo), _env()))
        memory.start()
        returncode = job.wait()
        memory.stop()
    log = log_path.read_text()
    if returncode or "kernels: mojo" not in log:
        raise RuntimeError(f"the job failed (exit {returncode}):\n{log[-4000:]}")
    lines = metrics_lines(log)
    run = job_run(system, events, lines)
    run.memory = memory.summary()
    # the sample's late events; a keyed run's mis-keyed records would show here too
    dead: dict[str, int] = {}
    for line in lines:
        if line.get("view") == "user_txn_stats":  # each view's line counts the topic's
            for reason, count in line.get("dead_letters", {}).items():
                dead[reason] = dead.get(reason, 0) + count
    if dead:
        run.note = "dead letters: " + ", ".join(f"{n:,} {why}" for why, n in sorted(dead.items()))
    return run


def empty_redis(connection_string: str | None) -> None:
    """Flush the benchmark's Redis server (``host:port``) before a run, so that every run
    writes new entities as the first one does (updates cost more: the newer-or-equal rule
    reads the stored times)."""
    if connection_string is None:
        return
    import redis

    host, port = connection_string.split(",")[0].rsplit(":", 1)
    redis.Redis(host=host, port=int(port)).flushall()


def rows(events: sample.SampleEvents, start: int, stop: int) -> sample.SampleEvents:
    """Events ``start:stop`` (production order)."""
    columns = {f.name: getattr(events, f.name)[start:stop] for f in dataclasses.fields(events)}
    return dataclasses.replace(events, **columns)


def encode_json(events: sample.SampleEvents) -> list[tuple[bytes, bytes]]:
    """The records of :func:`featureflow.events.sample.to_json`, encoded column-wise by Arrow.

    Same JSON fields and values (``to_json`` loops in Python: ~10 x slower, too
    slow to feed the job at the benchmark's rates on this machine). Timestamps:
    RFC 3339 text with milliseconds, or epoch milliseconds where
    ``millis_encoded``; a NaN amount is ``null``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    millis = pa.array(events.event_ns // 1_000_000, pa.int64())
    text = pc.replace_substring(pc.cast(millis.cast(pa.timestamp("ms")), pa.string()), " ", "T")
    rfc3339 = pc.binary_join_element_wise('"', text, 'Z"', "")
    user = pc.cast(pa.array(events.user_id, pa.int64()), pa.string())
    amount = pa.array(events.amount, pa.float64(), from_pandas=True)
    stamp = pc.if_else(events.millis_encoded, pc.cast(millis, pa.string()), rfc3339)
    value = pc.binary_join_element_wise(
        '{"user_id":', user,
        ',"amount":', pc.fill_null(pc.cast(amount, pa.string()), "null"),
        ',"merchant":"', pa.array(events.merchant, pa.string()),
        '","event_timestamp":', stamp,
        "}", "",
    )  # fmt: skip
    keys = user.cast(pa.binary()).to_pylist()
    return list(zip(keys, value.cast(pa.binary()).to_pylist(), strict=True))


def check_encoding(events: sample.SampleEvents, count: int = 2_000) -> None:
    """:func:`encode_json` must carry the same events as ``sample.to_json`` (as parsed JSON)."""
    head = rows(events, 0, count)
    expected = [(k, json.loads(v)) for k, v in sample.to_json(head)]
    got = [(k, json.loads(v)) for k, v in encode_json(head)]
    if got != expected:
        raise AssertionError("encode_json disagrees with sample.to_json")


def produce_events(
    bootstrap: str, topic: str, events: int, users: int, seed: int, partitions: int = 2
) -> tuple[float, int]:
    """Generate and produce ``events`` sample events into a new topic of ``partitions``
    partitions, keyed by user (the producer's default partitioner: CRC-32 of the key);
    returns the seconds it took and the distinct users (entities) among them (the sample's
    activity is Zipf-like: fewer than ``users``)."""
    kafka_broker.create_topic(bootstrap, topic, partitions=partitions)
    generated = sample.generate(events, users=users, seed=seed)
    check_encoding(generated)
    started = time.monotonic()
    for start in range(0, events, 1_000_000):
        chunk = rows(generated, start, start + 1_000_000)
        kafka_client.produce(bootstrap, topic, encode_json(chunk), timeout_s=600)
    return time.monotonic() - started, len(np.unique(generated.user_id))


def warm_broker(bootstrap: str, topic: str, max_offsets_per_trigger: int) -> tuple[float, str]:
    """Read ``topic`` once through Spark's Kafka source, untimed; returns (seconds, a
    report of the read).

    The broker is a JVM too: the first system to read a freshly produced topic pays for
    HotSpot compiling the broker's request paths, which the later systems do not. The
    warm-up must reach the paths the timed runs reach: Spark's Kafka source asks the
    broker for each partition's earliest and latest offsets after every poll (its
    ``InternalKafkaConsumer.fetch``), so a plain consumer's read (Kafka's own
    ``ConsumerPerformance``, used before) left the ``ListOffsets`` path to the first
    timed run: per 10 s snapshot of the broker's compiled methods (``jcmd
    Compiler.codelist``), featureflow's run then C2-compiled 257 broker methods,
    ``ListOffsets`` among the most, against 100 in ``window()``'s run after it. This
    reads as the read floor does (``_warm_broker.py``, a JVM of its own, so the timed
    runs start as they would without it), then waits for the broker to go idle:
    HotSpot compiles what the read queued after it.
    """
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parent / "_warm_broker.py"),
         bootstrap, topic, str(max_offsets_per_trigger)],
        capture_output=True, text=True, timeout=900, check=True,
    )  # fmt: skip
    read_s = time.monotonic() - started
    settled_s = wait_for_idle_broker()
    return read_s + settled_s, (
        f"{done.stdout.strip().splitlines()[-1]}; broker idle after {settled_s:.0f} s more"
    )


class RateProducer(threading.Thread):
    """Writes events stamped "now" (ms) at ``rate`` events/s, in 200 ms ticks, for ``seconds``.

    One producer for the whole run (a producer per tick capped the rate at ~60/s
    on the loaded machine); when a tick takes longer than 200 ms the achieved
    rate falls below ``rate`` (reported).
    """

    TICK_S = 0.2

    def __init__(self, bootstrap: str, topic: str, rate: float, seconds: float, users: int):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate, self.seconds = bootstrap, topic, rate, seconds
        self.per_tick = max(1, int(rate * self.TICK_S))
        self.pool = sample.generate(self.per_tick * 20, users=users, seed=11)
        self.sent = 0
        self.elapsed_s = 0.0

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        started = time.monotonic()
        tick = 0
        while (now := time.monotonic()) - started < self.seconds:
            due = started + tick * self.TICK_S
            if now < due:
                time.sleep(due - now)
            at = (tick % 20) * self.per_tick
            chunk = rows(self.pool, at, at + self.per_tick)
            stamp_ns = time.time_ns() // 1_000_000 * 1_000_000
            chunk = dataclasses.replace(chunk, event_ns=np.full(self.per_tick, stamp_ns))
            for key, value in encode_json(chunk):
                producer.produce(self.topic, value=value, key=key)
            producer.poll(0)
            self.sent += self.per_tick
            tick += 1
        self.elapsed_s = time.monotonic() - started
        producer.flush(60)


def weighted_quantile(values: list[float], weights: list[int], q: float) -> float | None:
    """The ``q`` quantile of ``values`` where each counts ``weights`` times (None if empty)."""
    if not values or sum(weights) == 0:
        return None
    order = np.argsort(values)
    cumulative = np.cumsum(np.asarray(weights)[order])
    return float(np.asarray(values)[order][np.searchsorted(cumulative, q * cumulative[-1])])


def run_freshness(
    root: Path,
    bootstrap: str,
    rate: float,
    seconds: float,
    users: int,
    redis: str | None = None,
    warmup_s: float = 0.0,
    job_options: tuple[str, ...] = (),
) -> StreamRun:
    """Freshness of the job (both views) while a producer writes ``rate`` events/s stamped now.

    ``job_options``: more options of the job (e.g. ``--driver-pass-records 0``).

    The job is warmed up first with one second of events at ``rate`` (its first
    micro-batch pays Spark's, the workers' and the kernels' start-up, which a
    continuous run pays once); then the producer runs ``warmup_s + seconds``, and
    only the micro-batches that end after ``warmup_s`` count.
    p50 and p99 are those of the counted batches' events: read off the sum of
    their freshness histograms (each metrics line's ``freshness_buckets``; bucket
    upper edges, a bucket 26 % wide). The note keeps the figure reported before
    2026-12-04 beside them: the events-weighted 0.99 quantile of the batches' own
    p99, an upper bound of the events' p99 set by the slowest few batches.
    """
    topic = f"bench-stream-fresh-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(bootstrap, topic, partitions=2)
    repo = private_repo(root, f"repo-{topic}", topic, redis)
    checkpoint = root / f"checkpoint-{topic}"
    log_path = root / f"checkpoint-{topic}.log"
    with log_path.open("w") as log_file:
        job = subprocess.Popen(job_command(repo, bootstrap, checkpoint, *job_options),
                               stdout=log_file, stderr=subprocess.STDOUT, env=_env())  # fmt: skip
        try:
            deadline = time.monotonic() + 600  # a loaded machine starts Spark slowly
            while "SIGTERM stops the queries" not in log_path.read_text():
                if job.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the job did not start:\n{log_path.read_text()[-4000:]}")
                time.sleep(0.5)
            # A continuous job is warm: its first micro-batch (JVM, Python workers, kernels,
            # the Feast registry) takes seconds, and events produced meanwhile would make a
            # backlog that a start-up, not the steady state, has to work off.
            warm = RateProducer(bootstrap, topic, rate, 1.0, users)
            warm.run()
            while (
                sum(b["events"] for b in metrics_lines(log_path.read_text())
                    if b["view"] == "user_txn_stats") < warm.sent
            ):  # fmt: skip
                if job.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the job did not warm up:\n{log_path.read_text()[-4000:]}")
                time.sleep(0.5)
            producer = RateProducer(bootstrap, topic, rate, warmup_s + seconds, users)
            started_s = time.time()
            producer.start()
            producer.join()
            # Let the job catch up with the last events (its first batch warms up for minutes).
            drain_until = time.monotonic() + 900
            while time.monotonic() < drain_until and job.poll() is None:
                done = metrics_lines(log_path.read_text())
                total = sum(b["events"] for b in done if b["view"] == "user_txn_stats")
                if total >= warm.sent + producer.sent:
                    break
                time.sleep(2)
        finally:
            job.send_signal(signal.SIGTERM)
            try:
                job.wait(120)
            except subprocess.TimeoutExpired:
                job.kill()
    batches = [
        b
        for b in metrics_lines(log_path.read_text())
        if b["events"] > 0 and b["end_s"] >= started_s + warmup_s
    ]
    run = job_run("featureflow, both views, live", producer.sent, batches)
    run.events = sum(b["events"] for b in batches if b["view"] == "user_txn_stats")
    merged = np.sum([bucket_array(b["freshness_buckets"]) for b in batches], axis=0)
    run.freshness_p50_s = histogram_quantile(merged, 0.5)
    run.freshness_p99_s = histogram_quantile(merged, 0.99)
    batches_p99 = weighted_quantile(
        [b["freshness_p99_s"] for b in batches], [b["events"] for b in batches], 0.99
    )
    achieved = producer.sent / producer.elapsed_s if producer.elapsed_s else 0.0
    counted = [b for b in batches if b["view"] == "user_txn_stats"]
    on_driver = sum(b.get("pass_on") == "driver" for b in counted)
    shape = (
        f"; {len(counted)} micro-batches ({on_driver} on the driver), median "
        f"{np.median([b['records'] for b in counted]):,.0f} records in "
        f"{np.median([b['duration_s'] for b in counted]):.2f} s"
        if counted else ""
    )  # fmt: skip
    run.note = (f"producer: {producer.sent} events in {producer.elapsed_s:.0f} s "
                f"({achieved:,.0f}/s, target {rate:,.0f}/s), started {started_s:.0f}; "
                f"batches ending in the first {warmup_s:.0f} s not counted{shape}; "
                f"0.99 quantile of the batches' p99: {batches_p99 or 0:.3g} s")  # fmt: skip
    return run


def profile_phases(root: Path, events: int, users: int, batch: int, partitions: int) -> str:
    """Where a micro-batch's time goes on the executors, phase by phase, outside Spark.

    Replays what :class:`~featureflow.spark.online_sink.OnlineFeatureWriter` does
    for shuffle partition 0 of ``partitions`` (users hashed as ``user_id %
    partitions``), micro-batch after micro-batch of ``batch`` topic events, with
    the job's own functions: load the state, compute the view's outputs (state
    + new events), write the online store (SQLite), the offline log and the new
    state. Returns a markdown table of seconds per phase and batch.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from featureflow.repo import load_store, stream_view_specs
    from featureflow.spark import online_sink
    from featureflow.spark.offline_sink import OfflineFeatureLog
    from featureflow.spark.state import StateStore

    repo = private_repo(root, "repo-phases", "unused")
    store = load_store(repo)
    generated = sample.generate(events, users=users, seed=5)
    mine = generated.user_id % partitions == 0
    table = pa.table(
        {
            "user_id": generated.user_id[mine],
            "event_ns": generated.event_ns[mine],
            "amount": pa.array(generated.amount[mine], from_pandas=True),
        }
    )
    per_batch = batch // partitions
    lines = ["| view | batch | new | state in | load | compute | online | offline | save | total |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for spec in stream_view_specs(store):
        state = StateStore(str(root / "phases-state" / spec.name), partitions)
        offline = OfflineFeatureLog(str(root / "phases-offline"), spec.name)
        outputs = (
            online_sink.session_outputs if spec.is_session_view else online_sink.rolling_outputs
        )
        seen_max = 0
        for batch_id, start in enumerate(range(0, table.num_rows, per_batch)):
            new = table.slice(start, per_batch)
            seen_max = max(seen_max, int(pc.max(new.column("event_ns")).as_py()))
            clock = [time.perf_counter()]
            prior = state.load_events(0, before_batch=batch_id)
            clock.append(time.perf_counter())
            events_in = new if prior is None else pa.concat_tables([prior, new])
            rows, history, kept = outputs(
                events_in, new.num_rows, spec, seen_max - spec.watermark_ns
            )
            clock.append(time.perf_counter())
            online_sink.write_online(store, {spec.name: rows})
            clock.append(time.perf_counter())
            offline.write(batch_id, 0, history)
            clock.append(time.perf_counter())
            state.save_events(0, batch_id, kept)
            clock.append(time.perf_counter())
            phases = " | ".join(f"{b - a:.2f}" for a, b in itertools.pairwise(clock))
            lines.append(f"| {spec.name} | {batch_id} | {new.num_rows:,} "
                         f"| {0 if prior is None else prior.num_rows:,} | {phases} "
                         f"| {clock[-1] - clock[0]:.2f} |")  # fmt: skip
    return "\n".join(lines)


def table(
    runs: list[StreamRun], reference: StreamRun | None, floor: StreamRun | None = None
) -> str:
    """The markdown table of the runs (ratio: events/s vs featureflow with both views; share:
    events/s as a share of the Kafka read floor's)."""

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.3g}"

    lines = ["| system | events | wall s | events/s | vs featureflow | of read floor "
             "| after batch 0, events/s | vs featureflow after batch 0 | freshness p50 / p99 s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for run in runs:
        share = (
            f"{run.events_per_s / floor.events_per_s:.0%}"
            if floor is not None and floor.events_per_s
            else "-"
        )
        ratio = (
            run.events_per_s / reference.events_per_s
            if reference and reference.events_per_s
            else None
        )
        fresh = (
            "-"
            if run.freshness_p50_s is None
            else f"{fmt(run.freshness_p50_s)} / {fmt(run.freshness_p99_s)}"
        )
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        steady, steady_ref = run.steady_events_per_s, reference and reference.steady_events_per_s
        steady_shown = "-" if steady is None else f"{steady:,.0f}"
        steady_ratio = f"{steady / steady_ref:.2f}x" if steady and steady_ref else "-"
        lines.append(
            f"| {run.system} | {run.events:,} | {run.wall_s:.1f} | {run.events_per_s:,.0f} "
            f"| {shown} | {share} | {steady_shown} | {steady_ratio} | {fresh} |"
        )
    return "\n".join(lines)


FIXED_COST_SETTINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "defaults (small batches on the driver)": ((), ()),
    "every batch shuffled (--driver-pass-records 0)": ((), ("--driver-pass-records", "0")),
    "shuffled, spark.locality.wait=0": (("spark.locality.wait=0",),
                                        ("--driver-pass-records", "0")),
    "shuffled, 2 shuffle partitions": ((), ("--driver-pass-records", "0", "--partitions", "2")),
    "shuffled, no Spark UI": (("spark.ui.enabled=false",), ("--driver-pass-records", "0")),
}
"""Settings whose effect on a micro-batch's fixed cost ``--fixed-cost`` measures: (Spark
settings, job options)."""


def fixed_cost(args: argparse.Namespace, root: Path) -> str:
    """A micro-batch's fixed cost: many tiny batches (``--fixed-cost-batch`` records) of both
    views, per Spark setting in :data:`FIXED_COST_SETTINGS`. Median seconds per batch: the
    ``foreachBatch`` work (metrics ``duration_s``) and batch end to batch end (also Spark's
    offset fetch, planning and commit)."""
    per_batch = args.fixed_cost_batch
    events = per_batch * 40
    topic = f"bench-stream-fixed-{uuid.uuid4().hex[:8]}"
    produce_events(args.bootstrap, topic, events, users=max(100, events // 10), seed=3)
    lines = ["| settings | batches | foreachBatch s (median) | batch to batch s (median) |",
             "|---|---:|---:|---:|"]  # fmt: skip
    for name, (settings, options) in FIXED_COST_SETTINGS.items():
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40]
        repo = private_repo(root, f"repo-fixed-{slug}", topic)
        run = run_job(repo, args.bootstrap, root / f"ckpt-fixed-{slug}", events, name, per_batch,
                      *options, spark_conf=settings)  # fmt: skip
        first_view = run.batches[0]["view"]
        batches = [b for b in run.batches if b["view"] == first_view][2:]  # past the warm-up
        ends = sorted(b["end_s"] for b in batches if "end_s" in b)
        durations = [b["duration_s"] for b in batches]  # one foreachBatch runs all views
        gaps = [b - a for a, b in itertools.pairwise(ends)]
        lines.append(f"| {name} | {len(batches)} | {np.median(durations):.3f} "
                     f"| {np.median(gaps) if gaps else float('nan'):.3f} |")  # fmt: skip
        print(lines[-1], flush=True)
    kafka_broker.delete_topic(args.bootstrap, topic)
    return "\n".join(lines)


def _batch_spans(run: StreamRun) -> list[tuple[int, float, float]]:
    """(batch id, start, end) of each micro-batch of ``run``, epoch s, by batch id: from
    the first view's start (its end less its duration) to the last view's end."""
    spans: dict[int, tuple[float, float]] = {}
    for batch in run.batches:
        if batch.get("end_s") is None or batch.get("batch_id") is None:
            continue
        start = batch_start_s(batch)
        known = spans.get(batch["batch_id"], (start, batch["end_s"]))
        spans[batch["batch_id"]] = (min(known[0], start), max(known[1], batch["end_s"]))
    return [(batch_id, start, end) for batch_id, (start, end) in sorted(spans.items())]


def peak_moment(run: StreamRun) -> tuple[int | None, str]:
    """Where the workers' peak growth fell among the run's micro-batches: (the batch it
    fell in, or the last one that ended before it; None before any) and a description:
    inside batch ``b``, between two, or after the last one (the end of an
    ``--available-now`` run: its session close and shutdown)."""
    at = run.memory.get("peak_growth_epoch_s")
    spans = _batch_spans(run)
    if at is None or not spans:
        return None, "-"
    for batch_id, start, end in spans:
        if start <= at <= end:
            return batch_id, f"in batch {batch_id} of {len(spans)}"
    ended = [batch_id for batch_id, _, end in spans if end < at]
    if not ended:
        return None, "before the first batch"
    if ended[-1] == spans[-1][0]:
        return ended[-1], f"{at - spans[-1][2]:.1f} s after the last batch"
    return ended[-1], f"between batches {ended[-1]} and {ended[-1] + 1}"


def state_after_batches(run: StreamRun) -> dict[int, int]:
    """The state's events (Arrow bytes, all views) held after each micro-batch: a view
    without a line in a batch (nothing changed for it) holds what it held before."""
    held: dict[str, int] = {}
    after: dict[int, int] = {}
    for batch_id in sorted({b["batch_id"] for b in run.batches if b.get("batch_id") is not None}):
        for batch in run.batches:
            if batch.get("batch_id") == batch_id:
                held[batch["view"]] = batch.get("state_bytes") or 0
        after[batch_id] = sum(held.values())
    return after


def state_at_peak(run: StreamRun, placed: tuple[int | None, str] | None = None) -> int | None:
    """The state's events (bytes) the workers held throughout the moment of their peak
    growth: in batch ``b``, the smaller of the state before it (after ``b - 1``) and after
    it (both are held during ``b``); outside a batch, the state after the last one before.
    ``placed``: :func:`peak_moment`'s answer when the caller already has it."""
    batch_id, moment = placed or peak_moment(run)
    if batch_id is None:
        return None
    after = state_after_batches(run)
    if moment.startswith("in batch") and batch_id - 1 in after:
        return min(after[batch_id - 1], after[batch_id])
    return after[batch_id]


def memory_table(runs: list[StreamRun], entities: int) -> str:
    """The featureflow runs' state after their last batch and their Python workers' RSS.

    The state's raw size is reported two ways, and the workers' growth against each:
    its events (``state_bytes``: key, time and values of every held event, Arrow
    bytes) and its whole footprint, those events plus the frame states and kept
    sessions held beside them (``state_frame_bytes``). Per entity: over the topic's
    distinct ``entities`` (each view holds state for at most those). The peak growth is
    also set against the state held when it was sampled (:func:`state_at_peak`): the
    run's last batches close sessions, so the state at the end is smaller than the one
    the workers held at their peak.
    """
    lines = ["| system | state events | state MiB | bytes / event | frame states MiB "
             "| bytes / entity (events + frames) | workers' peak MiB "
             "| largest worker MiB | first -> last tenth MiB | worker baseline MiB "
             "| kept growth MiB (/ state) | peak growth MiB (/ state) "
             "| peak growth / (state + frames) | peak growth sampled "
             "| state held then MiB | peak growth / state held then "
             "| cold partition tasks after batch 0 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
             "|---|---:|---:|---:|"]  # fmt: skip
    for run in runs:
        if not run.memory.get("samples"):
            continue
        last: dict[str, dict[str, Any]] = {}
        for batch in run.batches:
            last[batch["view"]] = batch
        rows_held = sum(b.get("state_rows") or 0 for b in last.values())
        bytes_held = sum(b.get("state_bytes") or 0 for b in last.values())
        frame_bytes = sum(b.get("state_frame_bytes") or 0 for b in last.values())
        growth = run.memory.get("growth_mib")
        if growth is None:  # no baseline: the summed RSS's first to last tenth
            growth = run.memory["last_tenth_mib"] - run.memory["first_tenth_mib"]
        kept = run.memory.get("kept_growth_mib")
        state_mib = bytes_held / (1 << 20)
        whole_mib = (bytes_held + frame_bytes) / (1 << 20)
        # the state when the peak was sampled, not at the end: the run's last batches
        # close sessions and the state shrinks (the peak's own moment is the fair base)
        placed = peak_moment(run)
        then_mib = (state_at_peak(run, placed) or 0) / (1 << 20)
        # a task is cold when its worker did not hold the partition's frame states
        later = [b for b in run.batches if (b.get("batch_id") or 0) > 0]
        tasks = sum(b.get("partitions_run") or 0 for b in later)
        cold = sum(b.get("cold_partitions") or 0 for b in later)
        lines.append(
            f"| {run.system} | {rows_held:,} | {state_mib:.0f} "
            f"| {bytes_held / rows_held if rows_held else 0:.1f} "
            f"| {frame_bytes / (1 << 20):.0f} "
            f"| {(bytes_held + frame_bytes) / entities if entities else 0:,.0f} "
            f"| {run.memory['peak_total_mib']:,.0f} | {run.memory['peak_worker_mib']:,.0f} "
            f"| {run.memory['first_tenth_mib']:,.0f} -> {run.memory['last_tenth_mib']:,.0f} "
            f"| {run.memory.get('baseline_mib', 0):,.0f} "
            f"| {'-' if kept is None else f'{kept:,.0f} ({kept / state_mib:.2f}x)'} "
            f"| {growth:,.0f} ({growth / state_mib if state_mib else float('nan'):.2f}x) "
            f"| {growth / whole_mib if whole_mib else float('nan'):.2f}x "
            f"| {placed[1]} "
            f"| {'- | -' if not then_mib else f'{then_mib:.0f} | {growth / then_mib:.2f}x'} "
            f"| {f'{cold:,} of {tasks:,} ({cold / tasks:.0%})' if tasks else '-'} |"
        )
    return "\n".join(lines)


CPU_COLUMNS = (
    ("jit", "JVM JIT compilers"), ("jvm", "JVM, other threads"),
    ("python_workers", "Python workers"), ("driver_python", "driver Python"),
    ("redis", "Redis server"), ("broker", "Kafka broker"), ("other", "other"),
)  # fmt: skip


def cpu_table(runs: list[StreamRun]) -> str:
    """CPU seconds each run's processes spent from its first micro-batch's start to its
    last one's end, by kind (``_process_cpu.py``), per million events and as cores busy.

    The machine's two cores bound every system: a system's events/s is at most
    2 / (its CPU seconds per event). The peers run one after the other in one session,
    so the first of them (``window()``) pays its JVM's JIT compilation and the floors
    after it hardly any; each featureflow run starts a JVM of its own."""
    head = " | ".join(title for _, title in CPU_COLUMNS)
    lines = [f"| system | {head} | total CPU s | CPU s per M events | cores busy |",
             "|---|" + "---:|" * (len(CPU_COLUMNS) + 3)]  # fmt: skip
    for run in runs:
        if not run.cpu or not run.events:
            continue
        cells = " | ".join(f"{run.cpu.get(kind, 0.0):.1f}" for kind, _ in CPU_COLUMNS)
        seconds = run.cpu.get("seconds") or run.wall_s
        lines.append(f"| {run.system} | {cells} | {run.cpu['total']:.1f} "
                     f"| {run.cpu['total'] / (run.events / 1e6):.1f} "
                     f"| {run.cpu['total'] / seconds:.2f} |")  # fmt: skip
    return "\n".join(lines)


def save(section: str, content: dict[str, Any]) -> None:
    """Store one section (``sustained``, ``freshness``, ``phases``) of ``stream.json``.

    Each section is its own run (scale, load average); sections not run now are
    kept from earlier runs. ``stream.md`` shows every section's table.
    """
    path = RESULTS / "stream.json"
    record = json.loads(path.read_text()) if path.exists() else {}
    record.setdefault("benchmark", "stream job: sustained events/s and freshness vs peers")
    record["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, shared with other work"
    record.setdefault("sections", {})[section] = {
        **content, "recorded": datetime.now().astimezone().isoformat(timespec="seconds"),
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    parts = [f"# {record['benchmark']}\n\n{record['machine']}."]
    for name, done in record["sections"].items():
        load = done.get("load_average_1m", "?")
        parts.append(
            f"## {name} ({done['recorded']}; load average {load})\n\n"
            f"Scale: {done.get('scale', {})}\n\n{done['table']}"
            + "".join(f"\n- {note}" for note in done.get("notes", []))
        )
    (RESULTS / "stream.md").write_text("\n\n".join(parts) + "\n")


def as_record(runs: list[StreamRun]) -> list[dict[str, Any]]:
    return [
        {
            **dataclasses.asdict(r),
            "events_per_s": round(r.events_per_s, 1),
            "steady_events_per_s": None
            if r.steady_events_per_s is None
            else round(r.steady_events_per_s, 1),
        }
        for r in runs
    ]


def sustained(args: argparse.Namespace, root: Path, skip: set[str]) -> StreamRun:
    """Step 1 and the peers on one topic of ``args.events`` events; returns the reference run
    (featureflow, both views, on the first of ``args.stores``)."""
    load_before = os.getloadavg()[0]
    topic = f"bench-stream-{uuid.uuid4().hex[:8]}"
    produce_s, entities = produce_events(
        args.bootstrap, topic, args.events, args.users, seed=5, partitions=args.topic_partitions
    )
    print(f"produced {args.events:,} events ({args.users:,} users) to {topic} in {produce_s:.0f} s")
    warm_s, report = warm_broker(args.bootstrap, topic, args.max_offsets_per_trigger)
    print(f"read the topic once in {warm_s:.0f} s (broker warm-up, not timed): {report}")
    offsets = args.max_offsets_per_trigger
    runs: list[StreamRun] = []
    floor: StreamRun | None = None
    cpu = ProcessCpu(os.getpid())  # every process of the runs, and the broker
    cpu.start()
    for store in args.stores:
        redis = args.redis if store == "redis" else None
        repo = private_repo(root, f"repo-both-{store}", topic, redis)
        empty_redis(redis)
        runs.append(run_job(repo, args.bootstrap, root / f"ckpt-both-{store}", args.events,
                            f"featureflow, both views (18 rolling + session), {store}",
                            offsets))  # fmt: skip
        print(table(runs, runs[0]), flush=True)
    both = runs[0]
    for slices in [] if "keyed" in skip else args.keyed_slices.split(","):
        store = args.stores[0]
        redis = args.redis if store == "redis" else None
        keyed_repo = private_repo(root, f"repo-keyed-{slices}-{store}", topic, redis)
        empty_redis(redis)
        named = "" if slices == "auto" else f" ({slices} slices each)"
        runs.append(run_job(keyed_repo, args.bootstrap, root / f"ckpt-keyed-{slices}-{store}",
                            args.events,
                            f"featureflow, both views, pass per Kafka partition{named}, {store}",
                            offsets, "--keyed-topic", "crc32",
                            "--partitions", str(args.topic_partitions),
                            *(() if slices == "auto" else ("--keyed-slices", slices))))  # fmt: skip
        print(table(runs, both), flush=True)
    if "rolling" not in skip:
        store = args.stores[0]
        redis = args.redis if store == "redis" else None
        rolling_repo = private_repo(root, "repo-rolling", topic, redis)
        empty_redis(redis)
        runs.append(run_job(rolling_repo, args.bootstrap, root / "ckpt-rolling", args.events,
                            f"featureflow, user_txn_stats only (18 rolling), {store}", offsets,
                            "--view", "user_txn_stats"))  # fmt: skip
        print(table(runs, both), flush=True)
    if {"window", "feast", "parse", "shuffle", "floor"} - skip:
        from featureflow.spark.session import build_session

        # Feast's processor collects each micro-batch to pandas on the driver: at 1 M
        # records a trigger the default 1 GiB heap runs out (bench/results/stream_10m.md)
        spark = build_session(
            "bench-stream-peers", master="local[2]",
            extra_conf={
                "spark.sql.streaming.numRecentProgressUpdates": "100000",
                "spark.driver.memory": os.environ.get("BENCH_PEERS_DRIVER_MEMORY", "6g"),
            },
        )  # fmt: skip
        if "window" not in skip:
            window_repo = private_repo(root, "repo-window", topic)
            runs.append(
                run_spark_window(spark, window_repo, args.bootstrap, root / "ckpt-window", offsets)
            )
            print(table(runs, both), flush=True)
        if "feast" not in skip:
            feast_repo = private_repo(root, "repo-feast", topic)
            try:
                runs.append(run_feast(spark, feast_repo, args.events, root / "ckpt-feast",
                                      offsets, args.feast_timeout))  # fmt: skip
            except Exception as error:  # a peer that fails is a result, not the end of the run
                reason = next((line for line in str(error).splitlines() if line.strip()), "")
                note = f"failed: {type(error).__name__}: {reason[:300]}"
                runs.append(StreamRun("Feast SparkKafkaProcessor (ingest, no windows)", 0, 0.0,
                                      note=note))  # fmt: skip
            print(table(runs, both), flush=True)
        if "parse" not in skip:
            parse_repo = private_repo(root, "repo-parse", topic)
            runs.append(
                run_parse_floor(spark, parse_repo, args.bootstrap, root / "ckpt-parse", offsets)
            )
            print(table(runs, both), flush=True)
        if "shuffle" not in skip:
            shuffle_repo = private_repo(root, "repo-shuffle", topic)
            runs.append(run_shuffle_floor(spark, shuffle_repo, args.bootstrap,
                                          root / "ckpt-shuffle", offsets))  # fmt: skip
            print(table(runs, both), flush=True)
        if "floor" not in skip:
            floor = run_read_floor(spark, args.bootstrap, topic, root / "ckpt-floor", offsets)
            runs.append(floor)
            print(table(runs, both, floor), flush=True)
        spark.stop()
    cpu.stop()
    for run in runs:
        if run.interval is not None:
            run.cpu = cpu.between(*run.interval)
    kafka_broker.delete_topic(args.bootstrap, topic)
    load = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    save(args.section or "sustained", {
        "scale": {"events": args.events, "users": args.users, "entities": entities,
                  "topic_partitions": args.topic_partitions,
                  "max_offsets_per_trigger": offsets},
        "load_average_1m": load, "produce_s": round(produce_s, 1), "runs": as_record(runs),
        "table": table(runs, both, floor) + "\n\nMemory:\n\n" + memory_table(runs, entities)
        + "\n\nCPU (each run's micro-batches):\n\n" + cpu_table(runs),
        "notes": [f"{r.system}: {r.note}" for r in runs if r.note],
    })  # fmt: skip
    return both


def freshness_sweep(args: argparse.Namespace, root: Path, rates: list[float]) -> None:
    """Freshness p50/p99 against the producer's rate, per online store: a table and a chart
    (``bench/results/stream_freshness.png``)."""
    load_before = os.getloadavg()[0]
    runs: dict[str, list[tuple[float, StreamRun]]] = {}
    for store in args.stores:
        for rate in rates:
            run = run_freshness(root, args.bootstrap, rate, args.fresh_seconds, args.users,
                                args.redis if store == "redis" else None,
                                args.fresh_warmup, tuple(args.job_option))  # fmt: skip
            run.system = f"featureflow, both views, live, {store}, {rate:,.0f} ev/s"
            runs.setdefault(store, []).append((rate, run))
            print(table([run], None), f"\n- {run.note}", flush=True)
    every = [run for points in runs.values() for _, run in points]
    notes = [run.note for run in every]
    # a sweep saved under its own name charts beside the default's, not over it
    chart = RESULTS / (f"stream_{args.section}.png" if args.section else "stream_freshness.png")
    _freshness_chart(runs, chart, tuple(args.job_option))
    notes.append(f"chart: {chart.relative_to(ROOT)}")
    save(args.section or "freshness_sweep", {
        "scale": {"rates": rates, "seconds": args.fresh_seconds, "users": args.users,
                  "stores": list(args.stores)},
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "runs": as_record(every), "table": table(every, None),
        "notes": notes,
    })  # fmt: skip


def _freshness_chart(
    runs: dict[str, list[tuple[float, StreamRun]]], path: Path, options: tuple[str, ...] = ()
) -> None:
    """p50/p99 against the rate per store; ``options``: the job's extra options, in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for store, points in runs.items():
        rates = [rate for rate, _ in points]
        for quantile, style in (("p50", "-o"), ("p99", "--s")):
            values = [getattr(run, f"freshness_{quantile}_s") for _, run in points]
            axes.plot(rates, [v if v is not None else float("nan") for v in values], style,
                      label=f"{store} {quantile}")  # fmt: skip
    axes.axhline(2.0, color="grey", linewidth=0.8, linestyle=":")
    axes.set_xlabel("producer rate (events/s, 100 k users)")
    axes.set_ylabel("freshness: online write - event time (s)")
    axes.set_yscale("log")
    axes.set_xscale("log")
    axes.set_title("featureflow stream job, both example views"
                   + (f"\n{' '.join(options)}" if options else ""))  # fmt: skip
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=500_000)
    parser.add_argument(
        "--topic-partitions", type=int, default=2,
        help="partitions of the sustained run's topic (the pass per Kafka partition runs "
             "one task per partition)",
    )  # fmt: skip
    parser.add_argument(
        "--fresh-rate", type=float, default=0.0,
        help="events/s of the freshness run (default: half the sustained rate; "
             "required with --skip sustained)",
    )  # fmt: skip
    parser.add_argument("--fresh-seconds", type=float, default=90.0)
    parser.add_argument(
        "--fresh-warmup", type=float, default=30.0,
        help="seconds of producing before freshness counts (the job's start-up)",
    )  # fmt: skip
    parser.add_argument(
        "--keyed-slices", default="auto", metavar="N[,N...]",
        help="the pass per Kafka partition: one run per value of its --keyed-slices "
        "(auto: the job's default)",
    )
    parser.add_argument(
        "--job-option", action="append", default=[],
        help="an option of the job in the freshness runs, repeatable "
        "(e.g. --job-option=--driver-pass-records --job-option=0)",
    )  # fmt: skip
    parser.add_argument(
        "--fresh-rates", default="",
        help="comma-separated producer rates (events/s) of a freshness sweep per store, "
             "charted in bench/results/stream_freshness.png (e.g. 2000,5000,10000,20000,40000)",
    )  # fmt: skip
    parser.add_argument(
        "--stores", default=",".join(STORES),
        help="online stores to run featureflow with, the first one the reference "
             f"(default {','.join(STORES)}; Redis: a redis-server of the benchmark's own)",
    )  # fmt: skip
    parser.add_argument(
        "--bootstrap", default=None,
        help="a running broker (default: the project's local broker, started if needed)",
    )  # fmt: skip
    parser.add_argument(
        "--section", default="",
        help="save the sustained run, a freshness run or sweep under this section of "
             "stream.json (default sustained, freshness, freshness_sweep; a sweep under "
             "another name charts to bench/results/stream_<name>.png)",
    )
    parser.add_argument("--skip", default="", help=f"comma-separated: {','.join(SKIPPABLE)}")
    parser.add_argument("--feast-timeout", type=float, default=900.0)
    parser.add_argument(
        "--phases", action="store_true",
        help="only time the executor phases of one shuffle partition (no Kafka, no Spark)",
    )  # fmt: skip
    parser.add_argument(
        "--fixed-cost", action="store_true",
        help="only measure a micro-batch's fixed cost under a few Spark settings",
    )  # fmt: skip
    parser.add_argument("--fixed-cost-batch", type=int, default=200)
    args = parser.parse_args()
    if args.fixed_cost:
        load_before = os.getloadavg()[0]
        args.bootstrap = args.bootstrap or kafka_broker.start()
        with tempfile.TemporaryDirectory(prefix="bench-stream-fixed-") as tmp:
            result = fixed_cost(args, Path(tmp))
        print(result)
        save("fixed_cost", {
            "scale": {"records_per_batch": args.fixed_cost_batch, "batches": 40},
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "table": result,
        })  # fmt: skip
        return 0
    if args.phases:
        load_before = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="bench-stream-phases-") as tmp:
            profile = profile_phases(
                Path(tmp), args.events, args.users, args.max_offsets_per_trigger, partitions=4
            )
        print(profile)
        save("phases", {
            "scale": {"events": args.events, "users": args.users,
                      "events_per_batch": args.max_offsets_per_trigger, "partition": "0 of 4"},
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "table": profile,
        })  # fmt: skip
        return 0
    skip = {name for name in args.skip.split(",") if name}
    args.stores = [name for name in args.stores.split(",") if name]
    rates = [float(rate) for rate in args.fresh_rates.split(",") if rate]
    if skip - set(SKIPPABLE):
        parser.error(f"--skip takes {SKIPPABLE}, got {sorted(skip)}")
    if not args.stores or set(args.stores) - set(STORES):
        parser.error(f"--stores takes {STORES}, got {args.stores}")
    if args.section and not {"sustained", "fresh"} & skip:
        parser.error("--section names one step's section: --skip sustained or fresh")
    if "sustained" in skip and not (args.fresh_rate or rates) and "fresh" not in skip:
        parser.error("--skip sustained needs --fresh-rate or --fresh-rates")
    args.bootstrap = args.bootstrap or kafka_broker.start()
    with contextlib.ExitStack() as cleanup:
        tmp = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="bench-stream-"))
        args.redis = (
            cleanup.enter_context(RedisServer()).connection_string
            if "redis" in args.stores
            else None
        )
        root = Path(tmp)
        reference = None if "sustained" in skip else sustained(args, root, skip)
        if rates and "fresh" not in skip:
            freshness_sweep(args, root, rates)
        elif "fresh" not in skip:
            load_before = os.getloadavg()[0]
            rate = args.fresh_rate or (reference.events_per_s / 2 if reference else 0.0)
            live = run_freshness(root, args.bootstrap, rate, args.fresh_seconds, args.users,
                                 args.redis if args.stores[0] == "redis" else None,
                                 args.fresh_warmup, tuple(args.job_option))  # fmt: skip
            print(table([live], None), f"\n- {live.note}", flush=True)
            save(args.section or "freshness", {
                "scale": {"rate": round(rate, 1), "seconds": args.fresh_seconds,
                          "users": args.users},
                "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                "runs": as_record([live]), "table": table([live], None), "notes": [live.note],
            })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
