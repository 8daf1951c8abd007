"""Kafka message values (JSON objects) -> the per-record parser's table, a whole batch at once.

:class:`BatchJsonParser` gives exactly what
:class:`~featureflow.events.json_records.JsonRecordParser` gives, row for row
(typed values, validity flags, the timestamp's text), but decodes the batch
with Arrow's C++ JSON reader (``pyarrow.json.read_json`` over the values
joined by newlines, with an explicit schema) instead of one ``orjson`` call
and a Python loop per record. Arrow's reader is faster but not the same
parser, so every record has to earn the vectorised path; one that can't goes
to the per-record parser, and so does a sub-range that Arrow refuses.

A record is decoded by Arrow only when these checks, all vectorised (numpy
over the batch's data buffer), say Arrow's answer is the per-record one:

- it starts with ``{`` and ends with ``}`` (no surrounding whitespace, no
  BOM: Arrow reads a lone ``null`` line by crashing the process);
- no byte below 0x20 (no newline inside the record; a tab or newline inside
  a string is refused by both parsers, so no record is lost to this rule);
- no ``NaN`` or ``Inf`` anywhere (Arrow reads bare ``NaN``/``Infinity``/
  ``Inf`` as numbers; standard JSON and orjson refuse them);
- its non-ASCII bytes are valid UTF-8 (Arrow does not check; orjson does);
- it is *one* value, by its lexical structure: an even number of unescaped
  quotes, and ``{``/``[`` .. ``}``/``]`` outside strings nest from its first
  byte to its last and no further, at most 1,024 deep (orjson's limit; Arrow
  crashes on deep nesting). Without this a record that is not JSON on its own
  (``{"a":"}``) could join the next one into a single row and shift every
  row after it.

Arrow's reader is strict where the per-record parser marks a value invalid
(a float or boolean for an integer field, an integer out of the field's range,
a number for a string field, a duplicated field, a ``1e400``): it refuses the
whole input, and the parser splits it at the row Arrow names (or in halves)
and decodes the refused record per record. After a few refusals in one batch
the rest goes per record: a batch of bad records costs at most a few Arrow
passes more than the per-record path.

The timestamp field is read as a string or as an integer (epoch milliseconds),
choosing per record by its bytes (``"ts":"`` or not): the per-record parser's
text of an integer is its digits, as Arrow's cast writes them. Fields of
type ``float`` are read as doubles and rounded to float32 afterwards, as the
per-record parser does (Arrow's direct float32 read rounds differently).

Avro sources do not come here: Spark's ``from_avro`` decodes them on the JVM.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from featureflow.events import ddl
from featureflow.events.json_records import (
    _FLOAT_WORDS,
    _INT_RANGES,
    JsonRecordParser,
)

MAX_DEPTH = 1024
"""Deepest nesting orjson accepts (the outer object counts as 1); deeper records go per record."""
MAX_REFUSALS = 8
"""Arrow refusals tolerated in one batch; then the rest of the batch is decoded per record."""
_SMALLEST_RANGE = 8
"""A refused range of at most this many records is decoded per record, not split further."""

_ROW_HINT = re.compile(r"in row (\d+)")


@dataclass(frozen=True)
class BatchStats:
    """What one call decoded, and how (counts of records)."""

    records: int
    vectorised: int
    per_record: int
    refusals: int
    """Arrow passes that refused their input (each costs a re-read of part of it)."""


@dataclass(frozen=True)
class BatchJsonParser:
    """:class:`JsonRecordParser`'s output for a batch, decoded vectorised where that is exact."""

    records: JsonRecordParser
    """The per-record parser: the reference, and the fallback for what Arrow can't decide."""
    _stamp_string: pa.Schema = field(init=False, repr=False)
    _stamp_integer: pa.Schema = field(init=False, repr=False)
    _stamp_prefix: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        stamp = self.records.timestamp_field

        def read_schema(stamp_type: pa.DataType) -> pa.Schema:
            return pa.schema(
                [
                    pa.field(name, stamp_type if name == stamp else _read_type(kind))
                    for name, kind in self.records.fields
                ]
            )

        object.__setattr__(self, "_stamp_string", read_schema(pa.string()))
        object.__setattr__(self, "_stamp_integer", read_schema(pa.int64()))
        object.__setattr__(self, "_stamp_prefix", orjson.dumps(stamp) + b":")

    def output_schema(self) -> pa.Schema:
        """The columns of :meth:`__call__`'s table (the per-record parser's)."""
        return self.records.output_schema()

    def __call__(self, values: pa.Array | Sequence[bytes | None]) -> pa.Table:
        """Parse message values (bytes or null): the per-record parser's table, row for row."""
        return self.decode(values)[0]

    def decode(self, values: pa.Array | Sequence[bytes | None]) -> tuple[pa.Table, BatchStats]:
        """:meth:`__call__`'s table, and how many records took which path."""
        array = values if isinstance(values, pa.Array) else pa.array(values, pa.binary())
        if isinstance(array, pa.ChunkedArray):  # pragma: no cover - callers pass arrays
            array = array.combine_chunks()
        if not pa.types.is_binary(array.type):
            array = array.cast(pa.binary())
        n = len(array)
        eligible = _eligible(array)
        by_integer = eligible & self._stamp_not_text(array)
        groups = [
            (np.flatnonzero(eligible & ~by_integer), self._stamp_string),
            (np.flatnonzero(by_integer), self._stamp_integer),
        ]
        pieces: list[tuple[np.ndarray, pa.Table]] = []
        slow: list[np.ndarray] = [np.flatnonzero(~eligible)]
        refusals = 0
        for rows, schema in groups:
            stack = [rows] if rows.size else []
            while stack:
                part = stack.pop()
                if refusals >= MAX_REFUSALS:
                    slow.append(part)
                    continue
                try:
                    table = _read(array.take(pa.array(part)), schema)
                except pa.ArrowInvalid as error:
                    refusals += 1
                    if part.size <= _SMALLEST_RANGE:
                        slow.append(part)
                        continue
                    hint = _ROW_HINT.search(str(error))
                    row = int(hint.group(1)) if hint else -1
                    if 0 <= row < part.size:
                        slow.append(part[row : row + 1])
                        stack.extend(p for p in (part[row + 1 :], part[:row]) if p.size)
                    else:
                        half = part.size // 2
                        stack.extend((part[half:], part[:half]))
                    continue
                pieces.append((part, self._as_output(table, schema)))
        slow_rows = np.concatenate(slow)
        vectorised = n - slow_rows.size
        if slow_rows.size:
            slow_rows.sort()
            pieces.append((slow_rows, self.records(array.take(pa.array(slow_rows)))))
        stats = BatchStats(n, vectorised, int(slow_rows.size), refusals)
        if len(pieces) == 1 and pieces[0][0].size == n:  # one piece, in order
            return pieces[0][1], stats
        if not pieces:
            return self.records(array), stats
        order = np.concatenate([rows for rows, _ in pieces])
        table = pa.concat_tables([table for _, table in pieces])
        return table.take(pa.array(np.argsort(order, kind="stable"))), stats

    def _stamp_not_text(self, values: pa.BinaryArray) -> np.ndarray:
        """Per value: whether its timestamp field looks like a non-string (``"ts":1``), so that
        Arrow reads it as an integer. A guess from the bytes: a wrong one costs a refusal."""
        data, _, ends = _bytes(values)
        prefix = self._stamp_prefix
        at = _find(data, prefix) + len(prefix)
        at = at[at < data.size]
        guess = np.zeros(len(values), bool)
        guess[np.searchsorted(ends, at[data[at] != ord('"')], side="right")] = True
        return guess

    def _as_output(self, table: pa.Table, schema: pa.Schema) -> pa.Table:
        """Arrow's typed columns as the per-record parser's (every record an object, all valid
        but the timestamp field read as a type other than its own)."""
        n = table.num_rows
        stamp = self.records.timestamp_field
        columns: list[pa.Array] = []
        valid: list[pa.Array] = []
        stamp_text: pa.Array | None = None
        everywhere = pa.array(np.ones(n, bool))
        for name, kind in self.records.fields:
            column = table.column(name).combine_chunks()
            if name == stamp:
                stamp_text = column if pa.types.is_string(column.type) else column.cast(pa.string())
                column, is_valid = _stamp_as(column, kind)
                valid.append(is_valid)
            else:
                valid.append(everywhere)
            if kind == "float":  # as the per-record parser: float64 rounded, overflow -> inf
                column = column.cast(pa.float32(), safe=False)
            columns.append(column)
        assert stamp_text is not None
        key = table.column(self.records.join_key).combine_chunks()
        return pa.Table.from_arrays(
            [*columns, stamp_text, everywhere, key.is_valid(), *valid],
            schema=self.output_schema(),
        )


def _read_type(kind: str) -> pa.DataType:
    """The Arrow type a field is read as (float fields as doubles, rounded afterwards)."""
    return pa.float64() if kind == "float" else ddl.ARROW_TYPES[kind]


def _read(values: pa.BinaryArray, schema: pa.Schema) -> pa.Table:
    """Arrow's decode of values known to be one JSON object each (see :func:`_eligible`)."""
    joined = pc.binary_join(
        pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values), b"\n"
    )
    buffer = joined[0].as_buffer()
    table = pa_json.read_json(
        pa.BufferReader(buffer),
        read_options=pa_json.ReadOptions(use_threads=False, block_size=buffer.size + 1),
        parse_options=pa_json.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="ignore"
        ),
    )
    if table.num_rows != len(values):  # the checks make this impossible; never trust a shift
        msg = f"Arrow read {table.num_rows} rows from {len(values)} records"
        raise pa.ArrowInvalid(msg)
    return table


def _stamp_as(column: pa.Array, kind: str) -> tuple[pa.Array, pa.Array]:
    """The timestamp field, read as string or int64, as the per-record parser types it for
    ``kind``, and whether it is valid there (absent/null, or of the type)."""
    present = column.is_valid()
    absent = pc.invert(present)
    if pa.types.is_string(column.type):
        if kind == "string":
            return column, pa.array(np.ones(len(column), bool))
        if kind in ("double", "float"):
            words = pa.array(list(_FLOAT_WORDS))
            numbers = pa.array(list(_FLOAT_WORDS.values()), pa.float64())
            at = pc.index_in(column, value_set=words)
            return pc.take(numbers, at), pc.or_(absent, at.is_valid())
        # integers and booleans take no string
        return pa.nulls(len(column), ddl.ARROW_TYPES[kind]), absent
    if kind == "string":
        return column.cast(pa.string()), pa.array(np.ones(len(column), bool))
    if kind in ("double", "float"):
        # rounded to nearest as Python's float(int)
        return column.cast(pa.float64(), safe=False), pa.array(np.ones(len(column), bool))
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        fits = pc.and_(pc.greater_equal(column, low), pc.less_equal(column, high))
        fits = pc.fill_null(fits, False)
        typed = pc.if_else(fits, column, pa.scalar(None, pa.int64())).cast(ddl.ARROW_TYPES[kind])
        return typed, pc.or_(absent, fits)
    return pa.nulls(len(column), pa.bool_()), absent  # boolean takes no number


def _bytes(values: pa.BinaryArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The values' bytes (uint8, no copy) and each value's [start, end) in them."""
    n = len(values)
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], np.int32, count=n + 1, offset=values.offset * 4)
    base = int(offsets[0])
    size = int(offsets[-1]) - base
    data = (
        np.frombuffer(buffers[2], np.uint8, count=size, offset=base)
        if buffers[2] is not None and size
        else np.zeros(0, np.uint8)
    )
    return data, (offsets[:-1] - base).astype(np.int64), (offsets[1:] - base).astype(np.int64)


def _eligible(values: pa.BinaryArray) -> np.ndarray:
    """Per value: whether Arrow's JSON reader decodes it exactly as the per-record parser
    (the checks of the module docstring); False says only "decode it per record"."""
    n = len(values)
    data, starts, ends = _bytes(values)
    ok = ends - starts >= 2
    if values.null_count:
        ok &= np.asarray(values.is_valid(), bool)
    rows = np.flatnonzero(ok)
    ok[rows] = (data[starts[rows]] == ord("{")) & (data[ends[rows] - 1] == ord("}"))

    def row_of(positions: np.ndarray) -> np.ndarray:
        return np.searchsorted(ends, positions, side="right")

    ok[row_of(np.flatnonzero(data < 0x20))] = False
    for word in (b"NaN", b"Inf"):  # bare NaN, Infinity, Inf, -Inf (and the same inside strings)
        ok[row_of(_find(data, word))] = False
    high = np.unique(row_of(np.flatnonzero(data >= 0x80)))
    high = high[ok[high]]
    if high.size:
        try:
            values.take(pa.array(high)).cast(pa.string())
        except pa.ArrowInvalid:
            ok[high] = False

    # Lexical structure: unescaped quotes (a quote after an odd run of backslashes is escaped;
    # eligible records start with "{", so no run crosses into the one before).
    quotes = np.flatnonzero(data == ord('"'))
    backslash = data == ord("\\")
    if quotes.size and backslash.any():
        plain = np.maximum.accumulate(np.where(backslash, -1, np.arange(data.size)))
        before = quotes - 1
        run = np.where(before >= 0, before - plain[np.maximum(before, 0)], 0)
        quotes = quotes[run % 2 == 0]
    quotes_at_start = np.searchsorted(quotes, starts)
    opens = (data == ord("{")) | (data == ord("["))
    marks = np.flatnonzero(opens | (data == ord("}")) | (data == ord("]")))
    mark_row = row_of(marks)
    outside = (np.searchsorted(quotes, marks) - quotes_at_start[mark_row]) % 2 == 0
    marks, mark_row = marks[outside], mark_row[outside]
    if not marks.size:
        return np.zeros(n, bool)
    depth = np.cumsum(np.where(opens[marks], 1, -1))
    first = np.searchsorted(mark_row, np.arange(n), side="left")
    last = np.searchsorted(mark_row, np.arange(n), side="right") - 1
    has_marks = last >= first
    depth_before = np.where(first > 0, depth[np.maximum(first - 1, 0)], 0)
    local = depth - depth_before[mark_row]
    closes_once = np.bincount(mark_row, weights=local <= 0, minlength=n) == 1
    ok &= has_marks & closes_once
    rows = np.flatnonzero(ok)
    ok[rows] = (local[last[rows]] == 0) & (marks[last[rows]] == ends[rows] - 1)
    ok[np.unique(mark_row[local > MAX_DEPTH])] = False
    return ok


def _find(data: np.ndarray, word: bytes) -> np.ndarray:
    """Positions in ``data`` where ``word`` starts (found from its rarest-looking first byte)."""
    at = np.flatnonzero(data[: data.size - len(word) + 1] == word[0])
    for index in range(1, len(word)):
        at = at[data[at + index] == word[index]]
    return at
