"""``featureflow doctor``: which kernels run (and why), versions, and what is set up."""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import shutil
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("doctor", help="show the kernel backend, versions and setup")
    parser.set_defaults(handler=run)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def run(_args: argparse.Namespace) -> int:
    from featureflow import ops, paths
    from featureflow.infra import maven

    facts = ops.describe()
    print(f"kernel backend : {facts['backend']}")
    print(f"  why          : {facts['reason']}")
    if facts.get("library"):
        print(f"  library      : {facts['library']}")
    print(f"  mojo         : {facts.get('mojo_version', _version('mojo'))}")
    print(f"python         : {sys.version.split()[0]} ({sys.executable}) on {platform.machine()}")
    for package in (
        "featureflow",
        "pyspark",
        "pyarrow",
        "feast",
        "confluent-kafka",
        "numpy",
        "pandas",
    ):
        print(f"{package:<15}: {_version(package)}")
    print(f"java           : {shutil.which('java') or 'not found'}")
    print(f"maven          : {shutil.which('mvn') or 'not found'}")
    print(f"cache          : {paths.home()}")
    for bundle in (maven.kafka_broker_bundle(), maven.spark_kafka_bundle()):
        jars = maven.bundled_jars(bundle)
        state = f"{len(jars)} jars" if jars else "not fetched ('featureflow jars fetch')"
        print(f"jars {bundle.name:<10}: {state}")
    return 0
