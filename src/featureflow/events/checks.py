"""The parser's checks of JSON records, in Arrow: the first failing check names each record.

The order and the words are the stream job's (:func:`featureflow.spark.parse.parse_events`,
:mod:`featureflow.events.reasons`):

1. ``value``: not a JSON object;
2. the entity key: missing or null, then not an integer;
3. the timestamp: missing or null, out of range, not a timestamp (one reason per record,
   from a :class:`StampReading`);
4. every other declared field in declaration order: present with another type, then (a
   ``double``/``float``) not a finite number.

A record whose timestamp the reading left to Spark (:attr:`StampReading.unread`) and that
no earlier check fails is *undecided*: its reason depends on Spark's reading.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow.events import reasons
from featureflow.events.json_records import IS_OBJECT, KEY_PRESENT, VALID_PREFIX
from featureflow.events.timestamps import event_micros

_MILLIS = r"^-?[0-9]+$"
NS_PER_US = 1_000
NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class StampReading:
    """Each record's event time (epoch ns; 0 where there is none), the reason it has none
    ("" where it has one), and whether it was left to Spark's reading (no time, no reason)."""

    ns: np.ndarray
    reason: np.ndarray
    unread: np.ndarray


def read_stamps_as_spark(stamps: pa.Array | pa.ChunkedArray) -> StampReading:
    """Timestamp texts read exactly as the job's Spark expressions read them, where that
    needs no Spark: digits are epoch milliseconds (out of int64 or beyond
    :data:`~featureflow.events.reasons.MAX_ABS_MILLIS`: out of range), the usual RFC 3339
    forms as :func:`~featureflow.events.timestamps.event_micros` reads them; every other
    text is :attr:`StampReading.unread`."""
    if isinstance(stamps, pa.ChunkedArray):
        stamps = stamps.combine_chunks() if stamps.num_chunks else pa.array([], pa.string())
    stamps = stamps.cast(pa.string())
    count = len(stamps)
    ns = np.zeros(count, np.int64)
    reason = np.full(count, "", dtype=object)
    missing = stamps.is_null().to_numpy(zero_copy_only=False)
    reason[missing] = reasons.MISSING_TIMESTAMP
    micros = event_micros(stamps)
    read = micros.is_valid().to_numpy(zero_copy_only=False)
    ns[read] = micros.filter(micros.is_valid()).to_numpy() * NS_PER_US
    # epoch-millis digits among the texts the kernel left unread only (the regex is most
    # of this function's time when run over every record)
    digits = np.zeros(count, bool)
    left = np.flatnonzero(~(read | missing))
    if len(left):
        matched = pc.fill_null(pc.match_substring_regex(stamps.take(left), _MILLIS), False)
        digits[left[matched.to_numpy(zero_copy_only=False)]] = True
    if digits.any():
        texts = stamps.filter(pa.array(digits)).to_pylist()
        for at, text in zip(np.flatnonzero(digits), texts, strict=True):
            millis = int(text)
            if abs(millis) > reasons.MAX_ABS_MILLIS:
                reason[at] = reasons.OUT_OF_RANGE
            else:
                ns[at] = millis * NS_PER_MS
    unread = ~(missing | read | digits)
    return StampReading(ns, reason, unread)


@dataclass(frozen=True)
class Checked:
    """Per record: the failing field and reason (null: usable or undecided), and whether it
    is undecided (its timestamp left to Spark, no earlier check failing)."""

    field: pa.Array
    reason: pa.Array
    undecided: np.ndarray


def _strings(codes: np.ndarray, words: list[str]) -> pa.Array:
    """``words[code]`` per record, null where the code is -1 (built in Arrow, not Python)."""
    indices = pa.array(codes, pa.int32(), mask=codes < 0)
    return pa.DictionaryArray.from_arrays(indices, pa.array(words, pa.string())).cast(pa.string())


def first_failing(
    parsed: pa.Table, fields: tuple[tuple[str, str], ...], join_key: str,
    timestamp_field: str, stamps: StampReading,
) -> Checked:  # fmt: skip
    """The first failing check of each record of ``parsed`` (the columns of
    :class:`~featureflow.events.json_records.JsonRecordParser`; ``fields``: its
    (name, DDL type) pairs)."""
    count = parsed.num_rows

    def flag(name: str) -> np.ndarray:
        return parsed.column(name).to_numpy(zero_copy_only=False).astype(bool)

    checks: list[tuple[np.ndarray, str, str]] = [
        (~flag(IS_OBJECT), "value", reasons.NOT_JSON_OBJECT),
        (~flag(KEY_PRESENT), join_key, reasons.MISSING_KEY),
        (~flag(VALID_PREFIX + join_key), join_key, reasons.KEY_NOT_INTEGER),
        (stamps.reason != "", timestamp_field, ""),  # the reading's own reason
        (stamps.unread, timestamp_field, "?"),  # left to Spark: undecided from here
    ]
    for name, kind in fields:
        if name in (join_key, timestamp_field):
            continue
        checks.append((~flag(VALID_PREFIX + name), name, reasons.wrong_type(kind)))
        if kind in ("double", "float"):  # nulls are fine, NaN and +-inf are not
            values = parsed.column(name).fill_null(0.0).to_numpy().astype(np.float64)
            checks.append((~np.isfinite(values), name, reasons.NOT_FINITE))
    field_codes = np.full(count, -1, np.int32)
    reason_codes = np.full(count, -1, np.int32)
    field_words: list[str] = []
    reason_words: list[str] = []
    undecided = np.zeros(count, dtype=bool)
    open_ = np.ones(count, dtype=bool)
    for failing, name, why in checks:
        first = failing & open_
        if not first.any():
            continue
        open_ &= ~first
        if why == "?":
            undecided |= first
            continue
        if name not in field_words:
            field_words.append(name)
        field_codes[first] = field_words.index(name)
        stamp_reasons = [why] if why else sorted(set(stamps.reason[first]))
        for word in stamp_reasons:
            if word not in reason_words:
                reason_words.append(word)
            chosen = first if why else first & (stamps.reason == word)
            reason_codes[chosen] = reason_words.index(word)
    return Checked(
        _strings(field_codes, field_words), _strings(reason_codes, reason_words), undecided
    )
