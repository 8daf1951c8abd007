"""The Avro encoder of sample events, decoded by Spark's own ``from_avro`` (the oracle)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from featureflow.events.avro import TRANSACTION_SCHEMA, encode_long, encode_transaction

pytestmark = pytest.mark.integration

events = st.lists(
    st.tuples(
        st.integers(-(2**63), 2**63 - 1),
        st.one_of(st.none(), st.floats(allow_nan=False)),
        st.text(max_size=12),
        st.integers(-(2**62), 2**62),
    ),
    min_size=1,
    max_size=30,
)


def test_zigzag_varints_match_the_avro_spec_examples() -> None:
    # From the Avro specification's table of zig-zag encodings.
    assert [encode_long(v) for v in (0, -1, 1, -2, 2, -64, 64)] == [
        b"\x00", b"\x01", b"\x02", b"\x03", b"\x04", b"\x7f", b"\x80\x01",
    ]  # fmt: skip


@settings(max_examples=15, deadline=None)
@given(rows=events)
def test_spark_from_avro_decodes_what_we_encode(spark, rows) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    frame = spark.createDataFrame(
        [(encode_transaction(*row),) for row in rows], "value binary"
    ).select(from_avro(F.col("value"), TRANSACTION_SCHEMA, {"mode": "FAILFAST"}).alias("r"))
    decoded = [tuple(r["r"]) for r in frame.collect()]
    for (user, amount, merchant, millis), got in zip(rows, decoded, strict=True):
        assert got[0] == user and got[2] == merchant and got[3] == millis
        assert (got[1] is None) if amount is None else math.isclose(got[1], amount, rel_tol=0)
