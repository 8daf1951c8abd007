"""Integers as byte strings, in numpy: the reference of ``digits.mojo``.

Each result is ``(matrix, lengths)``: row ``i`` of the uint8 ``matrix`` holds value
``i``'s bytes left-aligned, ``lengths[i]`` (int64) of them; the online writers read it
as ``featureflow.online._bytes.Cells``. One numpy pass per digit (per 7 bits for a
varint) over the whole column: no per-value Python.
"""

from __future__ import annotations

import numpy as np

VARINT_WIDTH = 10
"""Bytes of the longest varint: a negative int64 as its two's complement (64 / 7 bits)."""

_POWERS_OF_TEN = 10 ** np.arange(19, dtype=np.int64)
"""10^0 .. 10^18: every power of ten an ``int64`` holds."""


def ascii_decimal(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative int64s as ASCII decimal digits, no leading zeros (0 is ``b"0"``).

    The digit counts come from integer comparisons with the powers of ten (a float
    ``log10`` rounds 999,999,999,999,999 up to 15 and gave it a leading zero)."""
    if values.size and int(values.min()) < 0:
        at = int(np.flatnonzero(values < 0)[0])
        msg = f"value {at} is negative ({int(values[at])})"
        raise ValueError(msg)
    n = values.shape[0]
    digits = np.maximum(np.searchsorted(_POWERS_OF_TEN, values, side="right"), 1)
    width = int(digits.max()) if n else 1
    matrix = np.empty((n, width), dtype=np.uint8)
    for k in range(width):
        # position k (from the left) holds digit number digits-1-k (from the right)
        power = _POWERS_OF_TEN[np.maximum(digits - 1 - k, 0)]
        matrix[:, k] = (values // power) % 10 + ord("0")
    return matrix, digits.astype(np.int64, copy=False)


def varint(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Int64s as protobuf base-128 varints, low groups first; a negative value is read
    as its 64-bit two's complement (10 bytes)."""
    u = values.view(np.uint64)
    n = u.shape[0]
    matrix = np.empty((n, VARINT_WIDTH), dtype=np.uint8)
    lengths = np.ones(n, dtype=np.int64)
    rest = u.copy()
    for k in range(VARINT_WIDTH):
        matrix[:, k] = (rest & np.uint64(0x7F)).astype(np.uint8)
        rest >>= np.uint64(7)
        more = rest != 0
        lengths += more
        matrix[:, k] |= more.astype(np.uint8) << np.uint8(7)
    return matrix, lengths
