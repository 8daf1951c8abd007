"""The Kafka partition a keyed record lands in, under the producers' usual partitioners.

A topic is *keyed by its entity* when every record's key is the entity's decimal text and
its partition is the partitioner's choice for that key: then all of an entity's records
sit in one partition, and a job may keep each entity's state with its partition (no
shuffle). Two partitioners cover the usual producers:

- :data:`MURMUR2`: Java's client (``BuiltInPartitioner.partitionForKey``), Spark's Kafka
  sink and librdkafka's ``murmur2``/``murmur2_random``: ``(murmur2(key) & 0x7fffffff) %
  partitions``, Kafka's ``Utils.murmur2`` (seed ``0x9747b28c``);
- :data:`CRC32`: librdkafka's default ``consistent_random`` (and ``consistent``) for a
  non-empty key: ``crc32(key) % partitions``, the IEEE CRC-32 of ``zlib``.

Both are computed for a whole Arrow column at once (numpy over the keys' bytes, a step per
4-byte block of the longest key), since a micro-batch checks every record.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa

MURMUR2: Final = "murmur2"
CRC32: Final = "crc32"
PARTITIONERS: Final = (MURMUR2, CRC32)

_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)


def _padded(keys: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The keys' bytes as a (rows, width) uint8 matrix, zero padded (width a multiple of
    4), and each key's length."""
    binary = keys.cast(pa.large_binary())
    offsets = np.frombuffer(binary.buffers()[1], dtype=np.int64)[
        binary.offset : binary.offset + len(binary) + 1
    ]
    data = binary.buffers()[2]
    flat = np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8)
    lengths = np.diff(offsets)
    width = int(-(-int(lengths.max(initial=0)) // 4) * 4)
    matrix = np.zeros((len(lengths), width), dtype=np.uint8)
    # each key's bytes into its row: row r gets flat[offsets[r] : offsets[r + 1]]
    rows = np.repeat(np.arange(len(lengths)), lengths)
    columns = np.arange(int(lengths.sum())) - np.repeat(offsets[:-1] - offsets[0], lengths)
    matrix[rows, columns] = flat[offsets[0] : offsets[-1]]
    return matrix, lengths


def murmur2(keys: pa.Array) -> np.ndarray:
    """Kafka's ``Utils.murmur2`` of every key (uint32; a null key reads as empty)."""
    matrix, lengths = _padded(keys)
    with np.errstate(over="ignore"):
        h = _SEED ^ lengths.astype(np.uint32)
        words = matrix.view("<u4") if matrix.shape[1] else np.empty((len(lengths), 0), "<u4")
        whole = lengths // 4
        for block in range(words.shape[1]):
            k = words[:, block].astype(np.uint32)
            k = k * _M
            k ^= k >> np.uint32(24)
            k = k * _M
            mixed = (h * _M) ^ k
            h = np.where(block < whole, mixed, h)
        tail = lengths % 4
        base = (lengths & ~3).astype(np.int64)
        rows = np.arange(len(lengths))
        last = matrix.shape[1] - 1 if matrix.shape[1] else 0

        def byte(at: np.ndarray) -> np.ndarray:
            if not matrix.shape[1]:
                return np.zeros(len(lengths), np.uint32)
            return matrix[rows, np.minimum(at, last)].astype(np.uint32)

        h = np.where(tail >= 3, h ^ (byte(base + 2) << np.uint32(16)), h)
        h = np.where(tail >= 2, h ^ (byte(base + 1) << np.uint32(8)), h)
        h = np.where(tail >= 1, (h ^ byte(base)) * _M, h)
        h ^= h >> np.uint32(13)
        h = h * _M
        h ^= h >> np.uint32(15)
    return h.astype(np.uint32)


def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table[n] = c
    return table


_TABLE = _crc_table()


def crc32(keys: pa.Array) -> np.ndarray:
    """The IEEE CRC-32 (``zlib.crc32``) of every key (uint32; a null key reads as empty)."""
    matrix, lengths = _padded(keys)
    crc = np.full(len(lengths), 0xFFFFFFFF, dtype=np.uint32)
    for position in range(matrix.shape[1]):
        stepped = _TABLE[(crc ^ matrix[:, position]) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
        crc = np.where(position < lengths, stepped, crc)
    return crc ^ np.uint32(0xFFFFFFFF)


def partitions_of(keys: pa.Array, partitions: int, partitioner: str) -> np.ndarray:
    """The partition (int32) each key lands in among ``partitions`` under ``partitioner``
    (:data:`PARTITIONERS`)."""
    if partitioner == MURMUR2:
        positive = murmur2(keys) & np.uint32(0x7FFFFFFF)
    elif partitioner == CRC32:
        positive = crc32(keys)
    else:
        msg = f"unknown Kafka partitioner {partitioner!r}: one of {', '.join(PARTITIONERS)}"
        raise ValueError(msg)
    return (positive % np.uint32(partitions)).astype(np.int32)
