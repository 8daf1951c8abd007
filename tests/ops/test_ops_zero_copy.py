"""The Mojo kernel reads the caller's Arrow buffers in place and allocates only outputs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import featureflow.ops as ops
from featureflow.ops import _mojo


@pytest.fixture
def recorded_addresses(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Descriptors handed to the kernel (the words include the buffer addresses)."""
    calls: list[list[int]] = []
    original = _mojo.NativeBackend._call

    def spy(self: _mojo.NativeBackend, kernel: str, words: list[int], *extra: int) -> int:
        calls.append(list(words))
        return original(self, kernel, words, *extra)

    monkeypatch.setattr(_mojo.NativeBackend, "_call", spy)
    return calls


def test_kernel_reads_arrow_buffers_in_place(
    backend: str, recorded_addresses: list[list[int]]
) -> None:
    n = 1_000_000
    rng = np.random.default_rng(7)
    ts = pa.array(np.sort(rng.integers(0, 10**12, n)))
    values = pa.array(rng.normal(size=n), mask=rng.random(n) < 0.01)
    values = values.slice(3)  # a non-zero offset must be honoured, not copied away
    ts = ts.slice(3)
    before = pa.total_allocated_bytes()
    table = ops.rolling(ts, values, "1h", ["count", "sum"])
    grown = pa.total_allocated_bytes() - before
    rows = n - 3
    outputs = rows * 8 * 2 + (rows + 7) // 8  # count + sum data, sum validity bitmap
    assert grown <= outputs + 4096, f"allocated {grown} bytes, outputs need {outputs}"
    assert table.num_rows == rows
    if backend == "mojo":
        words = recorded_addresses[0]  # prepare, then the parts and finish: one descriptor
        assert all(call == words for call in recorded_addresses)
        assert words[1] == ts.buffers()[1].address + ts.offset * 8
        assert words[2] == values.buffers()[1].address + values.offset * 8
        assert words[4] == values.buffers()[0].address
        assert words[5] == values.offset
        # and the output columns are the buffers the kernel wrote
        assert table.column("sum_1h").chunk(0).buffers()[1].address == words[-3]
    else:
        assert recorded_addresses == []


def test_kernel_sees_in_place_changes_of_a_shared_numpy_buffer(backend: str) -> None:
    ts = np.arange(10, dtype=np.int64)
    vals = np.ones(10)
    arrow_vals = pa.array(vals)  # shares vals' memory
    assert arrow_vals.buffers()[1].address == vals.ctypes.data
    first = ops.rolling(ts, arrow_vals, 2, ["sum"]).column(0).to_pylist()
    vals[:] = 2.0
    second = ops.rolling(ts, arrow_vals, 2, ["sum"]).column(0).to_pylist()
    assert first[-1] == 3.0
    assert second[-1] == 6.0
