"""Sample events as Avro binary records (the Avro format of a Feast ``KafkaSource``).

Plain Avro binary encoding of one record per Kafka message (no container
file, no schema-registry header): what Spark's ``from_avro`` decodes with the
source's schema. Only the types of :data:`TRANSACTION_SCHEMA` are encoded:
``long`` (zig-zag varint), ``double`` (8 bytes little-endian), ``string``
(length + UTF-8) and the ``["null", T]`` union (branch index, then the value).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator

from featureflow.columns import NS_PER_MS
from featureflow.events.sample import SampleEvents

TRANSACTION_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Transaction",
        "namespace": "featureflow.example",
        "fields": [
            {"name": "user_id", "type": "long"},
            {"name": "amount", "type": ["null", "double"]},
            {"name": "merchant", "type": "string"},
            {"name": "event_timestamp", "type": "long", "doc": "epoch milliseconds (UTC)"},
        ],
    }
)
"""The example events' Avro schema; ``event_timestamp`` is epoch milliseconds."""


def encode_long(value: int) -> bytes:
    """Avro ``long``: zig-zag, then a little-endian base-128 varint."""
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def encode_transaction(user_id: int, amount: float | None, merchant: str, millis: int) -> bytes:
    """One event as an Avro record of :data:`TRANSACTION_SCHEMA` (a NaN amount is null)."""
    text = merchant.encode()
    if amount is None or math.isnan(amount):
        amount_bytes = encode_long(0)  # union branch 0: null
    else:
        amount_bytes = encode_long(1) + struct.pack("<d", amount)
    return (
        encode_long(user_id) + amount_bytes + encode_long(len(text)) + text + encode_long(millis)
    )


def to_avro(sample: SampleEvents) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) Kafka records of the events: key is the user id, value the Avro record."""
    for user, ns, amount, merchant in zip(
        sample.user_id.tolist(), sample.event_ns.tolist(), sample.amount.tolist(),
        sample.merchant.tolist(), strict=True,
    ):  # fmt: skip
        yield str(user).encode(), encode_transaction(user, amount, merchant, ns // NS_PER_MS)
