"""crc64_rows(): Redis's CRC-64 of many rows, against a bit-at-a-time oracle.

The oracle shifts one bit at a time through the reflected polynomial, so it
shares no table with either backend. Rows come in every length (0 to past
several 8-byte words, so the kernel's word loop and its byte tail both run),
back to back in one buffer whose first row need not start at 0.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import featureflow.ops as ops

POLY = 0x95AC9329AC4BC9B5


def crc64_bitwise(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ POLY if crc & 1 else crc >> 1
    return crc


def packed(rows: list[bytes], lead: bytes = b"") -> tuple[np.ndarray, np.ndarray]:
    data = np.frombuffer(lead + b"".join(rows), dtype=np.uint8)
    offsets = len(lead) + np.cumsum([0, *map(len, rows)], dtype=np.int64)
    return data, offsets


def test_redis_check_value() -> None:
    """Redis's own test: crc64(0, "123456789", 9) == 0xe9c6d914c4b8d9ca."""
    data, offsets = packed([b"123456789"])
    assert int(ops.crc64_rows(data, offsets)[0]) == 0xE9C6D914C4B8D9CA


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.binary(max_size=70), max_size=40),
    lead=st.binary(max_size=9),
)
def test_each_row_is_the_bitwise_crc(rows: list[bytes], lead: bytes) -> None:
    data, offsets = packed(rows, lead)
    got = ops.crc64_rows(data, offsets)
    assert got.dtype == np.uint64
    assert [int(x) for x in got] == [crc64_bitwise(row) for row in rows]


@settings(max_examples=20, deadline=None)
@given(width=st.integers(0, 40), count=st.integers(1, 30), seed=st.integers(0, 2**32 - 1))
def test_rows_of_one_length(width: int, count: int, seed: int) -> None:
    """Rows of one width, as a RESTORE payload group is: numpy's one-matrix path."""
    rng = np.random.default_rng(seed)
    rows = [rng.integers(0, 256, width, dtype=np.uint8).tobytes() for _ in range(count)]
    data, offsets = packed(rows)
    assert [int(x) for x in ops.crc64_rows(data, offsets)] == [crc64_bitwise(r) for r in rows]


def test_no_rows() -> None:
    out = ops.crc64_rows(np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    assert out.shape == (0,)
    assert out.dtype == np.uint64


def test_offsets_past_the_bytes_are_refused() -> None:
    with pytest.raises(ValueError, match="offsets span"):
        ops.crc64_rows(np.zeros(4, dtype=np.uint8), np.array([0, 8], dtype=np.int64))
    with pytest.raises(ValueError, match="offsets decrease at row 0"):
        ops.crc64_rows(np.zeros(4, dtype=np.uint8), np.array([3, 1, 4], dtype=np.int64))
