"""``featureflow jars fetch``: download the Kafka broker and Spark connector jars with Maven."""

from __future__ import annotations

import argparse
from typing import Any

from featureflow.infra import maven


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("jars", help="fetch the jars featureflow runs (Maven Central)")
    actions = parser.add_subparsers(dest="action", required=True)
    fetch = actions.add_parser("fetch", help="fetch the Kafka broker and Spark connector jars")
    fetch.add_argument("--force", action="store_true", help="fetch again even if present")
    fetch.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    for bundle in (maven.kafka_broker_bundle(), maven.spark_kafka_bundle()):
        jars = maven.fetch(bundle, force=args.force)
        print(f"{bundle.name}: {len(jars)} jars in {bundle.directory}")
    return 0
