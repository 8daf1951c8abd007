"""Timestamp texts read in Arrow are read exactly as Spark reads them, and the usual forms
are read there (not left to Spark)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from featureflow.events.timestamps import event_micros
from featureflow.spark.parse import timestamp_read_in_spark

pytestmark = pytest.mark.integration


@st.composite
def _rfc3339_like(draw: st.DrawFn) -> str:
    """Texts of RFC 3339's shape whose fields stray out of range now and then."""
    year = draw(st.integers(1890, 2210))
    month, day = draw(st.integers(0, 13)), draw(st.integers(0, 32))
    hour, minute, second = draw(st.integers(0, 25)), draw(st.integers(0, 61)), draw(
        st.integers(0, 61))  # fmt: skip
    fraction = draw(st.sampled_from(["", "."]) | st.text("0123456789", min_size=1, max_size=9)
                    .map(lambda digits: "." + digits))  # fmt: skip
    zone = draw(
        st.sampled_from(["Z", "z", "", "+00:00", "-00:00", "UTC", "+0530"])
        | st.builds(
            "{}{:02d}:{:02d}".format, st.sampled_from("+-"), st.integers(0, 19), st.integers(0, 61)
        )
    )
    separator = draw(st.sampled_from(["T", "T", "T", " ", "t"]))
    date = f"{year:04d}-{month:02d}-{day:02d}"
    return f"{date}{separator}{hour:02d}:{minute:02d}:{second:02d}{fraction}{zone}"


_stamps = st.one_of(
    _rfc3339_like(),
    st.integers(-(10**17), 10**17).map(str),
    st.integers(0, 10**6).map(lambda n: f"00{n}"),
    st.text(max_size=12),
    st.none(),
)


def _spark_micros(spark, stamps: list[str | None]) -> list[int | None]:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(i, s) for i, s in enumerate(stamps)], "i int, s string")
    event_ts, _, _ = timestamp_read_in_spark(F.col("s"))
    rows = frame.select("i", F.unix_micros(event_ts).alias("micros")).collect()
    return [row["micros"] for row in sorted(rows, key=lambda row: row["i"])]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(stamps=st.lists(_stamps, min_size=1, max_size=80))
@example(
    stamps=[
        "2024-02-29T23:59:59.999999+17:59", "2023-02-29T00:00:00Z", "1900-01-01T00:00:00-00:01",
        "2199-12-31T23:59:59.1Z", "9223372036854", "-9223372036854", "9223372036855",
        "1969-12-31T23:59:59.5Z", "2026-12-02T10:00:60Z", "2026-12-02T10:00:00.1234567Z",
    ]
)  # fmt: skip
def test_what_arrow_reads_spark_reads_alike(spark, stamps: list[str | None]) -> None:  # type: ignore[no-untyped-def]
    arrow = event_micros(pa.array(stamps, pa.string())).to_pylist()
    spark_read = _spark_micros(spark, stamps)
    for stamp, ours, theirs in zip(stamps, arrow, spark_read, strict=True):
        if ours is not None:  # left to Spark otherwise
            assert ours == theirs, (stamp, ours, theirs)


def test_the_usual_forms_are_read_in_arrow() -> None:
    usual = ["2026-12-02T10:00:00.123Z", "2026-12-02T10:00:00Z", "2026-12-02T11:00:00+01:00",
             "2026-12-02T04:30:00.000001-05:30", "1796205600123", "-1", "0"]  # fmt: skip
    assert event_micros(pa.array(usual)).to_pylist() == [
        1_796_205_600_123_000, 1_796_205_600_000_000, 1_796_205_600_000_000,
        1_796_205_600_000_001, 1_796_205_600_123_000, -1000, 0,
    ]  # fmt: skip
    # what Spark reads in its own way, or refuses, is left to it
    others = ["2026-12-02 10:00:00Z", "2026-12-02T10:00:00", "2026-12-02", "2026-02-30T00:00:00Z",
              "2026-12-02T10:00:00.1234567Z", "9999999999999999", "x", None]  # fmt: skip
    assert event_micros(pa.array(others, pa.string())).null_count == len(others)
    chunked = pa.chunked_array([pa.array(usual[:2]), pa.array(usual[2:])])
    assert event_micros(chunked).to_pylist() == event_micros(pa.array(usual)).to_pylist()
