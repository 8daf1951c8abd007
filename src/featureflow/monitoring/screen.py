"""A :class:`~featureflow.monitoring.scrape.JobStatus` as a terminal screen of plain lines.

Laid out for 80 columns: one row per view (batches, events/s, batch duration,
freshness p50/p99, dead letters), then the consumer lag per topic and
partition, the watermark lag per view and partition, and the dead letters by
reason. Lines longer than the width are cut (with ``…``); lists of partitions
wrap instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from featureflow.monitoring.scrape import JobStatus, ViewStatus

WIDTH = 80
DASH = "–"
VIEW_COLUMNS = (
    # heading, width
    ("view", 20),
    ("batches", 8),
    ("events/s", 10),
    ("batch s", 9),
    ("fresh p50", 11),
    ("p99", 9),
    ("dead", 9),
)


def _number(value: float | None, digits: int = 0) -> str:
    return DASH if value is None else f"{value:,.{digits}f}"


def _seconds(value: float | None) -> str:
    if value is None:
        return DASH
    if value < 10:
        return f"{value:.2f} s"
    if value < 3600:
        return f"{value:,.0f} s"
    return f"{value / 3600:,.1f} h"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _view_row(view: ViewStatus) -> str:
    cells = (
        _cut(view.name, 20),
        f"{view.batches:,}",
        _number(view.events_per_s),
        _number(view.batch_duration_s, 2),
        _seconds(view.freshness_p50_s),
        _seconds(view.freshness_p99_s),
        f"{sum(view.dead_letters.values()):,}",
    )
    first, *rest = zip(cells, VIEW_COLUMNS, strict=True)
    return first[0].ljust(first[1][1]) + "".join(cell.rjust(w) for cell, (_, w) in rest)


def _wrapped(label: str, items: Iterable[str], width: int) -> list[str]:
    """``label`` then the items, as many a line as fit; an item is never split (only cut
    when it is wider than a line on its own)."""
    lines = [f"  {label}"]
    for item in items:
        if len(lines[-1]) + 2 + len(item) > width and lines[-1].strip() != label:
            lines.append("    " + item)
        else:
            lines[-1] += "  " + item
    return lines


def _section(title: str, items_by_view: dict[str, list[str]], width: int) -> list[str]:
    """A blank line, ``title`` and one wrapped line group per view with items; nothing
    when no view has any."""
    lines = []
    for view, items in items_by_view.items():
        if items:
            lines += _wrapped(f"{view}:", items, width)
    return ["", title, *lines] if lines else []


def render(status: JobStatus, *, clock: str = "", note: str = "", width: int = WIDTH) -> list[str]:
    """The screen's lines, none longer than ``width``."""
    lines = [f"featureflow status  {status.url}  {clock}".rstrip()]
    if note:
        lines.append(note)
    lines.append("")
    header = VIEW_COLUMNS[0][0].ljust(VIEW_COLUMNS[0][1]) + "".join(
        name.rjust(w) for name, w in VIEW_COLUMNS[1:]
    )
    lines.append(header)
    views = [status.views[name] for name in sorted(status.views)]
    lines.extend(_view_row(view) for view in views)
    if not views:
        lines.append("(no view has finished a micro-batch yet)")

    lines += ["", "consumer lag (records = latest offset - processed offset)"]
    if not status.consumer_lag:
        lines.append(f"  {DASH} (reported after the first micro-batch)")
    for topic in sorted(status.consumer_lag):
        partitions = status.consumer_lag[topic]
        lines += _wrapped(
            f"{topic}  total {status.total_lag(topic):,}:",
            (f"p{p} {records:,}" for p, records in sorted(partitions.items())),
            width,
        )

    lines += _section(
        "watermark lag (driver clock - partition watermark)",
        {
            view.name: [
                f"p{p} {_seconds(lag_s)}{' idle' if p in view.idle_partitions else ''}"
                for p, lag_s in sorted(view.watermark_lag_s.items())
            ]
            for view in views
        },
        width,
    )
    lines += _section(
        "dead letters by reason",
        {
            view.name: [
                f"{reason}: {count:,};"
                for reason, count in sorted(view.dead_letters.items(), key=lambda kv: -kv[1])
                if count
            ]
            for view in views
        },
        width,
    )
    return [_cut(line, width) for line in lines]
