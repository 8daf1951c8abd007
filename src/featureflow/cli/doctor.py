"""``featureflow doctor``: which kernels run (and why), versions, and what is set up.

With ``--repo`` and the job's Kafka settings (``--kafka-options-file``,
``FEATUREFLOW_KAFKA_*``, ``--kafka-option``) it also reports the secured setup:
Kafka's security protocol, SASL mechanism and user, TLS on/off, and the
online store's address, authentication and TLS. Every line goes through
:func:`featureflow.secrets.redact_text`: no secret is printed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from featureflow.secrets import redact_text


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("doctor", help="show the kernel backend, versions and setup")
    parser.add_argument("--repo", help="Feast repo: report its online store's security")
    parser.add_argument(
        "--kafka-options-file", metavar="PATH", help="the job's Kafka settings file (to report)"
    )
    parser.add_argument(
        "--kafka-option", action="append", default=[], metavar="KEY=VALUE",
        help="a Kafka setting the job is given on argv (to report; repeatable)",
    )  # fmt: skip
    parser.set_defaults(handler=run)


def _say(line: str) -> None:
    print(redact_text(line))


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def run(args: argparse.Namespace) -> int:
    from featureflow import ops, paths
    from featureflow.infra import maven

    facts = ops.describe()
    _say(f"kernel backend : {facts['backend']}")
    _say(f"  why          : {facts['reason']}")
    if facts.get("library"):
        _say(f"  library      : {facts['library']}")
    _say(f"  mojo         : {facts.get('mojo_version', _version('mojo'))}")
    _say(f"python         : {sys.version.split()[0]} ({sys.executable}) on {platform.machine()}")
    for package in (
        "featureflow",
        "pyspark",
        "pyarrow",
        "feast",
        "confluent-kafka",
        "numpy",
        "pandas",
    ):
        _say(f"{package:<15}: {_version(package)}")
    _say(f"java           : {shutil.which('java') or 'not found'}")
    _say(f"maven          : {shutil.which('mvn') or 'not found'}")
    _say(f"cache          : {paths.home()}")
    for bundle in (maven.kafka_broker_bundle(), maven.spark_kafka_bundle()):
        jars = maven.bundled_jars(bundle)
        state = f"{len(jars)} jars" if jars else "not fetched ('featureflow jars fetch')"
        _say(f"jars {bundle.name:<10}: {state}")
    _report_kafka(args)
    if args.repo:
        _report_online_store(args.repo)
    return 0


def _report_kafka(args: argparse.Namespace) -> None:
    """The Kafka client settings the job would use, secrets redacted."""
    from featureflow import secrets
    from featureflow.infra import kafka_settings

    settings = kafka_settings.load(file=args.kafka_options_file, pairs=args.kafka_option)
    sources = [
        f"file {args.kafka_options_file}" if args.kafka_options_file else "",
        f"{len(kafka_settings.from_environment())} from FEATUREFLOW_KAFKA_*",
        f"{len(args.kafka_option)} from --kafka-option",
    ]
    _say(f"kafka settings : {', '.join(s for s in sources if s)}")
    facts: Mapping[str, str] = kafka_settings.describe(settings)
    _say(f"  security     : {facts['protocol']} (SASL {facts['sasl']}, TLS {facts['tls']})")
    for name in ("sasl user", "truststore", "hostname check"):
        if name in facts:
            _say(f"  {name:<13}: {facts[name]}")
    for key, value in sorted(secrets.redact_settings(settings).items()):
        _say(f"  {key} = {value}")


def _report_online_store(repo: str) -> None:
    """The repo's online store: type, address, authentication and TLS (no secret)."""
    from featureflow import secrets
    from featureflow.repo import load_store

    online = load_store(repo).config.online_store
    kind = str(getattr(online, "type", "?"))
    connection_string = getattr(online, "connection_string", None)
    if connection_string is None:
        path = getattr(online, "path", None)
        _say(f"online store   : {kind}{f' {path}' if path else ''}")
        return
    connection = secrets.parse_connection_string(str(connection_string))
    secrets.register(connection.secrets())
    _say(
        f"online store   : {kind} {connection.address} "
        f"(auth {'yes' if connection.authenticated else 'no'}, "
        f"TLS {'yes' if connection.tls else 'no'})"
    )
