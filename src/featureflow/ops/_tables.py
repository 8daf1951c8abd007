"""Output columns: allocated once, filled in place by a backend, wrapped as Arrow.

A backend receives `OutputColumn`s whose buffers it writes directly (the
Mojo kernels by address); `table` wraps them as Arrow arrays without a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from featureflow.ops._aggs import is_nullable, result_type


@dataclass(frozen=True)
class OutputColumn:
    """One result column of ``capacity`` rows: data and (if nullable) an LSB-first bitmap."""

    name: str
    agg: str
    type: pa.DataType
    data: pa.Buffer
    validity: pa.Buffer | None

    @property
    def capacity(self) -> int:
        """Rows the data buffer holds."""
        return self.data.size // self.type.byte_width

    def numpy(self) -> np.ndarray:
        """A writable numpy view of the data buffer."""
        return np.frombuffer(self.data, dtype=self.type.to_pandas_dtype())

    def write(self, values: np.ndarray, valid: np.ndarray | None) -> None:
        """Copy ``values`` (and a bool ``valid`` mask) into the buffers (numpy backend)."""
        n = len(values)
        self.numpy()[:n] = values
        if self.validity is not None:
            mask = np.ones(n, dtype=bool) if valid is None else valid
            bits = np.packbits(mask, bitorder="little")
            np.frombuffer(self.validity, dtype=np.uint8)[: len(bits)] = bits

    def array(self, length: int) -> pa.Array:
        buffers = [self.validity, self.data]
        return pa.Array.from_buffers(self.type, length, buffers, null_count=-1)


def allocate(
    names_aggs: list[tuple[str, str]], value_type: pa.DataType, capacity: int
) -> list[OutputColumn]:
    """Allocate every result column for ``capacity`` rows from the Arrow memory pool."""
    columns = []
    for name, agg in names_aggs:
        rtype = result_type(agg, value_type)
        data = pa.allocate_buffer(capacity * rtype.byte_width)
        validity = pa.allocate_buffer((capacity + 7) // 8) if is_nullable(agg) else None
        columns.append(OutputColumn(name, agg, rtype, data, validity))
    return columns


def table(
    columns: list[OutputColumn], length: int, leading: list[tuple[str, pa.Array]] | None = None
) -> pa.Table:
    """A table of ``leading`` columns (keys, window bounds) then the result columns."""
    names = [name for name, _ in leading or []] + [c.name for c in columns]
    arrays = [arr for _, arr in leading or []] + [c.array(length) for c in columns]
    return pa.Table.from_arrays(arrays, names=names)


@dataclass(frozen=True)
class WindowBounds:
    """Per output window: its key code (int32) and [start, end) in int64 ns."""

    capacity: int
    codes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def allocate(cls, capacity: int) -> WindowBounds:
        size = max(capacity, 1)  # never a null address for the kernels
        return cls(
            capacity, np.empty(size, np.int32), np.empty(size, np.int64), np.empty(size, np.int64)
        )

    def words(self) -> list[int]:
        """Addresses for the kernels' descriptors."""
        return [int(a.ctypes.data) for a in (self.codes, self.starts, self.ends)]

    def leading(
        self, length: int, key_values: pa.Array | None, names: tuple[str, str]
    ) -> list[tuple[str, pa.Array]]:
        """The key (if any) and window bound columns, ``names`` = (start, end)."""
        utc = pa.timestamp("ns", tz="UTC")
        out: list[tuple[str, pa.Array]] = []
        if key_values is not None:
            out.append(("key", key_values.take(pa.array(self.codes[:length]))))
        out.append((names[0], pa.array(self.starts[:length]).view(utc)))
        out.append((names[1], pa.array(self.ends[:length]).view(utc)))
        return out
