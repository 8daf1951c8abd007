"""Explore computations against DuckDB (an independent SQL engine) and brute force."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from duckdb_oracle import END_NS, EXAMPLE_SPEC, FEATURE_NAMES, per_event_features
from hypothesis import given, settings
from hypothesis import strategies as st

from featureflow import explore as ex
from featureflow.errors import EventError
from featureflow.explore.load import OFFSET, PARTITION


@pytest.fixture(scope="module")
def events() -> pa.Table:
    return ex.from_generator(
        EXAMPLE_SPEC, 3000, users=40, seed=3, end_ns=END_NS, span_s=6 * 3600
    ).table


def _floats(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(column.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=float)


def test_view_features_equal_duckdb(events: pa.Table) -> None:
    got = ex.view_features(events, EXAMPLE_SPEC)
    want = per_event_features(events.select(["user_id", "event_ns", "amount"]))
    assert got.column("user_id").equals(events.column("user_id"))
    for name in FEATURE_NAMES:
        np.testing.assert_allclose(
            _floats(got.column(name)), _floats(want.column(name)), rtol=1e-9, atol=1e-9,
            equal_nan=True, err_msg=name,
        )  # fmt: skip


def test_window_features_and_compare_windows_equal_duckdb(events: pa.Table) -> None:
    con = duckdb.connect()
    con.register("events", events)
    frame = lambda w: (  # noqa: E731
        f"OVER (PARTITION BY user_id ORDER BY event_ns RANGE BETWEEN {w} PRECEDING AND CURRENT ROW)"
    )
    want = con.sql(
        f"SELECT count(amount) {frame(300 * 10**9)} AS c5, "
        f"max(amount) {frame(1800 * 10**9)} AS m30, row_number() OVER () AS r "
        "FROM events ORDER BY r"
    ).to_arrow_table()
    got = ex.window_features(events, "amount", ["5m", "30m"], ["count", "max"])
    assert got.column_names == ["user_id", "event_ns", "count_5m", "max_5m", "count_30m", "max_30m"]
    np.testing.assert_array_equal(_floats(got.column("count_5m")), _floats(want.column("c5")))
    np.testing.assert_array_equal(_floats(got.column("max_30m")), _floats(want.column("m30")))

    user = ex.most_active(events, 3)[2]
    compared = ex.compare_windows(events, user, "amount", "sum", ["10m", "1h"])
    mine = (
        con.sql(
            f"SELECT event_ns, sum(amount) {frame(600 * 10**9)} AS s10, "
            f"sum(amount) {frame(3600 * 10**9)} AS s60 FROM events WHERE user_id = {user} "
            "ORDER BY event_ns"
        )
        .to_arrow_table()
        .to_pandas()
    )
    assert list(compared.columns) == ["amount", "event_time", "10m", "1h"]
    assert str(compared["event_time"].dt.tz) == "UTC"
    np.testing.assert_array_equal(
        compared["event_time"].astype("int64").to_numpy(), mine["event_ns"].to_numpy()
    )
    np.testing.assert_allclose(compared["1h"], mine["s60"], rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(compared["10m"], mine["s10"], rtol=1e-12, equal_nan=True)


def test_sessions_split_where_gaps_exceed(events: pa.Table) -> None:
    gap_ns = 600 * 10**9
    sessions = ex.entity_sessions(events, "10m", "amount", ["count"]).to_pandas()
    assert list(sessions.columns[:3]) == ["user_id", "session_start", "session_end"]
    frame = events.to_pandas().sort_values(["user_id", "event_ns"])
    new_session = (frame["user_id"].diff() != 0) | (frame["event_ns"].diff() > gap_ns)
    assert len(sessions) == int(new_session.sum())
    assert int(sessions["count"].sum()) == int(frame["amount"].notna().sum())


def test_most_active_and_missing_entity(events: pa.Table) -> None:
    counts = events.to_pandas()["user_id"].value_counts()
    assert ex.most_active(events, 1) == [int(counts.idxmax())]
    with pytest.raises(EventError, match="no events of user_id=999999"):
        ex.entity_events(events, 999_999)
    with pytest.raises(EventError, match="'amount'"):
        ex.view_features(events.drop_columns(["amount"]), EXAMPLE_SPEC)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10_000)), min_size=1, max_size=60),
    st.integers(0, 3000),
)
def test_arrival_flags_equal_brute_force(rows: list[tuple[int, int]], delay: int) -> None:
    table = pa.table(
        {
            "event_ns": pa.array([t for _, t in rows], pa.int64()),
            PARTITION: pa.array([p for p, _ in rows], pa.int32()),
            OFFSET: pa.array(range(len(rows)), pa.int64()),
        }
    )
    flags = ex.arrival_flags(table, delay).to_pydict()
    for i, (partition, t) in enumerate(rows):
        before = [u for p, u in rows[:i] if p == partition]
        prior = max(before) if before else None
        assert flags["out_of_order"][i] == (prior is not None and t < prior)
        assert flags["late"][i] == (prior is not None and t < prior - delay)
        assert flags["stream_ns"][i] == max([t, *before])


def test_late_share_counts_add_up(events: pa.Table) -> None:
    share = ex.late_share(events, "1h", "5m")
    flags = ex.arrival_flags(events, "5m").to_pandas()
    assert int(share["events"].sum()) == events.num_rows
    assert int(share["late"].sum()) == int(flags["late"].sum()) > 0
    assert (share["late_share"] <= share["out_of_order_share"]).all()
    assert str(share["bucket_start"].dt.tz) == "UTC"
    assert (share["bucket_start"].astype("int64") % (3600 * 10**9) == 0).all()
