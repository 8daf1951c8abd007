"""``featureflow produce``: write realistic sample transaction events to Kafka."""

from __future__ import annotations

import argparse
import time
from typing import Any

from featureflow.cli.failures import positive_float, positive_int, require_kafka


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("produce", help="write sample transaction events to Kafka")
    parser.add_argument("--topic", default="transactions")
    parser.add_argument("--events", type=positive_int, default=10_000, help="number of events")
    parser.add_argument(
        "--users", type=positive_int, default=1_000, help="distinct users (Zipf-skewed)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--span", type=positive_float, default=86_400.0, help="seconds of event time, ending now"
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument(
        "--partitions", type=positive_int, default=2, help="partitions of a new topic"
    )
    parser.add_argument("--fresh", action="store_true", help="delete and recreate the topic first")
    parser.add_argument(
        "--format", choices=("json", "avro"), default="json",
        help="message encoding; avro: plain Avro binary of featureflow.events.avro's schema",
    )  # fmt: skip
    parser.add_argument(
        "--kafka-options-file", metavar="PATH",
        help="Kafka client settings (SASL, TLS) as a Java .properties file, as the job takes",
    )
    parser.add_argument(
        "--kafka-option", action="append", default=[], metavar="KEY=VALUE",
        help="a Kafka client setting; repeatable; wins over the file and FEATUREFLOW_KAFKA_*",
    )  # fmt: skip
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from featureflow.events import sample
    from featureflow.infra import kafka_broker, kafka_client, kafka_settings

    settings = kafka_settings.load(file=args.kafka_options_file, pairs=args.kafka_option)
    require_kafka(args.bootstrap)
    if args.fresh:
        kafka_broker.delete_topic(args.bootstrap, args.topic, settings=settings)
    kafka_broker.create_topic(
        args.bootstrap, args.topic, partitions=args.partitions, settings=settings
    )
    events = sample.generate(args.events, users=args.users, seed=args.seed, span_s=args.span)
    started = time.monotonic()
    if args.format == "avro":
        from featureflow.events.avro import to_avro

        records = to_avro(events)
    else:
        records = sample.to_json(events)
    sent = kafka_client.produce(args.bootstrap, args.topic, records, settings=settings)
    elapsed = time.monotonic() - started
    print(
        f"produced {sent} {args.format} events for up to {args.users} users to {args.topic} "
        f"in {elapsed:.1f} s"
    )
    return 0
