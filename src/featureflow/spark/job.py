"""``spark-submit jobs/realtime.py``: the real-time feature job's command line and main loop."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from featureflow.errors import FeatureflowError, RepoError, SchemaMismatchError
from featureflow.secrets import install_log_redaction
from featureflow.spark.watermarks import DEFAULT_FUTURE_SKEW_NS, DEFAULT_IDLE_TIMEOUT_NS

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from featureflow.spark.keyed_pass import KeyedTopic
    from featureflow.spark.pipeline import TopicBatchProcessor

log = logging.getLogger("featureflow.job")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="realtime.py",
        description="Compute the Feast repo's stream features from Kafka into its online store.",
    )
    parser.add_argument(
        "--repo", required=True, help="Feast repo (directory of feature_store.yaml)"
    )
    parser.add_argument(
        "--schemas", help="directory of the .mojo feature schemas (the schema gate)"
    )
    parser.add_argument(
        "--view", action="append", help="stream view to run (repeatable; default all)"
    )
    parser.add_argument(
        "--bootstrap", help="Kafka bootstrap servers (default: the view's KafkaSource)"
    )
    parser.add_argument(
        "--checkpoint", required=True, help="checkpoint directory (any Hadoop path)"
    )
    parser.add_argument(
        "--starting-offsets", default="earliest", help="for a new checkpoint (default earliest)"
    )
    parser.add_argument(
        "--max-offsets-per-trigger", type=int, help="cap on records per micro-batch"
    )
    parser.add_argument(
        "--available-now", action="store_true", help="process what the topic holds, then exit"
    )
    parser.add_argument("--trigger", help="processing-time trigger interval, e.g. '5 seconds'")
    parser.add_argument(
        "--partitions", type=int,
        help="partitions of the entity shuffle (default: the checkpoint's, else 4 per core)",
    )  # fmt: skip
    parser.add_argument(
        "--keyed-topic", choices=("murmur2", "crc32"), metavar="PARTITIONER",
        help="the topic is keyed by its entity (each record's key its entity's decimal "
        "text, its partition PARTITIONER's for that key: murmur2 as Java's client, crc32 "
        "as librdkafka's); one pass per Kafka partition, no shuffle; --partitions must be "
        "the topic's partition count; a record keyed otherwise is a dead letter",
    )  # fmt: skip
    parser.add_argument(
        "--keyed-slices", type=int, metavar="N",
        help="with --keyed-topic: state slices of each Kafka partition, run one after the "
        "other in its task to bound its memory (default: the checkpoint's, else 4 state "
        "partitions per core in all)",
    )  # fmt: skip
    from featureflow.spark.pipeline import DEFAULT_DRIVER_PASS_RECORDS

    parser.add_argument(
        "--driver-pass-records", type=int, default=DEFAULT_DRIVER_PASS_RECORDS, metavar="N",
        help="micro-batches of at most N Kafka records skip the shuffle: the driver runs "
        "their views, keeping the state resident between batches (the low-latency path of "
        "a continuous run; docs/latency.md); 0: always shuffle to the executors "
        f"(default {DEFAULT_DRIVER_PASS_RECORDS})",
    )  # fmt: skip
    parser.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics on 127.0.0.1:PORT/metrics"
    )
    parser.add_argument(
        "--offline-path", help="per-event feature history (Parquet; default <repo>/data/offline)"
    )
    parser.add_argument(
        "--dead-letter-topic", help="topic for records that can't be used (default <topic>.dlq)"
    )
    parser.add_argument(
        "--master", help="Spark master URL (default: spark-submit's, else local[*])"
    )
    parser.add_argument(
        "--idle-partition-timeout", type=_duration("--idle-partition-timeout"),
        default=DEFAULT_IDLE_TIMEOUT_NS, metavar="DURATION",
        help="a Kafka partition without new records for this long (driver clock) stops "
        "holding the watermark back, and rejoins when it has records again "
        f"(default {DEFAULT_IDLE_TIMEOUT_NS // 10**9} s; e.g. '90s', '5m')",
    )
    parser.add_argument(
        "--max-future-skew", type=_duration("--max-future-skew"),
        default=DEFAULT_FUTURE_SKEW_NS, metavar="DURATION",
        help="events more than this ahead of the driver's clock at their micro-batch are "
        f"dead letters 'in the future' (default {DEFAULT_FUTURE_SKEW_NS // 10**9} s)",
    )
    parser.add_argument(
        "--kafka-option", action="append", default=[], metavar="KEY=VALUE",
        help="extra Kafka client setting (SASL/SSL, ...); repeatable; wins over the file and "
        "FEATUREFLOW_KAFKA_* variables (README: Secrets)",
    )  # fmt: skip
    parser.add_argument(
        "--kafka-options-file", metavar="PATH",
        help="Kafka client settings as a Java .properties file (kafka. prefix optional), "
        "e.g. security.protocol, sasl.jaas.config, ssl.truststore.*",
    )  # fmt: skip
    parser.add_argument(
        "--state-warn-bytes", type=_byte_size, metavar="BYTES",
        help="log a warning after a micro-batch when a view's window state holds more "
        "than this (Arrow bytes; suffix K, M or G for KiB, MiB, GiB; default: no warning)",
    )  # fmt: skip
    _add_outage_options(parser)
    _add_guard_options(parser)
    return parser


def _add_guard_options(parser: argparse.ArgumentParser) -> None:
    """The checkpoint lock and the safe defaults (docs/production.md)."""
    from featureflow.spark.checkpoint_lock import DEFAULT_LEASE_NS

    parser.add_argument(
        "--checkpoint-lease", type=_duration("--checkpoint-lease"), default=DEFAULT_LEASE_NS,
        metavar="DURATION",
        help="a checkpoint lock whose holder, on another machine, has not renewed it for "
        f"this long is taken over (default {DEFAULT_LEASE_NS // 10**9} s)",
    )  # fmt: skip
    parser.add_argument(
        "--ui-host", metavar="HOST",
        help="address of the Spark UI, e.g. 0.0.0.0 to open it; 'none' turns it off "
        "(default $FEATUREFLOW_UI_HOST, else 127.0.0.1)",
    )  # fmt: skip
    parser.add_argument(
        "--file-mode", metavar="OCTAL",
        help="mode of the files the job writes; directories get the matching x bits "
        "(default $FEATUREFLOW_FILE_MODE, else 0600)",
    )  # fmt: skip


def _add_outage_options(parser: argparse.ArgumentParser) -> None:
    """Bounded waits and the retry budget (docs/operations.md)."""
    from featureflow.spark.supervisor import DEFAULT_RETRY_BUDGET_S
    from featureflow.spark.timeouts import DEFAULT_KAFKA_TIMEOUT_S, DEFAULT_REGISTRY_TIMEOUT_S

    parser.add_argument(
        "--retry-budget", type=_duration("--retry-budget"),
        default=int(DEFAULT_RETRY_BUDGET_S * 10**9), metavar="DURATION",
        help="a query that failed because Kafka, Redis or SQLite was unavailable restarts "
        "from its checkpoint (backoff 1 s, 2 s, ... 30 s) until the outage has lasted this "
        f"long (default {DEFAULT_RETRY_BUDGET_S:g} s)",
    )
    parser.add_argument(
        "--kafka-timeout", type=_duration("--kafka-timeout"),
        default=int(DEFAULT_KAFKA_TIMEOUT_S * 10**9), metavar="DURATION",
        help="bound of one Kafka request, offset lookup or fetch "
        f"(default {DEFAULT_KAFKA_TIMEOUT_S:g} s)",
    )
    parser.add_argument(
        "--registry-timeout", type=_duration("--registry-timeout"),
        default=int(DEFAULT_REGISTRY_TIMEOUT_S * 10**9), metavar="DURATION",
        help="bound of the Feast registry read at start "
        f"(default {DEFAULT_REGISTRY_TIMEOUT_S:g} s)",
    )  # fmt: skip


def _byte_size(text: str) -> int:
    """An argparse type: a size such as '512M' or '2G' (binary units) as int bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit():
        msg = f"expected a size in bytes such as 1073741824, 512M or 2G, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return int(digits) * scale


def _duration(option: str) -> Callable[[str], int]:
    """An argparse type: a duration such as '90s' or '5m' as int nanoseconds."""
    from featureflow.ops._durations import duration_ns

    def parse(text: str) -> int:
        try:
            return duration_ns(text, option)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def _keyed_topic(
    partitioner: str | None, partitions: int | None, slices: int | None = None
) -> KeyedTopic | None:
    """``--keyed-topic``'s setting (None: not set)."""
    if partitioner is None:
        if slices is not None:
            msg = "--keyed-slices needs --keyed-topic"
            raise RepoError(msg)
        return None
    from featureflow.spark.keyed_pass import KeyedTopic

    if not partitions:
        msg = "--keyed-topic needs --partitions: the topic's partition count"
        raise RepoError(msg)
    if slices is not None and slices < 1:
        msg = f"--keyed-slices {slices}: at least 1"
        raise RepoError(msg)
    return KeyedTopic(partitions, partitioner, slices)


def _kafka_settings(pairs: list[str], file: str | None = None) -> dict[str, str]:
    """The Kafka client settings: the file, then ``FEATUREFLOW_KAFKA_*``, then the pairs
    (:mod:`featureflow.infra.kafka_settings`; Spark takes them as
    :func:`~featureflow.infra.kafka_settings.spark_options`); their secrets are registered
    for redaction. Logs what the settings secure (protocol, SASL mechanism, TLS) and their
    keys, never a value."""
    from featureflow.infra import kafka_settings

    settings = kafka_settings.load(file=file, pairs=pairs)
    if settings:
        facts = kafka_settings.describe(settings)
        log.info(
            "kafka client: %s (SASL %s, TLS %s), %d settings: %s", facts["protocol"],
            facts["sasl"], facts["tls"], len(settings), ", ".join(sorted(settings)),
        )  # fmt: skip
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job; returns the exit status (0 when ``--available-now`` drained the topic)."""
    return run_command(build_parser(), _run_guarded, argv, log)


def run_command(
    parser: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], int],
    argv: Sequence[str] | None,
    logger: logging.Logger,
) -> int:
    """The shared entry point of featureflow's Spark jobs: logging, then ``run`` with
    featureflow's errors turned into one actionable log line (the gate's report as a
    table) and exit status 1."""
    from featureflow.cli import quiet_third_party_logs

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    quiet_third_party_logs()
    install_log_redaction()
    args = parser.parse_args(argv)
    try:
        return run(args)
    except SchemaMismatchError as error:
        logger.error("the schema gate refused to materialise:\n%s", error.report.to_table())
        return 1
    except FeatureflowError as error:
        logger.error("%s", error)
        return int(getattr(error, "exit_status", 1))


def _run_guarded(args: argparse.Namespace) -> int:
    """:func:`_run` holding the checkpoint's lock, files and UI as the options say."""
    from featureflow.spark import file_modes, session
    from featureflow.spark.checkpoint_lock import CheckpointLock

    if args.file_mode:  # read by this process and, through the session, the executors
        os.environ[file_modes.ENV] = f"{file_modes.parse_mode(args.file_mode, '--file-mode'):04o}"
    if args.ui_host:
        os.environ[session.UI_HOST_ENV] = args.ui_host
    lock = CheckpointLock.acquire(
        args.checkpoint, lease_ns=args.checkpoint_lease,
        on_lost=lambda: os.kill(os.getpid(), signal.SIGTERM),  # stop at a batch boundary
    )  # fmt: skip
    try:
        file_modes.restrict_online_store(str(Path(args.repo).resolve()))
        status = _run(args)
    finally:
        lock.release()
    return 1 if lock.lost.is_set() else status


def _run(args: argparse.Namespace) -> int:
    from featureflow import ops
    from featureflow.infra import kafka_settings
    from featureflow.monitoring.lag import ConsumerLagWatcher
    from featureflow.repo import load_store, stream_view_specs
    from featureflow.spark.pipeline import StreamOptions, start_topic_query, topic_groups
    from featureflow.spark.session import build_session, use_renaming_checkpoint_files
    from featureflow.spark.supervisor import ReachabilityWatch, RetryPolicy, SupervisedQuery
    from featureflow.spark.timeouts import (
        bounded,
        kafka_producer_options,
        kafka_source_options,
    )

    repo_path = str(Path(args.repo).resolve())
    store = load_store(repo_path)
    specs = bounded(
        lambda: stream_view_specs(store, args.view), args.registry_timeout / 1e9,
        "the Feast registry", f"check the registry in {repo_path}/feature_store.yaml "
        "(path, or the database it names, reachable?)",
    )  # fmt: skip
    feature_schemas = {}
    if args.schemas:
        from featureflow.schema import check_repo, read_schemas

        # The gate, against the live registry, before anything is materialised.
        check_repo(repo_path, args.schemas)
        feature_schemas = {
            s.view: s for s in read_schemas(sorted(Path(args.schemas).glob("*.mojo")))
        }
        log.info("schema gate passed for %s", sorted(feature_schemas))
    log.info("kernels: %s (%s)", ops.backend(), ops.backend_reason())
    settings = _kafka_settings(args.kafka_option, args.kafka_options_file)
    options = StreamOptions(
        checkpoint=args.checkpoint,
        bootstrap=args.bootstrap,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        available_now=args.available_now,
        trigger_interval=args.trigger,
        partitions=args.partitions,
        driver_pass_records=args.driver_pass_records,
        dead_letter_topic=args.dead_letter_topic,
        offline_path=args.offline_path,
        kafka_options=kafka_settings.spark_options(settings),
        kafka_settings=settings,
        kafka_timeout_s=args.kafka_timeout / 1e9,
        idle_partition_timeout_ns=args.idle_partition_timeout,
        max_future_skew_ns=args.max_future_skew,
        state_warn_bytes=args.state_warn_bytes,
        keyed_topic=_keyed_topic(args.keyed_topic, args.partitions, args.keyed_slices),
        source_options=kafka_source_options(args.kafka_timeout / 1e9),
        sink_options=kafka_producer_options(args.kafka_timeout / 1e9),
    )
    exporter = None
    if args.metrics_port:
        from featureflow.spark.metrics import PrometheusExporter

        exporter = PrometheusExporter(args.metrics_port)
        exporter.describe_views({spec.name: spec.topic for spec in specs})
        log.info("metrics on http://%s:%d/metrics", exporter.host, args.metrics_port)
    spark = build_session("featureflow-realtime", master=args.master)
    if use_renaming_checkpoint_files(spark, args.checkpoint):
        log.info("checkpoint on the local filesystem: Spark writes its logs by renaming")
    # One query per topic: its views share the Kafka read and the parse. Each is
    # restarted from its checkpoint after a transient outage (featureflow.spark.supervisor).
    policy = RetryPolicy(budget_s=args.retry_budget / 1e9)
    watch = ReachabilityWatch.of_bootstrap(
        [args.bootstrap] if args.bootstrap else [spec.bootstrap_servers for spec in specs]
    ).start()
    # An executor's fetch gives up --kafka-timeout after the brokers went away.
    kafka_window_s = 2 * args.kafka_timeout / 1e9 + 10
    supervised = [
        SupervisedQuery(
            functools.partial(
                start_topic_query, spark, group, repo_path, options, feature_schemas, exporter
            ),
            policy,
            kafka_was_down=functools.partial(watch.down_within, kafka_window_s),
        )
        for group in topic_groups(specs)
    ]
    stop = shutdown_on_sigterm()
    log.info("driver pid %d: SIGTERM stops the queries at a micro-batch boundary", os.getpid())
    lag = ConsumerLagWatcher(exporter)
    try:
        while any([supervisor.poll() for supervisor in supervised]):  # poll every one
            lag.poll(supervisor.query for supervisor in supervised)
            if stop.wait(0.5):
                stop_at_batch_boundary([(s.query, s.processor) for s in supervised])
                break
    except KeyboardInterrupt:
        log.info("interrupted: stopping the queries")
        for supervisor in supervised:
            supervisor.stop()
    watch.close()
    lag.poll(supervisor.query for supervisor in supervised)  # the last batch's
    for supervisor in supervised:
        if supervisor.failure is None:  # no next batch will close them in this run
            try:
                supervisor.processor.close_settled_sessions(spark, only_unfinished=False)
            except Exception as error:  # the next start closes them
                log.error("closing the sessions of query %s failed (the next start closes "
                          "them): %s", supervisor.name, error)  # fmt: skip
                return 1
    for supervisor in supervised:
        for view in supervisor.processor.views:
            counters = view.counters
            log.info(
                "view %s done: %d batches, %d events, %d skipped %s, %d entity rows written",
                view.spec.name, counters.batches, counters.events, counters.bad_records,
                counters.bad_by_reason or "", counters.entities_written,
            )  # fmt: skip
    for supervisor in supervised:
        if supervisor.failure is not None:
            log.error("query %s failed: %s", supervisor.name, supervisor.failure)
            return 1
    return 0


def shutdown_on_sigterm() -> threading.Event:
    """An event set when the driver receives SIGTERM (instead of dying mid-batch)."""
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log.info("received signal %d: stopping after the running micro-batch", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    return stop


def stop_at_batch_boundary(running: list[tuple[StreamingQuery, TopicBatchProcessor]]) -> None:
    """Stop every query between two micro-batches: each finishes its running batch first.

    Exactly-once does not depend on this (a batch interrupted anyway is re-run
    from the same state on restart); a clean stop just wastes no work.
    """
    for query, processor in running:
        processor.idle.wait()
        query.stop()
        log.info(
            "query %s stopped cleanly after micro-batch %s", query.name, processor.last_batch_id
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
