"""matplotlib figures of events and features, readable by default.

Every function returns a new :class:`matplotlib.figure.Figure` (no pyplot
global state: nothing is shown or kept unless the caller does so; Jupyter
displays a returned Figure). Time axes are event time in UTC; axis labels
carry units.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from featureflow.explore.compute import entity_events
from featureflow.explore.load import with_event_time

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTH_IN = 10.0
"""Figure width, inches: readable in a notebook and in the README."""


def _figure(
    height_in: float,
    rows: int = 1,
    cols: int = 1,
    *,
    sharex: bool = False,
    height_ratios: Sequence[float] | None = None,
) -> tuple[Figure, np.ndarray]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH_IN, height_in), layout="constrained", dpi=100)
    axes = figure.subplots(rows, cols, squeeze=False, sharex=sharex, height_ratios=height_ratios)
    return figure, axes


def _utc_time_axis(axes: Axes, label: str = "event time (UTC)") -> None:
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(tz="UTC")
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz="UTC"))
    axes.set_xlabel(label)


def _unit(feature: str) -> str:
    """Axis unit of a feature named by Feast (``count_amount_600s``) or ops (``count_10m``)."""
    function = feature.split("_", 1)[0]
    return "events" if function in ("count", "count_distinct") else "value units"


def feature_distributions(
    features: pa.Table | pd.DataFrame, names: Sequence[str], *, bins: int = 50, cols: int = 3
) -> Figure:
    """One histogram per feature (nulls left out and counted in the title)."""
    frame = features.to_pandas() if isinstance(features, pa.Table) else features
    rows = -(-len(names) // cols)
    figure, axes = _figure(2.6 * rows, rows, cols)
    for index, ax in enumerate(axes.flat):
        if index >= len(names):
            ax.set_visible(False)
            continue
        name = names[index]
        values = frame[name].to_numpy(dtype=float, na_value=np.nan)
        present = values[~np.isnan(values)]
        ax.hist(present, bins=bins, color="tab:blue", alpha=0.85)
        ax.set_title(
            f"{name}\n{len(present):,} values, {len(values) - len(present):,} null", fontsize=9
        )
        ax.set_xlabel(f"{name} ({_unit(name)})", fontsize=8)
        ax.set_ylabel("events", fontsize=8)
        ax.tick_params(labelsize=8)
    figure.suptitle(f"Feature distributions over {len(frame):,} events")
    return figure


def feature_over_time(
    events: pa.Table,
    features: pa.Table,
    entity: int,
    names: Sequence[str],
    *,
    value_column: str = "amount",
    key: str = "user_id",
) -> Figure:
    """Features of one entity at each of its events (steps), above the events themselves.

    ``features`` has one row per event (:func:`~featureflow.explore.compute.view_features`
    or :func:`~featureflow.explore.compute.window_features`).
    """
    mine = with_event_time(entity_events(features, entity, key=key).to_pandas())
    raw = with_event_time(entity_events(events, entity, key=key).to_pandas())
    figure, axes = _figure(6.0, 2, 1, sharex=True, height_ratios=[3, 1])
    top, bottom = axes[0, 0], axes[1, 0]
    for name in names:
        top.step(mine["event_time"], mine[name], where="post", label=name)
    top.set_ylabel(", ".join(sorted({_unit(n) for n in names})))
    top.set_title(f"Features of {key}={entity} at each of its {len(raw):,} events")
    top.legend(loc="upper left", fontsize=8)
    top.grid(alpha=0.3)
    present = raw[value_column].notna()
    bottom.vlines(raw["event_time"][present], 0, raw[value_column][present], color="tab:gray")
    bottom.plot(raw["event_time"][present], raw[value_column][present], "o", ms=3, color="tab:gray")
    bottom.set_ylabel(f"{value_column} (value units)")
    bottom.set_title(f"events of {key}={entity} ({int((~present).sum())} with null {value_column})",
                     fontsize=9)  # fmt: skip
    _utc_time_axis(bottom)
    return figure


def compared_windows(frame: pd.DataFrame, windows: Sequence[str], *, title: str) -> Figure:
    """Lines of :func:`~featureflow.explore.compute.compare_windows`: one per window."""
    figure, axes = _figure(4.0)
    ax = axes[0, 0]
    for window in windows:
        ax.step(frame["event_time"], frame[str(window)], where="post", label=f"window {window}")
    ax.set_title(title)
    ax.set_ylabel("aggregate (value units)")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    _utc_time_axis(ax)
    return figure


def session_timeline(sessions: pa.Table, *, key: str = "user_id", max_entities: int = 20) -> Figure:
    """One horizontal bar per session per entity, from its first event to its end (last + gap).

    ``sessions`` is :func:`~featureflow.explore.compute.entity_sessions` output;
    the first ``max_entities`` entities (in key order) are drawn.
    """
    import matplotlib.dates as mdates

    frame = sessions.to_pandas()
    entities = list(dict.fromkeys(frame[key].tolist()))[:max_entities]
    figure, axes = _figure(max(3.0, 0.3 * len(entities) + 1.5))
    ax = axes[0, 0]
    for row, entity in enumerate(entities):
        mine = frame[frame[key] == entity]
        starts = mdates.date2num(mine["session_start"].dt.tz_convert("UTC").dt.tz_localize(None))
        ends = mdates.date2num(mine["session_end"].dt.tz_convert("UTC").dt.tz_localize(None))
        ax.broken_barh(
            list(zip(starts, ends - starts, strict=True)), (row - 0.35, 0.7),
            facecolors="tab:green", edgecolors="darkgreen", linewidth=0.5,
        )  # fmt: skip
    ax.set_yticks(range(len(entities)), [str(e) for e in entities])
    ax.set_ylim(-0.6, len(entities) - 0.4)
    ax.invert_yaxis()
    ax.set_ylabel(key)
    shown = int(frame[key].isin(entities).sum())
    ax.set_title(
        f"Sessions of {len(entities)} entities ({shown:,} sessions; bar = first event to end)"
    )
    ax.xaxis_date(tz="UTC")
    _utc_time_axis(ax)
    ax.grid(axis="x", alpha=0.3)
    return figure


def late_event_share(share: pd.DataFrame, *, bucket: str, watermark_delay: str) -> Figure:
    """Bars of :func:`~featureflow.explore.arrival.late_share`: % out of order and % late."""
    figure, axes = _figure(4.0)
    ax = axes[0, 0]
    starts = share["bucket_start"].dt.tz_convert("UTC").dt.tz_localize(None)
    width = (starts.diff().min() if len(starts) > 1 else np.timedelta64(1, "h")) * 0.9
    ax.bar(starts, 100 * share["out_of_order_share"], width=width, align="edge",
           color="tab:orange", label="out of order (behind the stream time)")  # fmt: skip
    ax.bar(starts, 100 * share["late_share"], width=width, align="edge",
           color="tab:red", label=f"late (over {watermark_delay} behind: dropped)")  # fmt: skip
    ax.set_ylim(0, 100 * max(float(share["out_of_order_share"].max()), 0.01) * 1.35)
    ax.set_ylabel("share of arriving events (%)")
    total = int(share["events"].sum())
    late = int(share["late"].sum())
    ax.set_title(f"Out-of-order and late events per {bucket} of stream time "
                 f"({late:,} of {total:,} late)")  # fmt: skip
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.xaxis_date(tz="UTC")
    _utc_time_axis(ax, "stream time at arrival (UTC)")
    return figure
