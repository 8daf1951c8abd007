"""The int64 descriptors the kernels read, packed from a `Series` and its outputs.

Words 0..`HEADER` - 1 are the inputs (``read_inputs`` in
``mojo_ops/featureflow_kernels/abi.mojo``), then the call's own words (documented
at each kernel's entry point), then 4 words an output column
(``read_columns``). `HEADER` and the codes are checked against the library when
it loads.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa

from featureflow.ops._aggs import CODES
from featureflow.ops._inputs import VALUE_TYPES, Series
from featureflow.ops._tables import OutputColumn, WindowBounds

HEADER: Final = 8
"""Descriptor words before the call-specific ones (`header`)."""
ROLLING_SCRATCH: Final = slice(HEADER + 3, HEADER + 5)
"""Where a rolling descriptor holds its scratch address and size."""


def address(arr: pa.Array, index: int) -> int:
    """Address of buffer `index` of `arr` (0 when it has none)."""
    buf = arr.buffers()[index]
    return 0 if buf is None else int(buf.address)


def header(s: Series) -> list[int]:
    """Descriptor words 0..7: the inputs' buffers by address."""
    width = s.values.type.byte_width
    codes = 0 if s.codes is None else int(s.codes.ctypes.data)
    return [
        s.n,
        address(s.ts, 1) + s.ts.offset * 8,
        address(s.values, 1) + s.values.offset * width,
        VALUE_TYPES[s.values.type],
        address(s.values, 0),
        s.values.offset,
        codes,
        s.ngroups,
    ]


def column_words(columns: list[OutputColumn]) -> list[int]:
    words: list[int] = []
    for c in columns:
        validity = 0 if c.validity is None else int(c.validity.address)
        words += [CODES[c.agg], int(c.data.address), validity, VALUE_TYPES[c.type]]
    return words


def rolling(
    s: Series, windows: list[int], hop: int | None, naggs: int, columns: list[OutputColumn]
) -> np.ndarray:
    """``rolling_prepare``'s descriptor (its scratch words at `ROLLING_SCRATCH` left 0)."""
    words = [*header(s), len(windows), hop or 0, naggs, 0, 0]
    return np.array(words + windows + column_words(columns), dtype=np.int64)


def hopping(
    s: Series,
    size: int,
    step: int,
    naggs: int,
    count_only: bool,
    bounds: WindowBounds,
    columns: list[OutputColumn],
) -> list[int]:
    words = [*header(s), size, step, naggs, int(count_only), bounds.capacity]
    return words + bounds.words() + column_words(columns)


def sessions(
    s: Series,
    gap: int,
    gaps: np.ndarray | None,
    max_length: int | None,
    naggs: int,
    bounds: WindowBounds,
    columns: list[OutputColumn],
) -> list[int]:
    """``sessions``' descriptor without its two trailing scratch words (max length
    0: none)."""
    gaps_addr = 0 if gaps is None else int(gaps.ctypes.data)
    words = [*header(s), 0 if gaps is not None else gap, gaps_addr, max_length or 0, naggs]
    return words + bounds.words() + column_words(columns)
