"""``featureflow kafka up|down|status``: the local single-node Kafka broker."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from featureflow.cli.failures import port_number
from featureflow.infra import kafka_broker


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("kafka", help="start or stop the local Kafka broker (KRaft)")
    actions = parser.add_subparsers(dest="action", required=True)
    for name, help_text in (
        ("up", "start the broker (idempotent) and wait until it serves"),
        ("down", "stop the broker"),
        ("status", "say whether the broker runs"),
    ):
        action = actions.add_parser(name, help=help_text)
        action.add_argument("--port", type=port_number, default=kafka_broker.DEFAULT_PORT)
        action.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = kafka_broker.BrokerConfig(port=args.port)
    if args.action == "up":
        print(kafka_broker.start(config))
        return 0
    if args.action == "down":
        stopped = kafka_broker.stop(config)
        print("stopped" if stopped else "not running")
        return 0
    pid = kafka_broker.running_pid(config)
    if kafka_broker.accepts_connections(config):
        print(f"running on {config.bootstrap} (pid {pid or '-'})")
        return 0
    print(
        f"featureflow kafka status: not running on {config.bootstrap} (pid {pid or '-'}): "
        f"`featureflow kafka up --port {config.port}` starts it",
        file=sys.stderr,
    )
    return 3
