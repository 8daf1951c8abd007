"""The time range of a backfill: ``[start_ns, end_ns)`` in epoch ns, and the days it touches."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from featureflow.columns import NS_PER_DAY
from featureflow.errors import JobError
from featureflow.repo import StreamViewSpec


def parse_instant(text: str, option: str) -> int:
    """Epoch ns of an ISO 8601 date or date-time (``2026-11-29``, ``2026-11-29T06:00:00Z``).

    A value without a zone is UTC.

    Raises:
        JobError: naming the option and the accepted forms.
    """
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        msg = (
            f"{option} {text!r} is not an ISO 8601 date or date-time; "
            "use e.g. 2026-11-29 or 2026-11-29T06:00:00Z"
        )
        raise JobError(msg) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def day_label(day: int) -> str:
    """``YYYY-MM-DD`` of day number ``day`` (days since the epoch, UTC)."""
    return datetime.fromtimestamp(day * 86_400, UTC).date().isoformat()


SESSION_CONTEXT_NS = NS_PER_DAY
"""How far before the range a session view's backfill reads at least (its max session
length if longer): a session that ends in the range started at most a max length
before it. The sessions start at the first events read: a chain of events never a gap
apart across that point can be cut at other places than the stream job cut it."""


def context_ns(spec: StreamViewSpec) -> int:
    """How far before the range start the events that fill its features can lie, ns.

    Rolling frame ``[t - W, t]``: the largest window (a tiled frame starts up
    to one hop earlier, see ``StreamViewSpec.state_horizon_ns``). Session
    view: :data:`SESSION_CONTEXT_NS`, or its max session length if longer.
    """
    if spec.is_session_view:
        return max(SESSION_CONTEXT_NS, spec.state_horizon_ns)
    return spec.state_horizon_ns


def lookahead_ns(spec: StreamViewSpec) -> int:
    """How far after the range end events still change the rows of the range, ns.

    Rolling: none (a frame ends at its own event). Session view: the gap — a
    session whose last event is before the end is final only when no event
    follows within the gap.
    """
    return spec.session_gap_ns or 0


@dataclass(frozen=True)
class TimeRange:
    """Event times ``start_ns <= t < end_ns`` (epoch ns, UTC): the events a backfill emits."""

    start_ns: int
    end_ns: int

    def __post_init__(self) -> None:
        if self.end_ns <= self.start_ns:
            msg = f"the backfill range is empty: --end must be after --start ({self})"
            raise JobError(msg)

    @classmethod
    def parse(cls, start: str, end: str) -> TimeRange:
        return cls(parse_instant(start, "--start"), parse_instant(end, "--end"))

    @property
    def days(self) -> range:
        """Day numbers (since the epoch, UTC) that the range overlaps."""
        return range(self.start_ns // NS_PER_DAY, (self.end_ns - 1) // NS_PER_DAY + 1)

    def covers_day(self, day: int) -> bool:
        """Whether the whole of ``day`` lies in the range."""
        return self.start_ns <= day * NS_PER_DAY and (day + 1) * NS_PER_DAY <= self.end_ns

    def __str__(self) -> str:
        def text(ns: int) -> str:
            return datetime.fromtimestamp(ns / 1e9, UTC).isoformat()

        return f"[{text(self.start_ns)}, {text(self.end_ns)})"
