"""Kafka message values (JSON objects) -> the per-record parser's table, a whole batch at once.

:class:`BatchJsonParser` gives exactly what
:class:`~featureflow.events.json_records.JsonRecordParser` gives, row for row
(typed values, validity flags, the timestamp's text), but works a column at a
time instead of a record at a time:

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

The decoder and converters are the per-record parser's, so the output is the
same by construction; tests/events/test_json_batch.py checks it on arbitrary
mixes of good and bad records, and through Spark (tests/spark/test_parse.py).

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

import orjson
import pyarrow as pa

from featureflow.events.json_records import (
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
    type than the field's, or an integer out of its range)."""


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
        """:meth:`__call__`'s table, and how it was decoded."""
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
