"""Feature schema of the Feast session view `user_sessions`.

One row per user: the user's latest session (events at most 30 minutes
apart). `event_timestamp` is the time of the session's last event. Bump
VERSION with every change (see docs/schema-gate.md).
"""

from featureflow_schema import EntityKey, EventTimestamp, Timestamp


struct UserSessions:
    """One row of `user_sessions`: entity key, event timestamp, session features."""

    comptime VIEW = "user_sessions"
    comptime VERSION = "1.0.0"

    var user_id: EntityKey[Int64]
    var event_timestamp: EventTimestamp["us", "UTC"]
    var session_start: Timestamp["us", "UTC"]
    var session_duration_s: Float64
    var session_events: Int64
    var session_amount_sum: Float64
    var session_amount_mean: Float64
    var session_amount_max: Float64
