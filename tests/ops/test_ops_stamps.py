"""stamp_micros(): timestamp texts to epoch µs, against Python's re and datetime.

The oracle reads each text on its own with ``re.fullmatch`` and ``datetime`` (which
refuses a date that is not on the calendar), sharing no code with either backend.
Texts stray from the two forms at every position: fields out of range, a space or
``t`` for the ``T``, 7 fraction digits, zones without a colon, trailing newlines,
non-ASCII digits, nulls; arrays are sliced so they start at an offset.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import featureflow.ops as ops

MAX_MILLIS = 9_223_372_036_854
MILLIS = re.compile(r"-?[0-9]{1,15}")
RFC3339 = re.compile(
    r"(?P<date>(?:19|20|21)[0-9]{2}-[0-9]{2}-[0-9]{2})T(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?:\.(?P<fraction>[0-9]{1,6}))?(?P<zone>Z|[+-][0-9]{2}:[0-9]{2})"
)


def oracle(text: str | None, max_millis: int = MAX_MILLIS) -> int | None:
    if text is None:
        return None
    if MILLIS.fullmatch(text):
        millis = int(text)
        return millis * 1000 if abs(millis) <= max_millis else None
    found = RFC3339.fullmatch(text)
    if found is None:
        return None
    zone = found["zone"]
    offset = timedelta(0)
    if zone != "Z":
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 17 or minutes > 59:
            return None
        offset = (-1 if zone[0] == "-" else 1) * timedelta(hours=hours, minutes=minutes)
    try:
        when = datetime.fromisoformat(f"{found['date']}T{found['time']}").replace(
            tzinfo=timezone(offset))
    except ValueError:  # not on the calendar, or a field out of range
        return None
    whole = (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return whole + int((found["fraction"] or "0").ljust(6, "0"))


@st.composite
def rfc3339_like(draw: st.DrawFn) -> str:
    year = draw(st.integers(1890, 2210))
    month, day = draw(st.integers(0, 13)), draw(st.integers(0, 32))
    hour, minute, second = (draw(st.integers(0, 25)), draw(st.integers(0, 61)),
                            draw(st.integers(0, 61)))  # fmt: skip
    fraction = draw(st.sampled_from(["", "."])
                    | st.text("0123456789", min_size=1, max_size=8).map(lambda d: "." + d))
    zone = draw(
        st.sampled_from(["Z", "z", "", "+00:00", "-00:00", "UTC", "+0530", "Z\n", "+05:3"])
        | st.builds("{}{:02d}:{:02d}".format, st.sampled_from("+-"), st.integers(0, 19),
                    st.integers(0, 61))
    )  # fmt: skip
    separator = draw(st.sampled_from(["T", "T", "T", " ", "t"]))
    return (f"{year:04d}-{month:02d}-{day:02d}{separator}{hour:02d}:{minute:02d}:"
            f"{second:02d}{fraction}{zone}")  # fmt: skip


TEXTS = st.one_of(
    rfc3339_like(),
    st.integers(-(10**17), 10**17).map(str),
    st.integers(0, 10**6).map(lambda n: f"00{n}"),
    st.sampled_from(["-", "", "-0", "+1", "1 ", "1\n", "١٢٣", "9" * 16, "-" + "9" * 15]),
    st.text(max_size=24),
    st.none(),
)


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(TEXTS, max_size=60), skip=st.integers(0, 3))
@example(texts=["2024-02-29T23:59:59.123456+17:59", "2023-02-29T00:00:00Z",
                "1900-01-01T00:00:00Z", "2199-12-31T23:59:59.9Z"], skip=0)  # fmt: skip
def test_each_text_as_python_reads_it(texts: list[str | None], skip: int) -> None:
    stamps = pa.array(["1"] * skip + texts, pa.string()).slice(skip)
    micros, known = ops.stamp_micros(stamps, MAX_MILLIS)
    expected = [oracle(text) for text in texts]
    got = [int(m) if k else None for m, k in zip(micros, known, strict=True)]
    assert got == expected
    assert not micros[~known].any()  # unknown rows read as 0


def test_max_millis_bounds_the_epoch_millis() -> None:
    stamps = pa.array(["1000", "-1000", "1001", "-1001"], pa.string())
    micros, known = ops.stamp_micros(stamps, 1000)
    assert known.tolist() == [True, True, False, False]
    assert micros[:2].tolist() == [1_000_000, -1_000_000]


def test_empty_and_all_null() -> None:
    for stamps in (pa.array([], pa.string()), pa.array([None, None], pa.string())):
        micros, known = ops.stamp_micros(stamps, MAX_MILLIS)
        assert len(micros) == len(stamps) and not known.any()
        assert micros.dtype == np.int64


def test_texts_must_be_strings() -> None:
    with pytest.raises(TypeError, match="must be Arrow string"):
        ops.stamp_micros(pa.array([b"1"], pa.binary()), MAX_MILLIS)
