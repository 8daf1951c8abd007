"""``spark-submit jobs/backfill.py``: the backfill's command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger("featureflow.backfill")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="backfill.py",
        description=(
            "Compute the Feast repo's stream features over historical events, with the stream "
            "job's kernels, into the offline store (and optionally the online store)."
        ),
    )
    parser.add_argument(
        "--repo", required=True, help="Feast repo (directory of feature_store.yaml)"
    )
    parser.add_argument(
        "--start", required=True,
        help="first event time to emit, ISO 8601 (UTC unless a zone is given), included",
    )  # fmt: skip
    parser.add_argument("--end", required=True, help="end of the range, ISO 8601, excluded")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--source", help="Parquet events (file or directory; default: the view's batch source)"
    )
    where.add_argument(
        "--from-kafka", action="store_true", help="read the records the view's topic retains"
    )
    parser.add_argument(
        "--view", action="append", help="stream view to backfill (repeatable; default all)"
    )
    parser.add_argument(
        "--offline-path", help="where the per-event features go (default <repo>/data/backfill)"
    )
    parser.add_argument(
        "--materialize", action="store_true",
        help="also write each entity's latest features of the range into the online store",
    )  # fmt: skip
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the view's)")
    parser.add_argument(
        "--kafka-option", action="append", default=[], metavar="KEY=VALUE",
        help="extra Kafka client setting (SASL/SSL, ...); repeatable; wins over the file and "
        "FEATUREFLOW_KAFKA_* variables (README: Secrets)",
    )  # fmt: skip
    parser.add_argument(
        "--kafka-options-file", metavar="PATH",
        help="Kafka client settings as a Java .properties file (kafka. prefix optional)",
    )
    parser.add_argument("--partitions", type=int, help="partitions of the entity shuffle")
    parser.add_argument(
        "--master", help="Spark master URL (default: spark-submit's, else local[*])"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the backfill; returns the exit status."""
    from featureflow.spark.job import run_command

    return run_command(build_parser(), _run, argv, log)


def _run(args: argparse.Namespace) -> int:
    from featureflow import ops
    from featureflow.backfill.runner import BackfillOptions, run_backfill
    from featureflow.backfill.timerange import TimeRange
    from featureflow.infra.kafka_settings import spark_options
    from featureflow.repo import load_store, stream_view_specs
    from featureflow.spark.job import _kafka_settings
    from featureflow.spark.session import build_session

    span = TimeRange.parse(args.start, args.end)
    store = load_store(Path(args.repo))
    specs = stream_view_specs(store, args.view)
    options = BackfillOptions(
        span=span,
        source_path=args.source,
        from_kafka=args.from_kafka,
        bootstrap=args.bootstrap,
        kafka_options=spark_options(_kafka_settings(args.kafka_option, args.kafka_options_file)),
        offline_path=args.offline_path,
        materialize=args.materialize,
        partitions=args.partitions,
        progress=not args.no_progress,
    )
    log.info("backfill %s of %s; kernels: %s (%s)", span, [s.name for s in specs],
             ops.backend(), ops.backend_reason())  # fmt: skip
    spark = build_session("featureflow-backfill", master=args.master)
    summaries = run_backfill(spark, store, specs, options)
    total_rows = sum(s.rows for s in summaries)
    total_s = sum(s.seconds for s in summaries)
    log.info(
        "backfill done: %d rows, %d entities, %d bad rows, %.1f s, %s rows/s",
        total_rows, sum(s.entities for s in summaries),
        sum(sum(s.bad_rows.values()) for s in summaries), total_s,
        f"{total_rows / total_s:,.0f}" if total_s else "-",
    )  # fmt: skip
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
