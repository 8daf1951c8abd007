"""Fixtures of the online-store tests: one real redis-server for the whole session."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from featureflow.infra.redis_server import RedisServer

# Feast warns on every apply/read of a local repo (experimental features, utcnow).
warnings.filterwarnings("ignore", module="feast")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """``host:port`` of a real local redis-server started for this test session."""
    with RedisServer() as server:
        yield server.connection_string
