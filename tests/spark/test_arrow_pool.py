"""The job's processes allocate Arrow buffers from jemalloc unless the deployment chose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import pyarrow as pa
from featureflow.spark import arrow_pool
chosen = arrow_pool.use_returning_pool()
held = pa.array(range(100_000), pa.int64())  # 800 kB, allocated after the choice
pool = pa.default_memory_pool()
print(chosen, pool.backend_name, pool.bytes_allocated() >= held.nbytes)
"""


def _probe(pool: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if pool is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = pool
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env=env, check=True)  # fmt: skip
    return done.stdout.split()


def test_a_process_without_a_chosen_pool_allocates_from_jemalloc() -> None:
    assert _probe(None) == ["jemalloc", "jemalloc", "True"]


@pytest.mark.parametrize("pool", ["mimalloc", "system"])
def test_a_pool_the_deployment_names_is_kept(pool: str) -> None:
    assert _probe(pool) == [pool, pool, "True"]
