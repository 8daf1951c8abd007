"""Where featureflow keeps what it downloads and runs: one cache directory.

``$FEATUREFLOW_HOME`` wins; otherwise ``$XDG_CACHE_HOME/featureflow`` or
``~/.cache/featureflow``. Jars live in ``jars/<bundle>/`` and the local Kafka
broker's config, data and log in ``kafka/``.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The featureflow cache directory (created on first use)."""
    explicit = os.environ.get("FEATUREFLOW_HOME")
    if explicit:
        root = Path(explicit)
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(cache) / "featureflow"
    root.mkdir(parents=True, exist_ok=True)
    return root


def jars_dir(bundle: str) -> Path:
    """Directory holding the jars of one Maven bundle (``kafka-broker``, ``spark-kafka``)."""
    return home() / "jars" / bundle


def kafka_dir() -> Path:
    """Directory of the local Kafka broker: ``server.properties``, ``data/``, ``broker.log``."""
    path = home() / "kafka"
    path.mkdir(parents=True, exist_ok=True)
    return path
