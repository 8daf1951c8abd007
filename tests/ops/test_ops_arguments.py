"""Bad arguments raise TypeError/ValueError naming the argument."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

import featureflow.ops as ops
from featureflow.ops._durations import duration_ns

TS = np.array([0, 1, 2], dtype=np.int64)
VALS = pa.array([1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("500ns", 500),
        ("250ms", 250_000_000),
        ("10s", 10**10),
        ("5m", 3 * 10**11),
        ("1h", 3_600 * 10**9),
        ("1d", 86_400 * 10**9),
        (7, 7),
        (timedelta(milliseconds=3), 3_000_000),
    ],
)
def test_durations(text: object, ns: int) -> None:
    assert duration_ns(text, "w") == ns


@pytest.mark.parametrize(
    ("kwargs", "error", "argument"),
    [
        ({"windows": "1 hour"}, ValueError, "windows"),
        ({"windows": "0s"}, ValueError, "windows"),
        ({"windows": -5}, ValueError, "windows"),
        ({"windows": 1.5}, TypeError, "windows"),
        ({"windows": []}, ValueError, "windows"),
        ({"windows": ["1s", "1s"]}, ValueError, "windows"),
        ({"aggs": ["median"]}, ValueError, "aggs"),
        ({"aggs": []}, TypeError, "aggs"),
        ({"aggs": [1]}, TypeError, "aggs"),
        ({"values": pa.array([1.0, 2.0])}, ValueError, "values"),
        ({"values": pa.array(["a", "b", "c"])}, TypeError, "values"),
        ({"values": pa.array([1, 2, 3], pa.int16())}, TypeError, "values"),
        ({"values": pa.array([2**60, 1, 1])}, ValueError, "values"),
        ({"values": [1.0, 2.0, 3.0]}, TypeError, "values"),
        ({"ts": pa.array([0, None, 2], pa.int64())}, ValueError, "ts"),
        ({"ts": pa.array([0.0, 1.0, 2.0])}, TypeError, "ts"),
        ({"keys": pa.array([1, 2])}, ValueError, "keys"),
        ({"keys": pa.array([1.0, 2.0, 3.0])}, TypeError, "keys"),
        ({"hop": "soon"}, ValueError, "hop"),
    ],
)
def test_bad_arguments_name_the_argument(
    kwargs: dict[str, object], error: type[Exception], argument: str
) -> None:
    call: dict[str, object] = {"ts": TS, "values": VALS, "windows": "1s", "aggs": ["sum"]}
    call.update(kwargs)
    with pytest.raises(error, match=argument):
        ops.rolling(**call)  # type: ignore[arg-type]
