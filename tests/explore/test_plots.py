"""The figures have the titles, UTC time axes, labels and artists they promise."""

from __future__ import annotations

import pyarrow as pa
import pytest
from duckdb_oracle import END_NS, EXAMPLE_SPEC
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from featureflow import explore as ex
from featureflow.explore import plots


@pytest.fixture(scope="module")
def events() -> pa.Table:
    return ex.from_generator(
        EXAMPLE_SPEC, 2000, users=30, seed=2, end_ns=END_NS, span_s=6 * 3600
    ).table


def test_distributions_one_histogram_per_feature(events: pa.Table) -> None:
    features = ex.view_features(events, EXAMPLE_SPEC)
    names = ["count_amount_600s", "sum_amount_600s", "std_amount_3600s", "max_amount_86400s"]
    figure = plots.feature_distributions(features, names, bins=20)
    assert isinstance(figure, Figure)
    visible = [ax for ax in figure.axes if ax.get_visible()]
    assert len(visible) == 4 and len(figure.axes) == 6
    for ax, name in zip(visible, names, strict=True):
        assert ax.get_title().startswith(name)
        assert len(ax.patches) == 20  # one bar per bin
        assert ax.get_ylabel() == "events"
    assert visible[0].get_xlabel() == "count_amount_600s (events)"
    assert "2,000 events" in figure.get_suptitle()


def test_feature_over_time_steps_above_events(events: pa.Table) -> None:
    features = ex.view_features(events, EXAMPLE_SPEC)
    user = ex.most_active(events, 1)[0]
    n = ex.entity_events(events, user).num_rows
    figure = plots.feature_over_time(
        events, features, user, ["sum_amount_600s", "max_amount_3600s"]
    )
    top, bottom = figure.axes
    assert [line.get_label() for line in top.get_lines()] == ["sum_amount_600s", "max_amount_3600s"]
    assert all(len(line.get_xdata()) == n for line in top.get_lines())
    assert f"user_id={user}" in top.get_title()
    assert bottom.get_xlabel() == "event time (UTC)"
    assert bottom.get_ylabel() == "amount (value units)"


def test_compared_windows_one_line_per_window(events: pa.Table) -> None:
    frame = ex.compare_windows(events, 1, "amount", "mean", ["10m", "1h", "6h"])
    figure = plots.compared_windows(frame, ["10m", "1h", "6h"], title="mean of user 1")
    (ax,) = figure.axes
    assert [line.get_label() for line in ax.get_lines()] == ["window 10m", "window 1h", "window 6h"]
    assert ax.get_title() == "mean of user 1" and ax.get_xlabel() == "event time (UTC)"


def test_session_timeline_one_bar_per_session(events: pa.Table) -> None:
    sessions = ex.entity_sessions(events, "10m", "amount")
    figure = plots.session_timeline(sessions, max_entities=5)
    (ax,) = figure.axes
    keys = sessions.column("user_id").to_pylist()
    first_five = list(dict.fromkeys(keys))[:5]
    bars = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bars) == 5
    assert sum(len(c.get_paths()) for c in bars) == sum(k in first_five for k in keys)
    assert [t.get_text() for t in ax.get_yticklabels()] == [str(k) for k in first_five]
    assert ax.get_ylabel() == "user_id" and ax.get_xlabel() == "event time (UTC)"


def test_late_event_share_bars_per_bucket(events: pa.Table) -> None:
    share = ex.late_share(events, "1h", "5m")
    figure = plots.late_event_share(share, bucket="1h", watermark_delay="5 min")
    (ax,) = figure.axes
    assert len(ax.patches) == 2 * len(share)  # out-of-order and late bar per bucket
    assert ax.get_ylabel() == "share of arriving events (%)"
    assert ax.get_xlabel() == "stream time at arrival (UTC)"
    assert f"of {events.num_rows:,} late" in ax.get_title()
