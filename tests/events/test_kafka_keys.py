"""The vectorised Kafka partitioners against Kafka's own ``Utils.murmur2`` (values printed
by the kafka-clients 4.1.1 jar) and scalar references (Kafka's algorithm as written in
Java; ``zlib.crc32``), over any keys."""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from featureflow.events import kafka_keys

# Utils.murmur2(s.getBytes()) and Utils.toPositive(...) % 8, from kafka-clients 4.1.1
KAFKA_MURMUR2 = {
    b"": (275646681, 1),
    b"1": (-1993445489, 7),
    b"21": (-973932308, 4),
    b"abc": (479470107, 3),
    b"foobar": (-790332482, 6),
    b"12345": (-1188365604, 4),
    b"a-little-bit-long-string": (-985981536, 0),
    b"a-little-bit-longer-string": (-1486304829, 3),
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": (-58897971, 5),
    b"99999": (1464793824, 0),
    b"100000": (-1409824602, 6),
}


def _murmur2_reference(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``, line by line, in 32-bit unsigned arithmetic."""
    mask, m = 0xFFFFFFFF, 0x5BD1E995
    h = (0x9747B28C ^ len(data)) & mask
    for i in range(len(data) // 4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = len(data) % 4
    base = len(data) & ~3
    if rest >= 3:
        h ^= data[base + 2] << 16
    if rest >= 2:
        h ^= data[base + 1] << 8
    if rest >= 1:
        h ^= data[base]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def test_murmur2_is_kafkas() -> None:
    keys = list(KAFKA_MURMUR2)
    hashes = kafka_keys.murmur2(pa.array(keys, pa.binary()))
    assert [_signed(int(h)) for h in hashes] == [h for h, _ in KAFKA_MURMUR2.values()]
    partitions = kafka_keys.partitions_of(pa.array(keys, pa.binary()), 8, kafka_keys.MURMUR2)
    assert partitions.tolist() == [p for _, p in KAFKA_MURMUR2.values()]


_keys = st.lists(st.binary(max_size=40), max_size=60)


@given(keys=_keys)
def test_murmur2_of_any_keys(keys: list[bytes]) -> None:
    got = kafka_keys.murmur2(pa.array(keys, pa.binary()))
    assert got.tolist() == [_murmur2_reference(key) for key in keys]


@given(keys=_keys, partitions=st.integers(1, 64))
def test_crc32_partitions_of_any_keys(keys: list[bytes], partitions: int) -> None:
    got = kafka_keys.partitions_of(pa.array(keys, pa.binary()), partitions, kafka_keys.CRC32)
    assert got.tolist() == [zlib.crc32(key) % partitions for key in keys]


@given(keys=_keys, start=st.integers(0, 5))
def test_a_sliced_string_column_reads_as_its_bytes(keys: list[bytes], start: int) -> None:
    texts = pa.array([key.hex() for key in keys], pa.string()).slice(start)
    expected = [_murmur2_reference(text.encode()) for text in texts.to_pylist()]
    assert kafka_keys.murmur2(texts).tolist() == expected


def test_an_unknown_partitioner_is_named() -> None:
    with pytest.raises(ValueError, match="unknown Kafka partitioner 'fnv'"):
        kafka_keys.partitions_of(pa.array([b"1"]), 4, "fnv")
    assert kafka_keys.crc32(pa.array([], pa.binary())).dtype == np.uint32
