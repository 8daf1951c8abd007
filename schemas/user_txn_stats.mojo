"""Feature schema of the Feast feature view `user_txn_stats`.

The reviewed contract between the stream job and the Feast registry:
`featureflow validate` and `featureflow apply` refuse any drift from it.
Bump VERSION with every change; removing or re-typing a field needs a
major bump (see docs/schema-gate.md).
"""

from featureflow_schema import EntityKey, EventTimestamp, Timestamp


struct UserTxnStats:
    """One row of `user_txn_stats`: entity keys, event timestamp, features."""

    comptime VIEW = "user_txn_stats"
    comptime VERSION = "1.0.0"

    var user_id: EntityKey[Int64]
    var event_timestamp: EventTimestamp["us", "UTC"]
    var count_amount_600s: Int64
    var sum_amount_600s: Float64
    var mean_amount_600s: Float64
    var min_amount_600s: Float64
    var max_amount_600s: Float64
    var std_amount_600s: Float64
    var count_amount_3600s: Int64
    var sum_amount_3600s: Float64
    var mean_amount_3600s: Float64
    var min_amount_3600s: Float64
    var max_amount_3600s: Float64
    var std_amount_3600s: Float64
    var count_amount_86400s: Int64
    var sum_amount_86400s: Float64
    var mean_amount_86400s: Float64
    var min_amount_86400s: Float64
    var max_amount_86400s: Float64
    var std_amount_86400s: Float64
