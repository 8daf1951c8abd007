"""The no-skew check: features computed here equal the stream job's offline history, per event.

The stream job computes each event's features in the micro-batch that
accepted it, over the events of that entity it had accepted by then (earlier
batches, kept as state, and the same batch). The check replays exactly that
from raw events:

1. match every history row to a loaded event by (join key, event time),
   duplicates paired in arrival order; loaded events without a history row
   were not accepted by the job (later than the watermark, or unusable) and
   take no part, as in the job;
2. for each micro-batch ``b``: compute the view's features with
   :func:`featureflow.features.event_features` over the matched events of
   batches ``<= b`` (of the entities batch ``b`` touched, from the earliest
   time any of its frames reaches), and compare batch ``b``'s rows with the
   history, feature by feature (nulls equal nulls; floats within
   ``rtol``/``atol``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from featureflow.columns import EVENT_NS
from featureflow.errors import FeatureflowError
from featureflow.explore.compute import view_features
from featureflow.explore.load import BATCH, OFFSET, PARTITION
from featureflow.repo import StreamViewSpec

if TYPE_CHECKING:
    import pandas as pd

MAX_LISTED = 1000
"""Mismatching values listed in a report (all are counted)."""


class SkewError(FeatureflowError):
    """Features computed from the events differ from the stream job's history."""


@dataclass(frozen=True)
class SkewReport:
    """Outcome of :func:`check_no_skew`."""

    view: str
    compared: int  # events compared (history rows matched to a loaded event)
    batches: int  # micro-batches replayed
    not_accepted: int  # loaded events without a history row (dropped by the job): not compared
    unmatched: int  # history rows without a loaded event: the load missed events
    mismatched_values: int  # (event, feature) values that differ
    max_abs_diff: dict[str, float] = field(default_factory=dict)  # per feature, over matched rows
    mismatches: pd.DataFrame | None = None  # up to MAX_LISTED differing values

    @property
    def ok(self) -> bool:
        """Every history row was recomputed, and every value is equal."""
        return self.compared > 0 and self.unmatched == 0 and self.mismatched_values == 0

    def __str__(self) -> str:
        verdict = "no skew" if self.ok else "SKEW"
        lines = [
            f"{verdict}: view {self.view!r}, {self.compared:,} events in {self.batches} "
            f"micro-batch(es) compared; {self.mismatched_values:,} values differ; "
            f"{self.unmatched:,} history rows without a loaded event; "
            f"{self.not_accepted:,} loaded events the job did not accept (not compared)"
        ]
        if self.compared == 0:
            lines.append("nothing was compared: are the events and the history of the same run?")
        if self.max_abs_diff:
            worst = max(self.max_abs_diff, key=lambda name: self.max_abs_diff[name])
            lines.append(f"largest difference: {self.max_abs_diff[worst]:.3g} ({worst})")
        return "\n".join(lines)

    def raise_if_skewed(self) -> None:
        """Raise :class:`SkewError` with the summary unless :attr:`ok`."""
        if not self.ok:
            msg = (
                f"{self}\nload every event of the job's topic (from_kafka with max_events=None) "
                "and the history of the same run"
            )
            raise SkewError(msg)


def check_no_skew(
    events: pa.Table,
    history: pa.Table,
    spec: StreamViewSpec,
    *,
    rtol: float = 1e-9,
    atol: float = 1e-9,
) -> SkewReport:
    """Recompute the stream job's per-event history from raw ``events`` and compare.

    Args:
        events: loaded events (:mod:`featureflow.explore.load`): join key,
            ``event_ns``, value columns, ``partition``, ``offset``.
        history: :func:`featureflow.explore.load.history` of the same run.
        spec: the view the job computed.
    """
    import pandas as pd

    if spec.is_session_view:
        msg = f"{spec.name!r} is a session view: the per-event check covers rolling views only"
        raise SkewError(msg)
    loaded = pd.DataFrame(
        {
            "key": events.column(spec.join_key).to_numpy(),
            "ns": events.column(EVENT_NS).to_numpy(),
            "row": np.arange(events.num_rows),
            "p": events.column(PARTITION).to_numpy(),
            "o": events.column(OFFSET).to_numpy(),
        }
    ).sort_values(["p", "o"], kind="stable")
    written = pd.DataFrame(
        {
            "key": history.column(spec.join_key).to_numpy(),
            "ns": history.column(EVENT_NS).to_numpy(),
            "batch": history.column(BATCH).to_numpy(),
            "hist_row": np.arange(history.num_rows),
        }
    ).sort_values("batch", kind="stable")
    for frame in (loaded, written):
        frame["dup"] = frame.groupby(["key", "ns"]).cumcount()
    matched = loaded.merge(written, on=["key", "ns", "dup"], how="inner")

    names = list(spec.feature_names)
    max_diff = dict.fromkeys(names, 0.0)
    listed: list[pd.DataFrame] = []
    mismatched = 0
    largest_window = max(spec.windows_ns)
    batches = np.unique(matched["batch"].to_numpy())
    for batch in batches:
        members = matched[matched["batch"] == batch]
        earliest = int(members["ns"].min()) - largest_window
        pool = matched[
            (matched["batch"] <= batch)
            & matched["key"].isin(members["key"].unique())
            & (matched["ns"] >= earliest)
        ]
        computed = view_features(events.take(pa.array(pool["row"].to_numpy())), spec)
        mine = np.flatnonzero(pool["batch"].to_numpy() == batch)
        hist_rows = pool["hist_row"].to_numpy()[mine]
        for name in names:
            got = _floats(computed.column(name))[mine]
            want = _floats(history.column(name))[hist_rows]
            both_null = np.isnan(got) & np.isnan(want)
            equal = both_null | np.isclose(got, want, rtol=rtol, atol=atol)
            diff = np.abs(got - want)[~both_null]
            if diff.size:
                max_diff[name] = max(max_diff[name], float(np.nan_to_num(diff, nan=np.inf).max()))
            bad = np.flatnonzero(~equal)
            mismatched += bad.size
            if bad.size and sum(len(f) for f in listed) < MAX_LISTED:
                listed.append(
                    pd.DataFrame(
                        {
                            spec.join_key: pool["key"].to_numpy()[mine][bad],
                            EVENT_NS: pool["ns"].to_numpy()[mine][bad],
                            BATCH: batch,
                            "feature": name,
                            "notebook": got[bad],
                            "stream_job": want[bad],
                        }
                    )
                )
    return SkewReport(
        view=spec.name,
        compared=len(matched),
        batches=len(batches),
        not_accepted=len(loaded) - len(matched),
        unmatched=len(written) - len(matched),
        mismatched_values=mismatched,
        max_abs_diff=max_diff,
        mismatches=pd.concat(listed).head(MAX_LISTED) if listed else None,
    )


def _floats(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """float64 values with NaN for nulls."""
    return np.asarray(column.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
