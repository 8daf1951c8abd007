"""Durations: strings like ``"250ms"``, ints (nanoseconds) or ``timedelta``, as int ns."""

from __future__ import annotations

import re
from datetime import timedelta

_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "min": 60 * 1_000_000_000,
    "h": 3_600 * 1_000_000_000,
    "d": 86_400 * 1_000_000_000,
}
_PATTERN = re.compile(r"^\s*(\d+)\s*(ns|us|µs|ms|s|min|m|h|d)\s*$")

Duration = str | int | timedelta


def duration_ns(value: object, argument: str) -> int:
    """Return ``value`` as a positive number of nanoseconds.

    Accepts ``"<int><unit>"`` with unit ns, us, ms, s, m (or min), h, d; a
    positive int (ns); or a positive ``datetime.timedelta`` (whole microseconds).
    Raises ``TypeError``/``ValueError`` naming ``argument`` otherwise.
    """
    if isinstance(value, bool):
        msg = f"{argument}: expected a duration (str, int ns or timedelta), got bool"
        raise TypeError(msg)
    if isinstance(value, str):
        match = _PATTERN.match(value)
        if match is None:
            msg = (
                f"{argument}: cannot parse duration {value!r}; "
                "write e.g. '500ns', '250ms', '10s', '5m', '1h' or '1d'"
            )
            raise ValueError(msg)
        ns = int(match.group(1)) * _UNIT_NS[match.group(2)]
    elif isinstance(value, int):
        ns = int(value)
    elif isinstance(value, timedelta):
        ns = (value.days * 86_400 + value.seconds) * 1_000_000_000 + value.microseconds * 1_000
    else:
        kind = type(value).__name__
        msg = f"{argument}: expected a duration (str, int ns or timedelta), got {kind}"
        raise TypeError(msg)
    if ns <= 0:
        msg = f"{argument}: duration must be positive, got {value!r}"
        raise ValueError(msg)
    if ns >= 2**62:
        msg = f"{argument}: duration {value!r} is too large (must be below 2**62 ns)"
        raise ValueError(msg)
    return ns


def duration_label(value: Duration) -> str:
    """The window as the caller wrote it, for column names (``sum_1h``)."""
    return value if isinstance(value, str) else str(value)
