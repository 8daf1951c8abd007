"""Byte-level checks of the vectorised encoders against Feast's and protobuf's own code."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from feast.infra.key_encoding_utils import serialize_entity_key
from feast.infra.online_stores.helpers import extract_text_and_num
from feast.protos.feast.types.EntityKey_pb2 import EntityKey as EntityKeyProto
from feast.protos.feast.types.Value_pb2 import Value as ValueProto
from feast.type_map import python_values_to_proto_values
from feast.value_type import ValueType
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import assume, given
from hypothesis import strategies as st
from online_helpers import FEATURES

from featureflow.online import _bytes as B
from featureflow.online import encoding as E
from featureflow.schema import arrowmap, typemap


@given(
    st.lists(st.binary(max_size=40), min_size=1, max_size=30),
    st.data(),
)
def test_take_gathers_rows_and_empties_absent_ones(
    rows: list[bytes], data: st.DataObject
) -> None:
    """The row gather (B.take) over a slice of a Packed (offsets not starting at 0),
    with repeated, reordered and absent rows."""
    whole = B.concat([B.pad(B.from_arrow(pa.array([b"head", *rows, b"tail"], pa.binary())))])
    packed = whole.rows(1, 1 + len(rows))
    picks = data.draw(st.lists(st.tuples(st.integers(0, len(rows) - 1), st.booleans()),
                               max_size=40))  # fmt: skip
    index = np.array([i for i, _ in picks], dtype=np.int64)
    present = np.array([p for _, p in picks], dtype=bool)
    got = B.take(packed, index, present)
    assert got.to_pylist() == [rows[i] if p else b"" for i, p in picks]
    assert B.take(packed, index).to_pylist() == [rows[i] for i, _ in picks]


@given(st.lists(st.one_of(st.binary(max_size=5), st.none()), min_size=1, max_size=20),
       st.lists(st.binary(max_size=3), min_size=1, max_size=1))
def test_concat_and_where(values: list[bytes | None], const: list[bytes]) -> None:
    arr = pa.array(values, pa.binary())
    n = len(values)
    packed = B.concat([B.const(const[0], n), B.from_arrow(arr), B.const(b"!", n)])
    expected = [const[0] + (v or b"") + b"!" for v in values]
    assert packed.to_pylist() == expected
    keep = np.array([v is not None for v in values])
    assert packed.where(keep).to_pylist() == [
        e if k else b"" for e, k in zip(expected, keep, strict=True)]


@given(st.lists(st.tuples(st.integers(-(2**62), 2**62), st.text(max_size=4),
                          st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=20))
def test_entity_keys_are_feasts(rows: list[tuple[int, str, int]]) -> None:
    cols = [
        ("b_id", pa.array([r[0] for r in rows], pa.int64()), ValueType.INT64),
        ("a_name", pa.array([r[1] for r in rows], pa.large_string()), ValueType.STRING),
        ("c_small", pa.array([r[2] for r in rows], pa.int32()), ValueType.INT32),
    ]
    for version in (2, 3):
        ours = E.entity_keys(cols, version).to_pylist()
        theirs = [
            serialize_entity_key(EntityKeyProto(
                join_keys=["b_id", "a_name", "c_small"],
                entity_values=[ValueProto(int64_val=r[0]), ValueProto(string_val=r[1]),
                               ValueProto(int32_val=r[2])]),
                entity_key_serialization_version=version)
            for r in rows
        ]
        assert ours == theirs


@given(st.lists(st.integers(-62_135_596_800 * 10**6, 253_402_300_799 * 10**6), max_size=30))
def test_timestamp_protos_are_protobufs(micros: list[int]) -> None:
    ours = E.timestamp_protos(np.array(micros, dtype=np.int64)).to_pylist()
    theirs = []
    for us in micros:
        ts = Timestamp()
        ts.FromMicroseconds(us)
        theirs.append(ts.SerializeToString())
    assert ours == theirs


_SECONDS = st.one_of(
    st.integers(-62_135_596_800, 253_402_300_799),  # 0001 .. 9999
    st.integers(2**28 - 2, 2**35 + 1),  # the era read in numpy, and its edges
    st.sampled_from([0, 1, 127, 128, 2**28, 1_796_000_000, 2**35 - 1, -1]),
)
_NANOS = st.one_of(st.integers(0, 999_999_999),
                   st.sampled_from([0, 1, 127, 128, 2**14, 2**21 - 1, 2**21, 2**28, 999_999_999]))


@given(st.lists(st.one_of(
    st.none(),
    st.lists(st.tuples(_SECONDS, _NANOS), min_size=1, max_size=2),  # 2: merged messages
    st.binary(max_size=14),  # anything else a hash field may hold
), max_size=30))
def test_stored_timestamps_read_as_protobuf_reads_them(
        stored: list[list[tuple[int, int]] | bytes | None]) -> None:
    """Every serialised Timestamp, in the canonical form or not (two serialisations back
    to back are one message, the last value winning), reads as protobuf parses it; other
    bytes either read so too or are not readable, never a different time."""
    messages = [b"".join(Timestamp(seconds=s, nanos=n).SerializeToString() for s, n in item)
                if isinstance(item, list) else item for item in stored]
    seconds, nanos, readable = E.decode_timestamps(messages)
    for i, (item, message) in enumerate(zip(stored, messages, strict=True)):
        if message is None:
            assert not readable[i]
            continue
        parsed = Timestamp()
        try:
            parsed.ParseFromString(message)
        except Exception:  # not a message: protobuf refuses it
            assert not readable[i], message.hex()
            continue
        if isinstance(item, list):
            assert readable[i], message.hex()
        if readable[i]:
            assert (seconds[i], nanos[i]) == (parsed.seconds, parsed.nanos), message.hex()


@given(st.data())
def test_values_and_texts_are_feasts_for_every_type(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(FEATURES)))
    dtype, arrow, element = FEATURES[name]
    value_type = dtype.to_value_type()
    strategy = st.lists(element, max_size=3) if pa.types.is_list(arrow) else element
    values = data.draw(st.lists(st.one_of(st.none(), strategy), min_size=1, max_size=8))
    # Feast infers types from the first non-empty value; a Bytes column holding only
    # b"" and None has none, and Feast then writes b"" as null. featureflow keeps b"".
    assume(value_type != ValueType.BYTES or any(values))
    arr = E.cast(pa.array(values, arrow), E.arrow_type(value_type), name)
    ours = E.encode_values(arr, value_type).to_pylist()
    protos = python_values_to_proto_values(
        pa.array(values, arrow).to_numpy(zero_copy_only=False), value_type)
    assert ours == [p.SerializeToString() for p in protos]
    assert E.value_texts(arr, value_type) == [extract_text_and_num(p, False)[0] for p in protos]


def test_arrow_types_agree_with_the_schema_gate() -> None:
    for dtype, _, _ in FEATURES.values():
        schema_type = typemap.from_feast(dtype)
        if schema_type is not None:  # the gate has no Bytes
            assert arrowmap.arrow_matches(E.arrow_type(dtype.to_value_type()), schema_type) or (
                pa.types.is_timestamp(arrowmap.to_arrow(schema_type)))


_LAYOUT_EDGES = [0.0, -0.0, 1.0, -7.0, 1e-4, 9.999e-5, 1e-5, 0.1 + 0.2, 1e15, 1.5e15,
                 999999999999999.9, 2.0**53, 2.0**53 + 2, 1e16, 1e22, 5e-324, 1.7e308,
                 float("inf"), float("-inf"), 123456789012345.0, 12345678901234.5]


@given(st.lists(st.one_of(st.floats(allow_nan=False), st.sampled_from(_LAYOUT_EDGES),
                          st.integers(-(2**60), 2**60).map(float)), min_size=1, max_size=40))
def test_float_reprs_are_pythons(values: list[float]) -> None:
    # Feast's value_text is str(float): Arrow's text is only kept where the layout matches
    assert E.float_reprs(pa.array(values, pa.float64())).to_pylist() == list(map(repr, values))


@given(st.lists(st.integers(0, 10**12), max_size=40), st.integers(0, 3))
def test_padded_decimal_is_zero_padded_digits(values: list[int], extra: int) -> None:
    width = max([len(str(v)) for v in values], default=1) + extra
    got = B.padded_decimal(np.array(values, dtype=np.int64), width).tobytes()
    assert got == b"".join(str(v).zfill(width).encode() for v in values)


@given(st.integers(1, 4).flatmap(lambda f: st.lists(
    st.lists(st.one_of(st.none(), st.binary(max_size=5)), min_size=f, max_size=f),
    max_size=12)))
def test_interleave_is_row_major(rows: list[list[bytes | None]]) -> None:
    width = len(rows[0]) if rows else 2
    columns = [pa.array([r[j] for r in rows], pa.binary()) for j in range(width)]
    assert B.interleave(columns).to_pylist() == [c or b"" for r in rows for c in r]


@st.composite
def _parts(draw: st.DrawFn, n: int) -> tuple[B.Cells | B.Packed, list[bytes]]:
    """A part of ``n`` rows in one of the shapes concat meets, and its rows as bytes."""
    shape = draw(st.sampled_from(["packed", "view", "fixed", "padded", "const", "strided"]))
    if shape == "const":
        value = draw(st.binary(max_size=6))
        return B.const(value, n), [value] * n
    if shape in ("fixed", "strided"):
        width = draw(st.integers(0, 9))
        rows = draw(st.lists(st.binary(min_size=width, max_size=width), min_size=n, max_size=n))
        matrix = np.frombuffer(b"".join(rows), np.uint8).reshape(n, width)
        if shape == "strided":  # a column slice of a wider matrix: rows not contiguous
            wide = np.zeros((n, width + 3), np.uint8)
            wide[:, 1 : width + 1] = matrix
            matrix = wide[:, 1 : width + 1]
        return B.Cells(matrix), rows
    rows = draw(st.lists(st.binary(max_size=12), min_size=n, max_size=n))
    if shape == "padded":
        return B.pad(B.from_arrow(pa.array(rows, pa.binary()))) if n else B.Cells(
            np.zeros((0, 0), np.uint8), np.zeros(0, np.int64)), rows
    whole = B.from_arrow(pa.array([b"head", *rows, b"tail"], pa.binary()))
    return (whole.rows(1, n + 1) if shape == "view" else B.from_arrow(pa.array(rows))), rows


@pytest.mark.parametrize("backend", ["mojo", "numpy"])
@given(data=st.data())
def test_concat_joins_every_part_shape(backend: str, data: st.DataObject) -> None:
    """Rows joined by the Mojo kernel (or Arrow on the numpy backend) equal the bytes
    joined in Python, whatever mix of Arrow rows, row views, fixed and padded matrices,
    constants and strided column slices the parts are."""
    from featureflow.ops import _backend

    n = data.draw(st.integers(0, 12))
    drawn = data.draw(st.lists(_parts(n), min_size=1, max_size=6))
    drawn.append((B.from_arrow(pa.array([b"x" * (i % 3) for i in range(n)], pa.binary())),
                  [b"x" * (i % 3) for i in range(n)]))  # one variable part: not all fixed
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(_backend.ENV_VAR, backend)
        _backend.reset()
        try:
            got = B.concat([part for part, _ in drawn])
        finally:
            _backend.reset()
    assert got.to_pylist() == [b"".join(rows[i] for _, rows in drawn) for i in range(n)]
