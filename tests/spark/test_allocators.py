"""The job's processes allocate Arrow buffers from jemalloc and map large malloc blocks
on their own, unless the deployment chose otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from featureflow.spark import allocators

POOL_PROBE = """
import pyarrow as pa
from featureflow.spark import allocators
chosen = allocators.use_returning_allocators()
held = pa.array(range(100_000), pa.int64())  # 800 kB, allocated after the choice
pool = pa.default_memory_pool()
print(chosen, pool.backend_name, pool.bytes_allocated() >= held.nbytes)
"""

# glibc raises its mmap threshold to the size of a mapped block that is freed: the next
# block of that size then comes from the heap, and stays in RSS once freed
MMAP_PROBE = """
import ctypes, sys
from featureflow.spark import allocators

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "set":
    allocators.use_returning_allocators()
size = 1 << 20
libc.free(libc.malloc(size))
block = libc.malloc(size)
print("mapped" if libc.mallinfo2().hblkhd >= size else "heap")
libc.free(block)
"""


def _probe(probe: str, *args: str, **env_set: str) -> list[str]:
    names = (allocators.POOL_ENV, *allocators.GLIBC_MALLOC)
    env = {k: v for k, v in os.environ.items() if k not in names} | env_set
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True,
                          text=True, env=env, check=True)  # fmt: skip
    return done.stdout.split()


def test_a_process_without_a_chosen_pool_allocates_from_jemalloc() -> None:
    assert _probe(POOL_PROBE) == ["jemalloc", "jemalloc", "True"]


@pytest.mark.parametrize("pool", ["mimalloc", "system"])
def test_a_pool_the_deployment_names_is_kept(pool: str) -> None:
    assert _probe(POOL_PROBE, **{allocators.POOL_ENV: pool}) == [pool, pool, "True"]


def test_large_blocks_stay_mapped_once_the_allocators_are_set() -> None:
    assert _probe(MMAP_PROBE, "unset") == ["heap"]  # glibc's default moved the threshold
    assert _probe(MMAP_PROBE, "set") == ["mapped"]
    # the deployment's own threshold is kept: 4 MiB puts the 1 MiB block on the heap
    assert _probe(MMAP_PROBE, "set", MALLOC_MMAP_THRESHOLD_=str(4 << 20)) == ["heap"]


def test_the_executors_get_every_setting_the_environment_lacks() -> None:
    unset = {"PATH": "/usr/bin"}
    assert allocators.spark_conf(unset) == {
        "spark.executorEnv.MALLOC_MMAP_THRESHOLD_": "131072",
        "spark.executorEnv.MALLOC_TRIM_THRESHOLD_": "131072",
    }
    own_trim = unset | {"MALLOC_TRIM_THRESHOLD_": str(1 << 20)}
    assert allocators.spark_conf(own_trim) == {"spark.executorEnv.MALLOC_MMAP_THRESHOLD_": "131072"}


@pytest.mark.integration
def test_the_python_workers_start_with_the_settings(spark) -> None:  # type: ignore[no-untyped-def]
    names = list(allocators.GLIBC_MALLOC)
    expected = [os.environ.get(name) or str(value)
                for name, value in allocators.GLIBC_MALLOC.items()]  # fmt: skip
    seen = spark.sparkContext.parallelize([0], 1).map(
        lambda _: [os.environ.get(name) for name in names]).collect()[0]
    assert seen == expected
