"""Column names and time units that every layer shares (one home, no copies).

Event times travel between the layers as int64 epoch nanoseconds (UTC) in the
column :data:`EVENT_NS`; durations are int nanoseconds unless a name says
otherwise (``_s``: seconds, ``_ms``: milliseconds, ``_us``: microseconds).
"""

from __future__ import annotations

EVENT_NS = "event_ns"
"""Event time as int64 epoch nanoseconds (UTC): what the kernels read and the state keeps."""

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
NS_PER_DAY = 86_400 * NS_PER_S
