"""Feast's on-the-wire bytes, built for a whole Arrow batch at once.

Reproduces, byte for byte, what Feast 0.67 writes for one row:

- the entity key (``feast.infra.key_encoding_utils.serialize_entity_key``):
  for version 3, ``u32 n_keys``, then per join key (sorted by name)
  ``u32 STRING, u32 len, name``, then per value ``u32 value_type, u32 len,
  bytes``; version 2 drops ``n_keys`` and the name lengths;
- the value (``ValueProto.SerializeToString()`` of what
  ``feast.type_map.python_values_to_proto_values`` builds): one oneof field,
  so the bytes are the field's tag and its payload; a null is the empty
  message ``b""`` except for ``UNIX_TIMESTAMP``, where Feast writes its
  sentinel ``INT64_MIN`` (read back as ``None``); ``NaN`` is null, as in
  Feast (``pd.isnull``);
- the ``google.protobuf.Timestamp`` Redis keeps per entity (seconds and
  nanoseconds, microsecond precision as Feast has it from ``datetime``).

Timestamps here are integers: microseconds or seconds since the Unix epoch,
UTC (floored, as numpy's ``datetime64`` casts do).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from feast.protos.feast.types.Value_pb2 import Value as ValueProto
from feast.value_type import ValueType

from featureflow.errors import OnlineStoreError
from featureflow.online import _bytes as B

I64 = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

NULL_TIMESTAMP_SECONDS = np.iinfo(np.int64).min
"""Feast's ``NULL_TIMESTAMP_INT_VALUE``: what it writes for a null ``UNIX_TIMESTAMP``."""

_WIRE_VARINT, _WIRE_FIXED64, _WIRE_LEN, _WIRE_FIXED32 = 0, 1, 2, 5


def _tag(field: str, wire: int) -> bytes:
    """The protobuf key of a ``ValueProto`` field (number from Feast's own descriptor)."""
    number = ValueProto.DESCRIPTOR.fields_by_name[field].number
    key = (number << 3) | wire
    out = bytearray()
    while True:
        byte = key & 0x7F
        key >>= 7
        if key:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@dataclass(frozen=True)
class _Scalar:
    """How one scalar element is laid out: its Arrow type, proto field and element bytes."""

    arrow: pa.DataType
    field: str
    wire: int
    element: Callable[[pa.Array], B.Cells | B.Packed]


def _fixed(dtype: str) -> Callable[[pa.Array], B.Cells]:
    def encode(arr: pa.Array) -> B.Cells:
        return B.fixed(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype)

    return encode


def _varint_of_ints(arr: pa.Array) -> B.Cells:
    return B.varint(arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64))


def _bool_byte(arr: pa.Array) -> B.Cells:
    values = arr.fill_null(False).to_numpy(zero_copy_only=False)
    return B.Cells(values.astype(np.uint8).reshape(-1, 1))


def _varint_of_seconds(arr: pa.Array) -> B.Cells:
    seconds = epoch_seconds(arr)
    return B.varint(np.where(arr.is_null().to_numpy(zero_copy_only=False),
                             NULL_TIMESTAMP_SECONDS, seconds))


def _length_prefixed(arr: pa.Array) -> B.Packed:
    packed = B.from_arrow(arr)
    return B.concat([B.varint(packed.lengths()), packed])


_SCALARS: dict[ValueType, _Scalar] = {
    ValueType.INT32: _Scalar(pa.int32(), "int32_val", _WIRE_VARINT, _varint_of_ints),
    ValueType.INT64: _Scalar(pa.int64(), "int64_val", _WIRE_VARINT, _varint_of_ints),
    ValueType.FLOAT: _Scalar(pa.float32(), "float_val", _WIRE_FIXED32, _fixed("<f4")),
    ValueType.DOUBLE: _Scalar(pa.float64(), "double_val", _WIRE_FIXED64, _fixed("<f8")),
    ValueType.BOOL: _Scalar(pa.bool_(), "bool_val", _WIRE_VARINT, _bool_byte),
    ValueType.STRING: _Scalar(pa.large_string(), "string_val", _WIRE_LEN, _length_prefixed),
    ValueType.BYTES: _Scalar(pa.large_binary(), "bytes_val", _WIRE_LEN, _length_prefixed),
    ValueType.UNIX_TIMESTAMP: _Scalar(
        pa.timestamp("us", tz="UTC"), "unix_timestamp_val", _WIRE_VARINT, _varint_of_seconds
    ),
}

_LISTS: dict[ValueType, tuple[ValueType, str]] = {
    ValueType.INT32_LIST: (ValueType.INT32, "int32_list_val"),
    ValueType.INT64_LIST: (ValueType.INT64, "int64_list_val"),
    ValueType.FLOAT_LIST: (ValueType.FLOAT, "float_list_val"),
    ValueType.DOUBLE_LIST: (ValueType.DOUBLE, "double_list_val"),
    ValueType.BOOL_LIST: (ValueType.BOOL, "bool_list_val"),
    ValueType.STRING_LIST: (ValueType.STRING, "string_list_val"),
    ValueType.BYTES_LIST: (ValueType.BYTES, "bytes_list_val"),
    ValueType.UNIX_TIMESTAMP_LIST: (ValueType.UNIX_TIMESTAMP, "unix_timestamp_list_val"),
}

SUPPORTED_VALUE_TYPES: frozenset[ValueType] = frozenset(_SCALARS) | frozenset(_LISTS)
"""Feature value types featureflow encodes itself (others fall back to Feast's writer)."""

_KEY_TYPES: dict[ValueType, tuple[pa.DataType, str | None]] = {
    ValueType.INT64: (pa.int64(), "<i8"),
    ValueType.INT32: (pa.int32(), "<i4"),
    ValueType.STRING: (pa.large_string(), None),
    ValueType.BYTES: (pa.large_binary(), None),
}

SUPPORTED_KEY_TYPES: frozenset[ValueType] = frozenset(_KEY_TYPES)
"""Join key types featureflow serialises itself."""


def arrow_type(value_type: ValueType) -> pa.DataType:
    """The Arrow type a column of ``value_type`` is cast to before encoding."""
    if value_type in _SCALARS:
        return _SCALARS[value_type].arrow
    if value_type in _LISTS:
        return pa.large_list(_SCALARS[_LISTS[value_type][0]].arrow)
    if value_type in _KEY_TYPES:
        return _KEY_TYPES[value_type][0]
    msg = f"featureflow cannot encode Feast type {value_type.name}"
    raise OnlineStoreError(msg)


def null_mask(arr: pa.Array) -> BoolArray:
    """True where Feast writes a null: Arrow nulls and, for floats, NaN."""
    missing = arr.is_null(nan_is_null=pa.types.is_floating(arr.type))
    return np.asarray(missing.to_numpy(zero_copy_only=False), dtype=bool)


def encode_values(arr: pa.Array, value_type: ValueType) -> B.Packed:
    """The serialised ``ValueProto`` of every row of ``arr`` (already of ``arrow_type``)."""
    return B.concat(value_parts(arr, value_type))


def value_parts(arr: pa.Array, value_type: ValueType) -> list[B.Cells | B.Packed]:
    """``encode_values`` as parts to concatenate (fixed-width parts stay fixed-width)."""
    missing = null_mask(arr)
    if value_type in _SCALARS:
        spec = _SCALARS[value_type]
        parts: list[B.Cells | B.Packed] = [
            B.const(_tag(spec.field, spec.wire), len(arr)),
            spec.element(arr),
        ]
        if value_type == ValueType.UNIX_TIMESTAMP:
            return parts  # nulls carry Feast's sentinel, not b""
    elif value_type in _LISTS:
        parts = _list_parts(arr, value_type)
    else:
        msg = f"featureflow cannot encode Feast type {value_type.name}"
        raise OnlineStoreError(msg)
    if missing.any():
        return [part.where(~missing) for part in parts]  # a matrix part: lengths only
    return parts


def _list_parts(arr: pa.Array, value_type: ValueType) -> list[B.Cells | B.Packed]:
    element_type, field = _LISTS[value_type]
    spec = _SCALARS[element_type]
    values = arr.values
    if values.null_count:
        msg = (f"a {value_type.name} value contains a null element; Feast cannot store "
               "nulls inside lists: drop or fill them first")
        raise OnlineStoreError(msg)
    list_offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    if element_type == ValueType.UNIX_TIMESTAMP:
        # Feast converts list elements through ``datetime.timestamp()``: truncated
        # toward zero, where scalar timestamps go through numpy and are floored.
        micros = epoch_micros(values)
        elements: B.Cells | B.Packed = B.varint(
            np.where(micros < 0, -((-micros) // 1_000_000), micros // 1_000_000))
    else:
        elements = spec.element(values)
    if spec.wire == _WIRE_LEN:  # strings, bytes: repeated, never packed
        encoded = B.concat([B.const(_tag("bytes_val", _WIRE_LEN), len(values)), elements])
        inner = B.regroup(encoded, list_offsets)
    else:  # numbers: one packed field 1 holding the elements back to back
        element_bytes = elements if isinstance(elements, B.Packed) else B.concat([elements])
        payload = B.regroup(element_bytes, list_offsets)
        size = payload.lengths()
        present = size > 0
        inner = B.concat([
            B.const(_tag("bytes_val", _WIRE_LEN), len(arr)).where(present),
            B.varint(size).where(present),
            payload,
        ])
    return [
        B.const(_tag(field, _WIRE_LEN), len(arr)),
        B.varint(inner.lengths()),
        inner,
    ]


def value_texts(arr: pa.Array, value_type: ValueType) -> list[str | None]:
    """SQLite's ``value_text`` column: ``str()`` of numbers and bools, the string itself."""
    texts = value_text_array(arr, value_type)
    return [None] * len(arr) if texts is None else texts.to_pylist()


def value_text_array(arr: pa.Array, value_type: ValueType) -> pa.Array | None:
    """:func:`value_texts` as an Arrow string array (null where Feast stores NULL), built
    without Python per value; ``None`` when every row's text is NULL (lists, bytes,
    timestamps have no ``value_text``)."""
    if value_type == ValueType.STRING:
        return arr
    if value_type in (ValueType.FLOAT, ValueType.DOUBLE):
        texts = float_reprs(arr.fill_null(0).cast(pa.float64()))
    elif value_type in (ValueType.INT32, ValueType.INT64):
        texts = arr.fill_null(0).cast(pa.string())
    elif value_type == ValueType.BOOL:
        texts = pc.if_else(arr.fill_null(False), "True", "False")
    else:
        return None
    missing = null_mask(arr)
    if missing.any():
        texts = pc.if_else(pa.array(missing), pa.scalar(None, pa.string()), texts)
    return texts


def float_reprs(values: pa.Array) -> pa.Array:
    """Python's ``repr`` of each float64, built by Arrow (no Python per value).

    Arrow and Python both print the shortest digits that round-trip; they differ
    only in layout: Python uses fixed notation for 1e-4 <= |x| < 1e16 and ends
    whole numbers with ``.0``, Arrow picks whichever notation is shorter. Arrow's
    text is kept where it already has Python's layout, whole numbers below 2**53
    are printed as integers plus ``.0``, and the few others (-0.0, inf, tiny or
    huge numbers) go through ``float.__repr__``.
    """
    x = values.to_numpy(zero_copy_only=False)
    arrow_text = pc.cast(values, pa.string())
    magnitude = np.abs(x)
    with np.errstate(invalid="ignore"):
        fixed_range = (magnitude >= 1e-4) & (magnitude < 1e16)
        whole = (np.floor(x) == x) & (magnitude < 2.0**53) & ~((x == 0) & np.signbit(x))
    has_point = pc.match_substring(arrow_text, ".").to_numpy(zero_copy_only=False)
    has_exp = pc.match_substring(arrow_text, "e").to_numpy(zero_copy_only=False)
    as_is = fixed_range & has_point & ~has_exp & ~whole
    texts = arrow_text
    if whole.any():
        whole_text = pc.binary_join_element_wise(
            pc.cast(pa.array(np.where(whole, x, 0).astype(np.int64)), pa.string()), ".0", "")
        texts = pc.if_else(pa.array(whole), whole_text, arrow_text)
    other = np.flatnonzero(~(as_is | whole))
    if len(other) == 0:
        return texts
    python_text = [float.__repr__(v) for v in x[other].tolist()]
    return pc.replace_with_mask(texts, pa.array(~(as_is | whole)), pa.array(python_text))


# --- timestamps --------------------------------------------------------------------------

_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def epoch_micros(arr: pa.Array) -> I64:
    """Microseconds since the epoch, UTC, floored (nulls read as 0)."""
    if not pa.types.is_timestamp(arr.type):
        msg = f"expected a timestamp column, got {arr.type}"
        raise OnlineStoreError(msg)
    raw = arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    per_second = _PER_SECOND[arr.type.unit]
    if per_second >= 1_000_000:
        return raw // (per_second // 1_000_000)
    return raw * (1_000_000 // per_second)


def epoch_seconds(arr: pa.Array) -> I64:
    """Whole seconds since the epoch, UTC, floored (nulls read as 0)."""
    return epoch_micros(arr) // 1_000_000


def sqlite_event_seconds(micros: I64) -> I64:
    """What Feast's SQLite store puts in ``event_ts``/``created_ts`` for UTC ``micros``.

    Feast turns the timestamp into a naive UTC ``datetime`` and sqlite3's adapter
    stores ``int(dt.timestamp())``, which reads the naive value in the machine's
    local time zone (and truncates toward zero). Reading converts back the same
    way, so Feast round-trips; we must write the very same integer.
    """
    if time.timezone == 0 and time.altzone == 0:
        return np.where(micros < 0, -((-micros) // 1_000_000), micros // 1_000_000)
    unique, inverse = np.unique(micros, return_inverse=True)
    epoch = datetime(1970, 1, 1)
    local = np.array(
        [int((epoch + timedelta(microseconds=int(us))).timestamp()) for us in unique.tolist()],
        dtype=np.int64,
    )
    return local[inverse]


def timestamp_protos(micros: I64) -> B.Packed:
    """``google.protobuf.Timestamp(seconds, nanos)`` bytes for UTC ``micros``."""
    seconds = micros // 1_000_000
    nanos = (micros % 1_000_000) * 1_000
    n = len(micros)
    return B.concat([
        B.const(b"\x08", n).where(seconds != 0),
        B.varint(seconds).where(seconds != 0),
        B.const(b"\x10", n).where(nanos != 0),
        B.varint(nanos).where(nanos != 0),
    ])


def decode_timestamps(stored: Sequence[bytes | None]) -> tuple[I64, I64, BoolArray]:
    """(seconds, nanos, readable) of serialised ``google.protobuf.Timestamp`` messages, as
    protobuf reads them (a field repeated, e.g. two serialisations back to back: the last
    value wins; a missing field: 0). ``readable`` is False, and both numbers 0, for
    ``None`` and for bytes that are not such a message."""
    seconds, nanos, readable = _canonical_timestamps(stored)
    for i in np.flatnonzero(~readable).tolist():
        value = stored[i]
        decoded = _decode_timestamp(value) if value is not None else None
        if decoded is not None:
            seconds[i], nanos[i] = decoded
            readable[i] = True
    return seconds, nanos, readable


def _decode_timestamp(message: bytes) -> tuple[int, int] | None:
    """(seconds, nanos) of one serialised ``Timestamp`` (int64 and int32 varints, negative
    ones in ten bytes); ``None`` for any other field, wire type or a truncated varint."""
    seconds = nanos = 0
    at = 0
    while at < len(message):
        tag = message[at]
        value, shift, at = 0, 0, at + 1
        while True:
            if at >= len(message) or shift > 63:
                return None
            byte = message[at]
            value |= (byte & 127) << shift
            at, shift = at + 1, shift + 7
            if byte < 128:
                break
        value &= (1 << 64) - 1
        value -= (1 << 64) if value >> 63 else 0
        if tag == 8:
            seconds = value
        elif tag == 16:
            nanos = value
        else:
            return None
    return seconds, nanos


def _canonical_timestamps(stored: Sequence[bytes | None]) -> tuple[I64, I64, BoolArray]:
    """:func:`decode_timestamps` in numpy, for the canonical form of times from 1978-07-05
    to 3058-08-26 (2^28 <= seconds < 2^35) alone: tag 8, five varint bytes of seconds,
    then tag 16 and the nanos' varint (at most 5 bytes), or no nanos, as
    :func:`timestamp_protos` and protobuf's serialiser write them. Every other form reads
    as not readable (0, 0)."""
    n = len(stored)
    values = [b"" if v is None else v for v in stored] if None in stored else stored
    lengths = np.fromiter(map(len, values), np.int64, n)  # type: ignore[arg-type]
    # numpy's fixed-width bytes pad with zeros (and cut what is longer: not canonical)
    cells = np.array(values, dtype="S12").view(np.uint8).reshape(n, 12).astype(np.int64)
    high = cells >= 128
    # seconds: tag 8, then bytes 1-4 continue and byte 5 ends the varint
    readable = ((cells[:, 0] == 8) & high[:, 1:5].all(axis=1) & ~high[:, 5]
                & ((lengths == 6) | ((lengths >= 8) & (lengths <= 12) & (cells[:, 6] == 16))))
    seconds = (cells[:, 1:6] & 127) @ _VARINT_SCALE
    # nanos: bytes 7 .. length - 1, each but the last continuing the varint
    inside = _NANOS_AT[None, :] < lengths[:, None]
    last = _NANOS_AT[None, :] == lengths[:, None] - 1
    readable &= (~inside | (high[:, 7:] != last)).all(axis=1)
    nanos = ((cells[:, 7:] & 127) * inside) @ _VARINT_SCALE
    return np.where(readable, seconds, 0), np.where(readable, nanos, 0), readable


_VARINT_SCALE = 128 ** np.arange(5, dtype=np.int64)
"""The weights of a five-byte varint's 7-bit groups."""
_NANOS_AT = np.arange(7, 12, dtype=np.int64)


def utc_datetime(micros: int) -> datetime:
    """A UTC ``datetime`` from microseconds since the epoch."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)


# --- entity keys -------------------------------------------------------------------------


def entity_keys(
    columns: Sequence[tuple[str, pa.Array, ValueType]], version: int
) -> B.Packed:
    """Feast's serialised entity key of every row, for ``entity_key_serialization_version``.

    ``columns`` are ``(join_key, values, value_type)``, values already of the key's
    Arrow type and without nulls.
    """
    if version not in (2, 3):
        msg = f"entity_key_serialization_version {version} is not supported (use 3)"
        raise OnlineStoreError(msg)
    ordered = sorted(columns, key=lambda c: c[0])
    n = len(ordered[0][1]) if ordered else 0
    prefix = bytearray()
    if version > 2:
        prefix += np.uint32(len(ordered)).tobytes()
    for name, _, _ in ordered:
        encoded = name.encode("utf8")
        prefix += np.uint32(ValueType.STRING.value).tobytes()
        if version > 2:
            prefix += np.uint32(len(encoded)).tobytes()
        prefix += encoded
    parts: list[B.Cells | B.Packed] = [B.const(bytes(prefix), n)]
    for _, arr, value_type in ordered:
        _, dtype = _KEY_TYPES[value_type]
        if dtype is not None:
            size = np.dtype(dtype).itemsize
            head = np.uint32(value_type.value).tobytes() + np.uint32(size).tobytes()
            parts += [B.const(head, n),
                      B.fixed(arr.to_numpy(zero_copy_only=False), dtype)]
        else:
            packed = B.from_arrow(arr)
            parts += [B.const(np.uint32(value_type.value).tobytes(), n),
                      B.u32_le(packed.lengths()), packed]
    return B.concat(parts)


def as_arrow(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous Arrow array (chunked columns are joined)."""
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values


def cast(values: pa.Array, target: pa.DataType, column: str) -> pa.Array:
    """``values`` cast to ``target``, or a typed error naming the column."""
    if values.type == target:
        return values
    try:
        # timestamps keep their unit and zone: ``epoch_micros`` reads any of them
        if pa.types.is_timestamp(values.type) and pa.types.is_timestamp(target):
            return values
        if (pa.types.is_large_list(target) and pa.types.is_timestamp(target.value_type)
                and (pa.types.is_list(values.type) or pa.types.is_large_list(values.type))
                and pa.types.is_timestamp(values.type.value_type)):
            return pc.cast(values, pa.large_list(values.type.value_type))
        return pc.cast(values, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        msg = (f"column {column!r} of type {values.type} cannot be stored as {target} "
               f"(the view's schema): {exc}")
        raise OnlineStoreError(msg) from exc
