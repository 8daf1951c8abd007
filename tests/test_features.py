"""Feature values of the example view vs DuckDB (an independent SQL engine) on the same events."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from duckdb_oracle import END_NS, EXAMPLE_SPEC, events_table, per_event_features

from featureflow import features
from featureflow.events import sample


def _assert_close(actual: pa.ChunkedArray, expected: pa.ChunkedArray, name: str) -> None:
    a = np.array(actual.to_pylist(), dtype=float)
    e = np.array(expected.to_pylist(), dtype=float)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=f"{name}: nulls differ")
    np.testing.assert_allclose(a, e, rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name)


@pytest.mark.parametrize(("n", "users", "seed"), [(3000, 40, 1), (500, 3, 2), (1, 1, 3)])
def test_event_features_equal_duckdb_range_windows(n: int, users: int, seed: int) -> None:
    events = events_table(sample.generate(n, users=users, seed=seed, end_ns=END_NS))
    ours = features.event_features(events, EXAMPLE_SPEC)
    oracle = per_event_features(events)
    assert ours.column_names[:2] == ["user_id", "event_ns"]
    assert ours.num_rows == n
    for aggregation in EXAMPLE_SPEC.aggregations:
        name = aggregation.output_name
        _assert_close(ours.column(name), oracle.column(name), name)


def test_latest_per_entity_takes_the_latest_event_and_the_later_row_on_ties() -> None:
    table = pa.table(
        {
            "user_id": [1, 2, 1, 1, 2],
            "event_ns": [5, 1, 9, 9, 0],
            "value": [10, 20, 30, 40, 50],
        }
    )
    latest = features.latest_per_entity(table, "user_id")
    assert latest.to_pydict() == {"user_id": [1, 2], "event_ns": [9, 1], "value": [40, 20]}
