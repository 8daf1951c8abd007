"""Redis's CRC-64 of many byte strings: the tables both backends use and the numpy way.

Redis checks a ``RESTORE`` payload's footer against ``crc64(0, payload)``:
CRC-64/Jones, reflected, initial value 0, no final xor (check value of
``b"123456789"``: ``0xE9C6D914C4B8D9CA``). The Mojo kernel
(``mojo_ops/featureflow_kernels/checksums.mojo``) runs slicing-by-8 over each row
with :data:`SLICING_TABLES`; the numpy way here takes the rows of one length at a
time as a byte matrix, one lookup per two byte positions across all of them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

JONES = np.uint64(0x95AC9329AC4BC9B5)
"""CRC-64/Jones polynomial, reflected."""


def _byte_table() -> npt.NDArray[np.uint64]:
    table = np.arange(256, dtype=np.uint64)
    for _ in range(8):
        table = np.where(table & np.uint64(1), (table >> np.uint64(1)) ^ JONES,
                         table >> np.uint64(1))  # fmt: skip
    return table


def _slicing_tables(byte: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """8 x 256: table ``k`` is table ``k - 1`` advanced over one more zero byte."""
    tables = np.empty((8, 256), dtype=np.uint64)
    tables[0] = byte
    for k in range(1, 8):
        tables[k] = byte[tables[k - 1] & np.uint64(0xFF)] ^ (tables[k - 1] >> np.uint64(8))
    return tables


def _word_table(byte: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Two bytes at a time (64 Ki entries, 512 KiB): half the numpy passes per row."""
    word = np.arange(65536, dtype=np.uint64)
    low = byte[word & np.uint64(0xFF)] ^ (word >> np.uint64(8))
    return byte[low & np.uint64(0xFF)] ^ (low >> np.uint64(8))


BYTE_TABLE = _byte_table()
SLICING_TABLES = np.ascontiguousarray(_slicing_tables(BYTE_TABLE))
_WORD_TABLE = _word_table(BYTE_TABLE)


def crc64_rows(data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]
               ) -> npt.NDArray[np.uint64]:  # fmt: skip
    """Per row ``data[offsets[i]:offsets[i + 1]]``, its CRC-64 (see the module), in numpy:
    the rows of each length as one matrix (:func:`crc64_matrix`)."""
    lengths = np.diff(offsets)
    if len(lengths) and int(lengths.min()) == int(lengths.max()):  # one block: no copy
        start, width = int(offsets[0]), int(lengths[0])
        block = data[start : start + len(lengths) * width]
        return crc64_matrix(block.reshape(len(lengths), width))
    out = np.zeros(len(lengths), dtype=np.uint64)
    order = np.argsort(lengths, kind="stable")
    for group in np.split(order, np.flatnonzero(np.diff(lengths[order])) + 1):
        if not len(group):
            continue
        width = int(lengths[group[0]])
        index = offsets[group][:, None] + np.arange(width, dtype=np.int64)[None, :]
        out[group] = crc64_matrix(data[index])
    return out


def crc64_matrix(matrix: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
    """CRC-64 of each row of a ``(rows, width)`` byte matrix: one table lookup per two
    byte positions across all rows at once, into preallocated buffers."""
    rows, width = matrix.shape
    crc = np.zeros(rows, dtype=np.uint64)
    pairs = width // 2
    if pairs:
        words = np.ascontiguousarray(np.ascontiguousarray(matrix[:, : 2 * pairs]).view("<u2").T)
        index = np.empty(rows, dtype=np.uint64)
        looked = np.empty(rows, dtype=np.uint64)
        sixteen = np.uint64(16)
        for j in range(pairs):
            np.bitwise_xor(crc, words[j], out=index)
            np.bitwise_and(index, np.uint64(0xFFFF), out=index)
            np.right_shift(crc, sixteen, out=crc)
            np.take(_WORD_TABLE, index.view(np.int64), out=looked)
            np.bitwise_xor(crc, looked, out=crc)
    if width % 2:
        crc = BYTE_TABLE[(crc ^ matrix[:, -1]) & np.uint64(0xFF)] ^ (crc >> np.uint64(8))
    return crc
