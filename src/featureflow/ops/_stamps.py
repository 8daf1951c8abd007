"""Timestamp texts to epoch microseconds, in numpy: the reference of ``stamps.mojo``.

What is read, and why exactly these texts, is :mod:`featureflow.events.timestamps`'
to say; this module reads them a whole Arrow string column at a time: two RE2
matches (Arrow's ``match_substring_regex``), then the fields of the matching texts
from Arrow's bytes in place.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

EPOCH_MILLIS = r"^-?[0-9]{1,15}$"
RFC3339_ZONED = (
    r"^(19|20|21)[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
"""The texts read (RE2 syntax); their fields are range-checked after."""

_MICROS_PER_S = 1_000_000


def stamp_micros(stamps: pa.StringArray, max_millis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per text: epoch microseconds (int64, 0 where unknown) and whether it was read."""
    n = len(stamps)
    micros = np.zeros(n, np.int64)
    known = np.zeros(n, np.bool_)
    if n == 0:
        return micros, known
    millis_rows = _matching(stamps, EPOCH_MILLIS)
    if millis_rows.size:
        millis = pc.cast(stamps.take(pa.array(millis_rows)), pa.int64()).to_numpy()
        in_range = np.abs(millis) <= max_millis
        micros[millis_rows[in_range]] = millis[in_range] * 1000
        known[millis_rows[in_range]] = True
    rfc_rows = _matching(stamps, RFC3339_ZONED)
    if rfc_rows.size:
        values, valid = _rfc3339_micros(stamps, rfc_rows)
        micros[rfc_rows[valid]] = values[valid]
        known[rfc_rows[valid]] = True
    return micros, known


def _matching(stamps: pa.Array, pattern: str) -> np.ndarray:
    """Row numbers (int64) of the non-null texts that match ``pattern``."""
    matches = pc.fill_null(pc.match_substring_regex(stamps, pattern), False)
    return np.flatnonzero(matches.to_numpy(zero_copy_only=False))


def _rfc3339_micros(stamps: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Epoch µs of the texts at ``rows`` (each matches :data:`RFC3339_ZONED`) and whether
    each is a real instant; read from Arrow's bytes in place."""
    offsets = np.frombuffer(stamps.buffers()[1], np.int32)[stamps.offset :]
    data = np.frombuffer(stamps.buffers()[2], np.uint8)
    starts, ends = offsets[rows], offsets[rows + 1]
    # "YYYY-MM-DDTHH:MM:SS" is the first 19 bytes of every matching text
    year, month, day = (
        _number(data, starts, 4),
        _number(data, starts + 5, 2),
        _number(data, starts + 8, 2),
    )
    hour, minute = _number(data, starts + 11, 2), _number(data, starts + 14, 2)
    second = _number(data, starts + 17, 2)
    # the zone: "Z", or "±HH:MM" in the last 6 bytes
    zulu = data[ends - 1] == ord("Z")
    zone_sign = np.where(data[ends - 6] == ord("-"), -1, 1)
    zone_hours = np.where(zulu, 0, _number(data, ends - 5, 2))
    zone_minutes = np.where(zulu, 0, _number(data, ends - 2, 2))
    # the fraction: the digits between the '.' (byte 19) and the zone, padded to 6
    digits = np.where(data[starts + 19] == ord("."), ends - np.where(zulu, 1, 6) - starts - 20, 0)
    fraction = np.zeros(len(rows), np.int64)
    for place in range(6):
        inside = place < digits
        digit = data[np.where(inside, starts + 20 + place, starts)] - np.uint8(ord("0"))
        fraction = fraction * 10 + np.where(inside, digit, 0)
    valid = (
        (month >= 1) & (month <= 12) & (day >= 1) & (day <= _days_in_month(year, month))
        & (hour <= 23) & (minute <= 59) & (second <= 59)
        & (zone_hours <= 17) & (zone_minutes <= 59)
    )  # fmt: skip
    seconds = (
        _days_from_civil(year, np.clip(month, 1, 12), day) * 86_400
        + hour * 3600 + minute * 60 + second
        - zone_sign * (zone_hours * 3600 + zone_minutes * 60)
    )  # fmt: skip
    return seconds * _MICROS_PER_S + fraction, valid


def _number(data: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """The decimal number (int64) of the ``width`` ASCII digits at each of ``positions``."""
    value = np.zeros(len(positions), np.int64)
    for place in range(width):
        value = value * 10 + (data[positions + place] - np.uint8(ord("0")))
    return value


def _days_in_month(year: np.ndarray, month: np.ndarray) -> np.ndarray:
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    days = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)
    return days[np.clip(month, 1, 12) - 1] + (leap & (month == 2))


def _days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's ``days_from_civil``)."""
    y = year - (month <= 2)
    era = np.floor_divide(y, 400)
    year_of_era = y - era * 400
    day_of_year = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468
