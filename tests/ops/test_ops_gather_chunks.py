"""gather_chunks(): rows of several chunks of a column, against Arrow's concat and take.

Chunks of every fixed width (1 to 8 bytes: integers, floats, timestamps with a zone, durations),
with nulls or without, sliced so that data and validity start at an offset, empty
chunks among them; rows in any order with repeats, as a merge of runs gives them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import featureflow.ops as ops

FIXTURE = [HealthCheck.function_scoped_fixture]  # the autouse backend fixture
TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.float32(),
         pa.float64(), pa.timestamp("ns", tz="UTC"), pa.duration("s")]  # fmt: skip


@st.composite
def chunk(draw: st.DrawFn, kind: pa.DataType) -> pa.Array:
    """A chunk of ``kind``: values (some null), then a slice of them (an offset)."""
    bits = min(kind.byte_width * 8 - 1, 20)  # every value exact in a float32 too
    values = draw(st.lists(st.one_of(st.none(), st.integers(0, 2**bits - 1)), max_size=20))
    whole = pa.array(values, pa.int64()).cast(kind)
    start = draw(st.integers(0, len(values)))
    return whole.slice(start, draw(st.integers(0, len(values) - start)))


@st.composite
def chunks_and_rows(draw: st.DrawFn) -> tuple[list[pa.Array], np.ndarray]:
    kind = draw(st.sampled_from(TYPES))
    chunks = draw(st.lists(chunk(kind), min_size=1, max_size=5))
    total = sum(len(c) for c in chunks)
    rows = draw(st.lists(st.integers(0, total - 1), max_size=60)) if total else []
    return chunks, np.array(rows, dtype=np.int64)


@settings(suppress_health_check=FIXTURE)
@given(chunks_and_rows())
def test_gathered_rows_are_arrows_take(case: tuple[list[pa.Array], np.ndarray]) -> None:
    chunks, rows = case
    got = ops.gather_chunks(chunks, rows)
    if ops.backend() == "numpy":
        assert got is None  # the caller takes with Arrow
        return
    assert got is not None
    expected = pa.concat_arrays(chunks).take(pa.array(rows, pa.int64()))
    assert got.type == expected.type
    assert got.to_pylist() == expected.to_pylist()
    assert got.null_count == expected.null_count


def test_types_not_fixed_width_are_left_to_arrow() -> None:
    for chunk_of in (pa.array([True, False]), pa.array(["a", "b"]), pa.array([[1], [2]])):
        assert ops.gather_chunks([chunk_of], np.array([1, 0])) is None


def test_a_row_outside_the_chunks_is_refused() -> None:
    chunks = [pa.array([1.0, 2.0]), pa.array([3.0])]
    if ops.backend() == "numpy":  # no gather there: the caller's Arrow take refuses it
        assert ops.gather_chunks(chunks, np.array([0, 3])) is None
        return
    with pytest.raises(ValueError, match="row 1 takes 3 of 3"):
        ops.gather_chunks(chunks, np.array([0, 3]))


def test_chunks_of_two_types_are_refused() -> None:
    with pytest.raises(ValueError, match="arrays of one type"):
        ops.gather_chunks([pa.array([1.0]), pa.array([1])], np.array([0]))
