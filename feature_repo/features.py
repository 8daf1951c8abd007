"""Feast definitions of the featureflow example: card transactions per user.

Events arrive on the Kafka topic ``transactions`` as JSON objects::

    {"user_id": 42, "amount": 12.5, "merchant": "acme",
     "event_timestamp": "2026-11-30T10:00:00Z"}   # or epoch milliseconds

``user_txn_stats`` declares rolling aggregates of ``amount`` per user; Feast
names each output ``{function}_{column}_{seconds}s`` (``sum_amount_3600s``).
featureflow computes them with the frame ``[t - window, t]`` in event time.
"""

from datetime import timedelta

from feast import Entity, Field, FileSource, KafkaSource, StreamFeatureView
from feast.aggregation import Aggregation
from feast.data_format import JsonFormat
from feast.types import Float64, Int64
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
