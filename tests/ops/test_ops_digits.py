"""ascii_decimal() and varint(): integers as byte strings, against Python and protobuf.

The oracles are ``str(v).encode()`` and protobuf's own varint encoder; the values cover
every int64 (negative ones for varints), numbers next to each power of ten (where the
digit count changes) and next to each power of 128 (where a varint gains a byte), and
inputs that are not contiguous int64 (a strided int32 view).
"""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.internal.encoder import _VarintBytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import featureflow.ops as ops

FIXTURE = [HealthCheck.function_scoped_fixture]  # the autouse backend fixture
_NON_NEGATIVE = st.integers(0, 2**63 - 1)
_NEAR_POWERS_OF_TEN = st.integers(0, 18).flatmap(
    lambda k: st.integers(max(0, 10**k - 2), min(10**k + 1, 2**63 - 1)))
_NEAR_POWERS_OF_128 = st.integers(0, 9).flatmap(
    lambda k: st.integers(max(-(2**63), -(128**k) - 1), min(128**k + 1, 2**63 - 1)))


def rows(matrix: np.ndarray, lengths: np.ndarray) -> list[bytes]:
    assert matrix.dtype == np.uint8 and lengths.dtype == np.int64
    assert matrix.shape[0] == lengths.shape[0]
    assert np.all(lengths <= matrix.shape[1])
    return [bytes(matrix[i, : lengths[i]]) for i in range(len(lengths))]


@settings(suppress_health_check=FIXTURE)
@given(st.lists(st.one_of(_NON_NEGATIVE, _NEAR_POWERS_OF_TEN), max_size=60))
def test_ascii_decimal_is_pythons(values: list[int]) -> None:
    got = ops.ascii_decimal(np.array(values, dtype=np.int64))
    assert rows(*got) == [str(v).encode() for v in values]


@settings(suppress_health_check=FIXTURE)
@given(st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), _NEAR_POWERS_OF_128), max_size=60))
def test_varint_is_protobufs(values: list[int]) -> None:
    matrix, lengths = ops.varint(np.array(values, dtype=np.int64))
    assert matrix.shape[1] == 10
    assert rows(matrix, lengths) == [_VarintBytes(v if v >= 0 else v + 2**64) for v in values]


def test_strided_narrow_input_is_read_as_int64() -> None:
    values = np.arange(-6, 6, dtype=np.int32)[::2]  # -6, -4, ..., 4: strided int32
    assert rows(*ops.varint(values)) == [_VarintBytes(int(v) % 2**64) for v in values]
    assert rows(*ops.ascii_decimal(np.abs(values))) == [str(abs(int(v))).encode() for v in values]


def test_empty_input_gives_no_rows() -> None:
    for encode in (ops.ascii_decimal, ops.varint):
        matrix, lengths = encode(np.zeros(0, dtype=np.int64))
        assert matrix.shape[0] == 0 and lengths.shape == (0,)


def test_a_negative_decimal_is_refused_with_its_position() -> None:
    with pytest.raises(ValueError, match=r"value 2 is negative \(-7\)"):
        ops.ascii_decimal(np.array([1, 20, -7, -9, 3], dtype=np.int64))
