"""Vectorised byte strings: one byte string per row, built for a whole batch at once.

Two shapes, both plain numpy:

- ``Cells`` — a padded ``(n, width)`` ``uint8`` matrix, each row's bytes
  left-aligned, with per-row ``lengths`` (``None``: every row fills the width).
  Fixed-width encodings (a float, a 28-byte entity key) are built directly in
  this shape, so concatenating them is ``np.hstack``.
- ``Packed`` — the bytes of all rows back to back in ``data`` with ``offsets``
  (``n + 1`` entries, like Arrow's binary layout).

``concat`` joins parts row by row into ``Packed``: fixed-width parts by
stacking their matrices, any variable-width ones through the Mojo row join
(Arrow's row-wise binary join where the kernels are missing); no per-row Python
either way.

Performance: every function is O(total bytes); the only per-byte index arrays
are built in ``pad`` for variable-width inputs, whose widths are small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from featureflow import ops

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Cells:
    """``n`` byte strings as a padded matrix (row ``i`` is ``matrix[i, :lengths[i]]``)."""

    matrix: U8
    lengths: I64 | None = None

    @property
    def n(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def width(self) -> int:
        return int(self.matrix.shape[1])

    def row_lengths(self) -> I64:
        """Bytes per row."""
        if self.lengths is None:
            return np.full(self.n, self.width, dtype=np.int64)
        return self.lengths

    def where(self, keep: npt.NDArray[np.bool_]) -> Cells:
        """The same cells with the rows where ``keep`` is false made empty."""
        return Cells(self.matrix, np.where(keep, self.row_lengths(), 0))

    def rows(self, start: int, stop: int) -> Cells:
        """Rows ``start:stop`` (a view)."""
        lengths = None if self.lengths is None else self.lengths[start:stop]
        return Cells(self.matrix[start:stop], lengths)

    @property
    def is_const(self) -> bool:
        """Whether every row is the same fixed bytes (a broadcast row)."""
        return self.lengths is None and self.matrix.strides[0] == 0


@dataclass(frozen=True)
class Packed:
    """``n`` byte strings back to back: row ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""

    data: U8
    offsets: I64

    @property
    def n(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def lengths(self) -> I64:
        """Bytes per row."""
        return np.diff(self.offsets)

    def rows(self, start: int, stop: int) -> Packed:
        """Rows ``start:stop`` (a view)."""
        return Packed(self.data, self.offsets[start : stop + 1])

    def where(self, keep: npt.NDArray[np.bool_]) -> Packed:
        """The same rows with those where ``keep`` is false made empty (their bytes
        dropped: one copy of the kept ones)."""
        lengths = self.lengths()
        data = self.data[int(self.offsets[0]) : int(self.offsets[-1])]
        offsets = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.where(keep, lengths, 0), out=offsets[1:])
        return Packed(data[np.repeat(keep, lengths)], offsets)

    def to_arrow(self) -> pa.Array:
        """The rows as an Arrow ``large_binary`` array (no copy of the bytes)."""
        return pa.Array.from_buffers(
            pa.large_binary(),
            self.n,
            [None, pa.py_buffer(np.ascontiguousarray(self.offsets)), pa.py_buffer(self.data)],
        )

    def to_pylist(self) -> list[bytes]:
        """One ``bytes`` object per row (built in C by Arrow)."""
        return self.to_arrow().to_pylist()


def const(value: bytes, n: int) -> Cells:
    """The same ``value`` in each of ``n`` rows (a read-only broadcast, no copy)."""
    row = np.frombuffer(value, dtype=np.uint8)
    return Cells(np.broadcast_to(row, (n, len(value))))


def fixed(values: npt.NDArray[np.generic], dtype: str) -> Cells:
    """Each value's little-endian bytes as ``dtype`` (``"<f8"``, ``"<i4"``…)."""
    arr = np.ascontiguousarray(values, dtype=np.dtype(dtype))
    return Cells(arr.view(np.uint8).reshape(arr.shape[0], arr.dtype.itemsize))


def u32_le(values: npt.ArrayLike) -> Cells:
    """Each value as 4 little-endian bytes (lengths and type tags of entity keys)."""
    return fixed(np.asarray(values), "<u4")


def varint(values: npt.NDArray[np.integer]) -> Cells:
    """Protobuf base-128 varints; negative numbers take 10 bytes (two's complement)."""
    return Cells(*ops.varint(values))


def ascii_decimal(values: npt.NDArray[np.integer]) -> Cells:
    """Non-negative integers (any ``int64``) as ASCII decimal digits (RESP lengths)."""
    return Cells(*ops.ascii_decimal(values))


_FOUR_DIGITS = np.array([b"%04d" % i for i in range(10_000)], dtype="S4").view(np.uint8).reshape(
    10_000, 4)


def padded_decimal(values: npt.NDArray[np.integer], width: int) -> U8:
    """Non-negative integers as ``width`` ASCII digits each, zero-padded, back to back
    (a fixed-stride table SQL can index with ``substr``). Four digits per table lookup."""
    v = np.ascontiguousarray(values, dtype=np.int64)
    groups = -(-width // 4)
    matrix = np.empty((v.shape[0], groups * 4), dtype=np.uint8)
    rest = v.copy()
    for g in range(groups - 1, -1, -1):
        matrix[:, 4 * g : 4 * g + 4] = _FOUR_DIGITS[rest % 10_000]
        rest //= 10_000
    return np.ascontiguousarray(matrix[:, groups * 4 - width :]).reshape(-1)


def interleave(columns: Sequence[pa.Array]) -> Packed:
    """Cell ``i * len(columns) + j`` is row ``i`` of ``columns[j]`` (binary or string
    Arrow arrays of one length; nulls are empty): the cells of a row-major table, joined
    by Arrow in C."""
    if not columns:
        return Packed(np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    binary = [c.cast(pa.large_binary()) for c in columns]
    joined = pc.binary_join_element_wise(*binary, pa.scalar(b"", pa.large_binary()),
                                         null_handling="replace", null_replacement=b"")
    lengths = np.stack([
        np.asarray(pc.binary_length(c).fill_null(0).to_numpy(zero_copy_only=False),
                   dtype=np.int64) for c in binary], axis=1).reshape(-1)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = from_arrow(joined)
    return Packed(data.data[int(data.offsets[0]) :], offsets)


def from_arrow(array: pa.Array) -> Packed:
    """The bytes of a ``binary``/``string`` Arrow array (nulls read as empty)."""
    array = array.cast(pa.large_binary())
    if array.null_count:
        array = array.fill_null(b"")
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[
        array.offset : array.offset + len(array) + 1
    ]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)
        if data_buf is not None
        else np.zeros(0, dtype=np.uint8)
    )
    return Packed(data, offsets.astype(np.int64))


def take(packed: Packed, index: I64, present: npt.NDArray[np.bool_] | None = None) -> Packed:
    """Row ``i`` is ``packed[index[i]]`` (empty where ``present[i]`` is false).

    Arrow's ``take`` copies each row's bytes once (in C++); a byte-index gather in numpy
    (``repeat`` + ``arange``: int64 temporaries per byte) cost 50x more and was a quarter
    of the Redis client's CPU for a write of two views' hashes. Absent rows point at one
    empty row added after the others."""
    if present is not None:
        packed = Packed(packed.data, np.append(packed.offsets, packed.offsets[-1]))
        index = np.where(present, index, packed.n - 1)
    return from_arrow(pc.take(packed.to_arrow(), pa.array(index, pa.int64())))


def stack(pieces: Sequence[Packed]) -> Packed:
    """The rows of ``pieces``, piece after piece."""
    data = np.concatenate([p.data[int(p.offsets[0]) : int(p.offsets[-1])] for p in pieces])
    lengths = np.concatenate([p.lengths() for p in pieces])
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Packed(data, offsets)


def regroup(elements: Packed, list_offsets: I64) -> Packed:
    """Join consecutive rows: row ``i`` of the result is elements ``list_offsets[i]:[i+1]``."""
    return Packed(elements.data, elements.offsets[list_offsets])


def pad(packed: Packed) -> Cells:
    """``Packed`` rows as padded cells (zero-copy when every row has the same length)."""
    lengths = packed.lengths()
    n = packed.n
    if n == 0:
        return Cells(np.zeros((0, 0), dtype=np.uint8))
    width = int(lengths.max())
    start = int(packed.offsets[0])
    if int(lengths.min()) == width:
        block = packed.data[start : start + n * width]
        return Cells(block.reshape(n, width))
    cols = np.arange(width, dtype=np.int64)
    index = packed.offsets[:-1, None] + cols[None, :]
    inside = cols[None, :] < lengths[:, None]
    np.minimum(index, max(len(packed.data) - 1, 0), out=index)
    matrix = np.where(inside, packed.data[index], 0).astype(np.uint8) if width else (
        np.zeros((n, 0), dtype=np.uint8)
    )
    return Cells(matrix, lengths)


def _stack_fixed(cells: Sequence[Cells], n: int) -> U8:
    """``np.hstack`` of fixed-width cells, fast for many narrow parts.

    Constant parts go into one template row copied to every row; the others are
    copied as 1/2/4/8-byte integers where their width allows (one strided
    element copy per row instead of a byte loop).
    """
    width = sum(c.width for c in cells)
    if n == 0:
        return np.zeros((0, width), dtype=np.uint8)
    template = np.zeros(width, dtype=np.uint8)
    at = 0
    for c in cells:
        if c.is_const:
            template[at : at + c.width] = c.matrix[0]
        at += c.width
    out = np.empty((n, width), dtype=np.uint8)
    out[:] = template
    at = 0
    for c in cells:
        w = c.width
        if not c.is_const and w:
            src = np.ascontiguousarray(c.matrix)
            if w in (1, 2, 4, 8):
                dst = np.ndarray((n,), dtype=f"<u{w}", buffer=out, offset=at, strides=(width,))
                dst[...] = src.view(f"<u{w}").reshape(n)
            else:
                out[:, at : at + w] = src
        at += w
    return out


def concat(parts: Sequence[Cells | Packed]) -> Packed:
    """Row-wise concatenation: row ``i`` is ``parts[0][i] + parts[1][i] + …``.

    Fixed-width parts are stacked as matrices (:func:`_stack_fixed`); with any
    variable-width part, the Mojo row join reads every part where it lies
    (:func:`featureflow.ops.join_rows`), or where the kernels are missing Arrow joins
    the rows (``binary_join_element_wise``, after each part is made an Arrow array).
    Padding the variable parts to a matrix and masking the padding away, as this did
    before Arrow, took 18x longer for a Redis command's parts."""
    if all(isinstance(p, Cells) and p.lengths is None for p in parts):
        cells = [p for p in parts if isinstance(p, Cells)]
        n = cells[0].n
        offsets = np.arange(n + 1, dtype=np.int64) * sum(c.width for c in cells)
        return Packed(_stack_fixed(cells, n).reshape(-1), offsets)
    n = parts[0].n
    if n == 0:
        return Packed(np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    joined = ops.join_rows([byte_rows(p) for p in parts], n)
    if joined is not None:  # the Mojo kernel: no conversion of the parts to Arrow
        return Packed(*joined)
    arrays = [_arrow_rows(p, n) for p in parts]
    return from_arrow(pc.binary_join_element_wise(*arrays, pa.scalar(b"", pa.large_binary())))


def byte_rows(part: Cells | Packed) -> ops.ByteRows:
    """``part`` as the kernels read it (no copy)."""
    if isinstance(part, Packed):
        return ops.ByteRows(part.data, offsets=part.offsets)
    return ops.ByteRows(part.matrix, lengths=part.lengths)


def _arrow_rows(part: Cells | Packed, n: int) -> pa.Array | pa.Scalar:
    """A part of :func:`concat` as Arrow ``large_binary`` rows (a constant as a scalar)."""
    if isinstance(part, Packed):
        return part.to_arrow()
    if part.is_const:
        return pa.scalar(part.matrix[0].tobytes(), pa.large_binary())
    matrix = np.ascontiguousarray(part.matrix)
    if part.lengths is None:
        fixed = pa.Array.from_buffers(pa.binary(part.width), n, [None, pa.py_buffer(matrix)])
        return fixed.cast(pa.large_binary())
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(part.lengths, out=offsets[1:])
    inside = np.arange(part.width)[None, :] < part.lengths[:, None]
    return Packed(matrix[inside], offsets).to_arrow()


def select_rows(packed: Packed, keep: npt.NDArray[np.bool_]) -> bytes:
    """The bytes of the rows where ``keep`` is true, back to back."""
    start, stop = int(packed.offsets[0]), int(packed.offsets[-1])
    return packed.data[start:stop][np.repeat(keep, packed.lengths())].tobytes()
