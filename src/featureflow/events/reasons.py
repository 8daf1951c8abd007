"""Why a Kafka record can't be used: the reasons a dead letter carries, in one place.

The stream job's parser (:mod:`featureflow.spark.parse`) and the notebook
loader (:mod:`featureflow.explore.load`) check records in the same order and
name the first failing check with these words, so a notebook skips exactly
the records the job dead-letters (and metrics count them under one name).
"""

from __future__ import annotations

NOT_JSON_OBJECT = "not a JSON object"
MISSING_KEY = "missing or null entity key"
KEY_NOT_INTEGER = "entity key is not an integer"
MISSING_TIMESTAMP = "missing or null event timestamp"
NOT_A_TIMESTAMP = "not an RFC 3339 timestamp or epoch milliseconds"
OUT_OF_RANGE = "outside the years 1677-2262 (not representable in epoch nanoseconds)"
NOT_FINITE = "not a finite number"

MAX_ABS_MILLIS = (2**63 - 1) // 1_000_000
"""Epoch milliseconds whose nanoseconds still fit in int64 (about +-292 years from 1970)."""


def wrong_type(ddl_type: str) -> str:
    """A declared field present with a value of another type (``not a valid double``)."""
    return f"not a valid {ddl_type}"
