"""Feast definitions of the featureflow example: card transactions per user.

Events arrive on the Kafka topic ``transactions`` as JSON objects::

    {"user_id": 42, "amount": 12.5, "merchant": "acme",
     "event_timestamp": "2026-11-30T10:00:00Z"}   # or epoch milliseconds

``user_txn_stats`` declares rolling aggregates of ``amount`` per user; Feast
names each output ``{function}_{column}_{seconds}s`` (``sum_amount_3600s``).
featureflow computes them with the frame ``[t - window, t]`` in event time.

``user_sessions`` is a session view (tag ``featureflow.window: session``, see
docs/session-views.md): a user's events form one session while each follows the
previous one within 30 minutes; its features describe the user's latest session.
"""

from datetime import timedelta

from feast import Entity, Field, FileSource, KafkaSource, StreamFeatureView
from feast.aggregation import Aggregation
from feast.data_format import JsonFormat
from feast.types import Float64, Int64, UnixTimestamp
from feast.value_type import ValueType

TXN_WINDOWS = (timedelta(minutes=10), timedelta(hours=1), timedelta(hours=24))
TXN_FUNCTIONS = ("count", "sum", "mean", "min", "max", "std")

# Aggregations of ``amount`` per user; the output feature of each is Feast's
# ``Aggregation.resolved_name(time_window)``, typed by what the function yields.
_TXN_AGGREGATIONS = [
    Aggregation(column="amount", function=fn, time_window=window)
    for window in TXN_WINDOWS
    for fn in TXN_FUNCTIONS
]
_OUTPUT_TYPES = {
    "count": Int64,
    "sum": Float64,
    "mean": Float64,
    "min": Float64,
    "max": Float64,
    "std": Float64,
}

user = Entity(
    name="user",
    join_keys=["user_id"],
    value_type=ValueType.INT64,
    description="A card holder.",
)

transactions_batch = FileSource(
    name="transactions_batch",
    path="data/transactions.parquet",
    timestamp_field="event_timestamp",
)

transactions_stream = KafkaSource(
    name="transactions_stream",
    kafka_bootstrap_servers="127.0.0.1:9092",
    topic="transactions",
    timestamp_field="event_timestamp",
    message_format=JsonFormat(
        schema_json="user_id long, amount double, merchant string, event_timestamp string"
    ),
    batch_source=transactions_batch,
    watermark_delay_threshold=timedelta(minutes=5),
)

user_txn_stats = StreamFeatureView(
    name="user_txn_stats",
    source=transactions_stream,
    entities=[user],
    ttl=timedelta(days=2),
    mode="spark",
    timestamp_field="event_timestamp",
    schema=[Field(name="user_id", dtype=Int64)]
    + [
        Field(name=agg.resolved_name(agg.time_window), dtype=_OUTPUT_TYPES[agg.function])
        for agg in _TXN_AGGREGATIONS
    ],
    aggregations=_TXN_AGGREGATIONS,
    online=True,
    tags={"schema_version": "1.0.0", "owner": "featureflow"},
)


SESSION_GAP = timedelta(minutes=30)
SESSIONS_SCHEMA_VERSION = "1.0.0"  # schemas/user_sessions.mojo's VERSION

# In a session view every Aggregation's time_window is the session gap and its
# ``name`` is the feature: the aggregate over all events of the session.
_SESSION_AGGREGATIONS = [
    Aggregation(column="amount", function=function, time_window=SESSION_GAP, name=feature)
    for function, feature in (
        ("count", "session_events"),
        ("sum", "session_amount_sum"),
        ("mean", "session_amount_mean"),
        ("max", "session_amount_max"),
    )
]

user_sessions = StreamFeatureView(
    name="user_sessions",
    source=transactions_stream,
    entities=[user],
    ttl=timedelta(days=2),
    mode="spark",
    timestamp_field="event_timestamp",
    schema=[
        Field(name="user_id", dtype=Int64),
        Field(name="session_start", dtype=UnixTimestamp),
        Field(name="session_duration_s", dtype=Float64),
        Field(name="session_events", dtype=Int64),
        Field(name="session_amount_sum", dtype=Float64),
        Field(name="session_amount_mean", dtype=Float64),
        Field(name="session_amount_max", dtype=Float64),
    ],
    aggregations=_SESSION_AGGREGATIONS,
    online=True,
    tags={"featureflow.window": "session", "schema_version": SESSIONS_SCHEMA_VERSION,
          "owner": "featureflow"},
)
