"""A column of byte strings as the row-join kernel (``byte_rows.mojo``) reads it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ByteRows:
    """``n`` byte strings, in Arrow's layout or as a matrix.

    With ``offsets`` (int64, n + 1): row ``i`` is ``data[offsets[i]:offsets[i + 1]]``.
    Without: ``data`` is a 2-D uint8 matrix whose bytes within a row are contiguous
    (its rows may be strided, or all one row: a stride of 0), and row ``i`` is its first
    ``lengths[i]`` bytes (all of them when ``lengths`` is None).
    """

    data: np.ndarray
    offsets: np.ndarray | None = None
    lengths: np.ndarray | None = None

    @property
    def rows(self) -> int:
        """The rows it holds."""
        return len(self.offsets) - 1 if self.offsets is not None else int(self.data.shape[0])

    def total_bytes(self, n: int) -> int:
        """The bytes of all ``n`` rows."""
        if self.offsets is not None:
            return int(self.offsets[-1]) - int(self.offsets[0])
        if self.lengths is not None:
            return int(self.lengths.sum())
        return n * int(self.data.shape[1])
