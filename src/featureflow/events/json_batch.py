"""Kafka message values (JSON objects) -> the per-record parser's table, a whole batch at once.

:class:`BatchJsonParser` gives exactly what
:class:`~featureflow.events.json_records.JsonRecordParser` gives, row for row
(typed values, validity flags, the timestamp's text), but works a column at a
time instead of a record at a time:

0. an Arrow ``binary`` batch first goes through the flat-JSON Mojo kernel
   (:func:`featureflow.ops.read_flat_json`): it reads, in one pass over the bytes,
   each record that is one flat object of ASCII text without escapes whose numbers
   it converts exactly (integers of up to 18 digits; decimals within Clinger's
   fast path: a significand up to 2^53, a decimal exponent within +-22), and
   leaves every other record to the steps below, which read only those (the rows
   are put back in their places). The sample producer's records are all read
   there: 10 k of them parsed, timestamps included, in 2.7 ms against 13.1 ms;
   a double written with 17 significant digits (``repr`` of a computed float) is
   beyond its exact conversion and is read below;
1. decode: ``orjson.loads`` mapped over the batch's values (one C-level loop,
   no Python frame per record); a value that orjson refuses (not JSON,
   ``null``, ``1e400``) is decoded again, alone, with the per-record parser's
   rules (:func:`~featureflow.events.json_records.load`) and the map goes on;
2. per declared field: the values of every record (``dict.get`` in one
   comprehension), then the set of their Python types. When those types are
   what the field's Arrow type takes as is (``int`` for an integer field
   within its range, ``float`` or ``int`` for a double, ``str`` for a string, ``bool``
   for a boolean, ``None`` anywhere) the list goes to Arrow in one call and
   every value is valid; otherwise that one column goes through the
   per-record parser's converter, value by value (a string field's number
   becomes text, a double field's ``"NaN"`` a NaN, a wrong type invalid).

Steps 1-2 use the per-record parser's decoder and converters, so their output is
the same by construction; the kernel is an implementation of its own, held to
reading only what is certain. tests/events/test_json_batch.py checks both paths
against the per-record parser on arbitrary mixes of good and bad records and on
numbers written every way (a kernel that rounded ``5925371616145993e23`` in two
steps fails it), and through Spark (tests/spark/test_parse.py).

Measured and not used (``bench/parse.py``'s first run, commit a48fb58):
Arrow's JSON reader (``pyarrow.json.read_json`` over the joined values, with
an explicit schema) parses no faster than ``orjson`` on these ~90-byte
records, and using it exactly needs a numpy pass over the bytes per batch
(it accepts bare ``NaN``/``Inf``, invalid UTF-8 and several values on one
line, reads float32 with double rounding, and crashes the process on a lone
``null`` or deep nesting); it ran 0.5-1.2x the per-record parser where this
runs 1.8-1.9x (clean batches; 1.3x with 1 % bad records).

Avro sources do not come here: Spark's ``from_avro`` decodes them on the JVM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa

from featureflow import ops
from featureflow.events.json_records import (
    _ARROW_TYPES,
    _INT_RANGES,
    _INVALID,
    JsonRecordParser,
    _converter,
    _stamp_text,
    _typed_array,
    load,
)

_NONE = type(None)
_AS_IS: dict[str, frozenset[type]] = {
    **{kind: frozenset({int, _NONE}) for kind in _INT_RANGES},
    # Arrow converts an int64 to a double rounding to nearest, as float() does; a uint64
    # beyond int64 raises OverflowError and takes the converter
    "double": frozenset({float, int, _NONE}),
    "float": frozenset({float, int, _NONE}),
    "string": frozenset({str, _NONE}),
    "boolean": frozenset({bool, _NONE}),
}
"""Per declared type: the Python types (of orjson's values) that Arrow takes as they are."""
_TEXT_OR_INTEGER = frozenset({str, int, _NONE})
"""Values whose text (a string field's value, the timestamp's) is ``str()``: an integer's
digits are what ``orjson.dumps`` writes (orjson reads integers within 64 bits only)."""


@dataclass(frozen=True)
class BatchStats:
    """How one call decoded its batch."""

    records: int
    refused: int
    """Values orjson refused (not JSON, null, ``1e400``), each decoded again by ``load``."""
    converted: tuple[str, ...]
    """The fields whose column went through the per-value converter (a value of another
    type than the field's, or an integer out of its range), among the records decoded in
    Python."""
    read_natively: int = 0
    """Records the flat-JSON kernel read (:func:`featureflow.ops.read_flat_json`); the
    others were decoded in Python."""


@dataclass(frozen=True)
class BatchJsonParser:
    """:class:`JsonRecordParser`'s output for a batch, computed a column at a time."""

    records: JsonRecordParser
    """The per-record parser: its rules, its converters and the reference output."""

    def output_schema(self) -> pa.Schema:
        """The columns of :meth:`__call__`'s table (the per-record parser's)."""
        return self.records.output_schema()

    def __call__(self, values: pa.Array | Sequence[bytes | None]) -> pa.Table:
        """Parse message values (bytes or null): the per-record parser's table, row for row."""
        return self.decode(values)[0]

    def decode(self, values: pa.Array | Sequence[bytes | None]) -> tuple[pa.Table, BatchStats]:
        """:meth:`__call__`'s table, and how it was decoded: an Arrow ``binary`` array is
        first read by the flat-JSON kernel, and only the records it leaves are decoded in
        Python (:meth:`_decode_in_python`)."""
        if isinstance(values, pa.Array) and values.type in (pa.binary(), pa.large_binary()):
            if values.type == pa.large_binary():  # spark...arrow.useLargeVarTypes=true
                values = values.cast(pa.binary())  # Kafka batches stay far below 2 GiB
            read = self._read_natively(values)
            if read is not None:
                return read
        return self._decode_in_python(values)

    def _flat_fields(self) -> list[ops.FlatField] | None:
        """The fields as the kernel takes them; None when the timestamp field is not read
        as text (its text would need orjson's serialisation of other values)."""
        kinds = dict(self.records.fields)
        if kinds[self.records.timestamp_field] != "string":
            return None
        flat = []
        for name, kind in self.records.fields:
            if kind in _INT_RANGES:
                flat.append(ops.FlatField(name, "int", *_INT_RANGES[kind]))
            elif kind in ("double", "float"):
                flat.append(ops.FlatField(name, "double"))
            elif kind == "string":
                flat.append(ops.FlatField(name, "string"))
            else:
                flat.append(ops.FlatField(name, "bool"))
        return flat

    def _read_natively(self, values: pa.Array) -> tuple[pa.Table, BatchStats] | None:
        """:meth:`decode` through the flat-JSON kernel, the records it leaves decoded in
        Python and put back in their places; None when the kernel reads nothing."""
        fields = self._flat_fields()
        read = None if fields is None else ops.read_flat_json(values, fields)
        if read is None or read.left.all():
            return None
        n = len(values)
        typed = [
            _native_array(column, kind, n)
            for column, (_, kind) in zip(read.columns, self.records.fields, strict=True)
        ]
        names = [name for name, _ in self.records.fields]
        stamp_text = typed[names.index(self.records.timestamp_field)]
        key_present = pa.array(read.columns[names.index(self.records.join_key)].present)
        everywhere = pa.array(np.ones(n, dtype=bool))
        arrays = [*typed, stamp_text, everywhere, key_present,
                  *(pa.array(column.valid) for column in read.columns)]  # fmt: skip
        left = np.flatnonzero(read.left)
        if not len(left):
            table = pa.Table.from_arrays(arrays, schema=self.output_schema())
            return table, BatchStats(n, 0, (), read_natively=n)
        rest, stats = self._decode_in_python(values.take(pa.array(left)))
        # row i: the kernel's (position i) or Python's (position n + its rank among those left)
        place = np.arange(n, dtype=np.int64)
        place[left] = n + np.arange(len(left), dtype=np.int64)
        where = pa.array(place)
        merged = [
            pa.concat_arrays([native, python.combine_chunks()]).take(where)
            for native, python in zip(arrays, rest.columns, strict=True)
        ]
        table = pa.Table.from_arrays(merged, schema=self.output_schema())
        return table, BatchStats(n, stats.refused, stats.converted, n - len(left))

    def _decode_in_python(
        self, values: pa.Array | Sequence[bytes | None]
    ) -> tuple[pa.Table, BatchStats]:
        """Every record decoded by orjson, a column at a time (see the module)."""
        raw = values.to_pylist() if isinstance(values, (pa.Array, pa.ChunkedArray)) else values
        decoded, refused = _decoded(raw)
        kinds = set(map(type, decoded))
        if kinds == {dict}:
            records: list[dict[str, object]] = decoded  # type: ignore[assignment]
            is_object = pa.array([True] * len(decoded), pa.bool_())
        else:  # a non-object reads as {} (every field absent), flagged not an object
            records = [record if isinstance(record, dict) else {} for record in decoded]
            is_object = pa.array([type(record) is dict for record in decoded], pa.bool_())
        everywhere = pa.array([True] * len(records), pa.bool_())
        typed: list[pa.Array] = []
        valid: list[pa.Array] = []
        converted: list[str] = []
        stamp_text = key_present = None
        for name, kind in self.records.fields:
            column = [record.get(name) for record in records]
            types = set(map(type, column))
            if kind == "string" and types <= _TEXT_OR_INTEGER:  # epoch ms in a text field
                array = pa.array(_texts(column) if int in types else column, pa.string())
            else:
                array = _as_is(column, kind) if types <= _AS_IS[kind] else None
            if array is None:
                converted.append(name)
                array, flags = _converted(column, kind)
                valid.append(flags)
            else:
                valid.append(everywhere)
            typed.append(array)
            if name == self.records.timestamp_field:
                if kind == "string" and types <= _TEXT_OR_INTEGER:
                    stamp_text = array
                elif types <= _TEXT_OR_INTEGER:
                    stamp_text = pa.array(_texts(column) if int in types else column, pa.string())
                else:
                    stamp_text = pa.array(list(map(_stamp_text, column)), pa.string())
            if name == self.records.join_key:
                # present: not null; a value as is is null exactly when absent or null
                key_present = (
                    array.is_valid()
                    if name not in converted
                    else pa.array([value is not None for value in column], pa.bool_())
                )
        assert stamp_text is not None and key_present is not None  # fields hold both
        table = pa.Table.from_arrays(
            [*typed, stamp_text, is_object, key_present, *valid], schema=self.output_schema()
        )
        return table, BatchStats(len(records), refused, tuple(converted))


def _native_array(column: ops.FlatColumn, kind: str, n: int) -> pa.Array:
    """A field's column from the kernel as the per-record parser types it."""
    mask = column.null
    if kind == "string":
        bitmap = pa.py_buffer(np.packbits(~mask, bitorder="little"))
        assert column.text is not None
        return pa.StringArray.from_buffers(
            n, pa.py_buffer(column.values), pa.py_buffer(column.text), bitmap, int(mask.sum())
        )
    if kind == "boolean":
        return pa.array(column.values != 0, pa.bool_(), mask=mask)
    if kind == "float":  # as _typed_array: doubles beyond float's range become +-infinity
        return pa.array(column.values, pa.float64(), mask=mask).cast(pa.float32(), safe=False)
    if kind == "double":
        return pa.array(column.values, pa.float64(), mask=mask)
    values = np.where(mask, 0, column.values)  # what a null row holds is undefined
    return pa.array(values, pa.int64(), mask=mask).cast(_ARROW_TYPES[kind])


def _decoded(raw: Sequence[bytes | None]) -> tuple[list[object], int]:
    """Each value decoded as :func:`~featureflow.events.json_records.load` decodes it, and how
    many values orjson refused.

    ``orjson.loads`` mapped in C; where it raises, ``list.extend`` keeps what came before,
    the refused value is decoded by ``load`` and the map goes on after it.
    """
    values = iter(raw)
    decoded: list[object] = []
    refused = 0
    while True:
        try:
            decoded.extend(map(orjson.loads, values))  # type: ignore[arg-type]
        except (orjson.JSONDecodeError, TypeError):  # TypeError: a null value
            decoded.append(load(raw[len(decoded)]))
            refused += 1
            continue
        return decoded, refused


def _texts(column: list[object]) -> list[str | None]:
    """Strings as they are, integers as their digits, nulls kept (see _TEXT_OR_INTEGER)."""
    return [None if value is None else str(value) for value in column]


def _as_is(column: list[object], kind: str) -> pa.Array | None:
    """The column as the field's Arrow type in one call, or None when a value is out of the
    type's range (Arrow refuses it; the per-record parser marks it invalid)."""
    try:
        return _typed_array(column, kind)
    except (OverflowError, pa.ArrowInvalid):
        return None


def _converted(column: list[object], kind: str) -> tuple[pa.Array, pa.Array]:
    """The column through the per-record parser's converter: typed values and validity."""
    convert = _converter(kind)
    results = [None if value is None else convert(value) for value in column]
    valid = [result is not _INVALID for result in results]
    values = [result if ok else None for result, ok in zip(results, valid, strict=True)]
    return _typed_array(values, kind), pa.array(valid, pa.bool_())
