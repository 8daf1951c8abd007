"""Realistic sample card-transaction events, deterministic for a seed.

What makes them realistic enough to exercise the windows:

- users are Zipf-skewed: user 1 is the most active, a long tail is rare;
- events come in bursts (a user's purchases cluster within minutes);
- amounts are log-normal, a few are null (declined authorisations);
- about 1 % of events arrive out of order (event time minutes before the
  events produced just ahead of them), and a few are late by hours.

Event time is in epoch nanoseconds internally; on the wire (see :func:`to_json`)
``event_timestamp`` is an RFC 3339 string for most events and epoch
milliseconds for the rest, both of which the job accepts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from featureflow.columns import NS_PER_MS, NS_PER_S

MERCHANTS = (
    "grocer", "fuel", "coffee", "airline", "hotel", "electronics", "pharmacy",
    "restaurant", "streaming", "bookshop", "taxi", "supermarket",
)  # fmt: skip


@dataclass(frozen=True)
class SampleEvents:
    """Columns of generated events, in production order (the order they go to Kafka)."""

    user_id: np.ndarray  # int64
    event_ns: np.ndarray  # int64, epoch nanoseconds (UTC)
    amount: np.ndarray  # float64, NaN where the event carries a null amount
    merchant: np.ndarray  # object (str)
    millis_encoded: np.ndarray  # bool: event_timestamp sent as epoch milliseconds

    def __len__(self) -> int:
        return int(self.user_id.shape[0])


def generate(
    events: int,
    *,
    users: int = 1000,
    seed: int = 0,
    end_ns: int | None = None,
    span_s: float = 86_400.0,
    null_share: float = 0.02,
    out_of_order_share: float = 0.01,
) -> SampleEvents:
    """Generate ``events`` transactions over ``span_s`` seconds ending at ``end_ns``.

    Args:
        events: number of events.
        users: number of distinct user ids (``1..users``); user 1 is the most active.
        seed: random seed; the same arguments give the same events.
        end_ns: event time of the end of the span, epoch ns (default: now, rounded to ms).
        span_s: length of the span in seconds.
        null_share: share of events whose amount is null.
        out_of_order_share: share of events whose event time lies before events sent earlier.
    """
    if events < 0 or users < 1:
        msg = f"events must be >= 0 and users >= 1, got events={events}, users={users}"
        raise ValueError(msg)
    rng = np.random.default_rng(seed)
    if end_ns is None:
        end_ns = int(datetime.now(UTC).timestamp() * 1000) * NS_PER_MS
    start_ns = end_ns - int(span_s * NS_PER_S)

    # Zipf-like activity: rank r is drawn with weight 1 / r^1.1.
    weights = 1.0 / np.arange(1, users + 1) ** 1.1
    user_id = rng.choice(
        np.arange(1, users + 1, dtype=np.int64), size=events, p=weights / weights.sum()
    )

    # Bursts: burst start times uniform over the span, events within a burst
    # a few seconds to minutes apart; then everything sorted by event time.
    bursts = max(1, events // 8)
    burst_start = rng.uniform(start_ns, end_ns, size=bursts)
    offsets = rng.exponential(45 * NS_PER_S, size=events)
    event_ns = np.minimum(burst_start[rng.integers(0, bursts, size=events)] + offsets, end_ns)
    event_ns = np.sort(event_ns.astype(np.int64) // NS_PER_MS * NS_PER_MS)

    # Out of order: a few events are produced later than their event time says
    # (moved back by 1-4 minutes; one in ten of them by 1-3 hours).
    late = rng.random(events) < out_of_order_share
    shift_s = np.where(
        rng.random(events) < 0.1, rng.uniform(3600, 10_800, events), rng.uniform(60, 240, events)
    )
    event_ns = np.where(
        late, event_ns - (shift_s * NS_PER_S).astype(np.int64) // NS_PER_MS * NS_PER_MS, event_ns
    )

    amount = np.round(rng.lognormal(mean=3.0, sigma=1.0, size=events), 2)
    amount[rng.random(events) < null_share] = np.nan
    merchant = np.array(MERCHANTS, dtype=object)[rng.integers(0, len(MERCHANTS), size=events)]
    millis_encoded = rng.random(events) < 0.3
    return SampleEvents(user_id, event_ns.astype(np.int64), amount, merchant, millis_encoded)


def rfc3339(event_ns: int) -> str:
    """RFC 3339 text of an epoch-ns instant, UTC, millisecond precision (``...T10:00:00.123Z``)."""
    seconds, ns = divmod(int(event_ns), NS_PER_S)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ns // NS_PER_MS:03d}Z"


def to_json(sample: SampleEvents) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) Kafka records of the events: key is the user id, value the JSON event."""
    for user, ns, amount, merchant, as_millis in zip(
        sample.user_id.tolist(), sample.event_ns.tolist(), sample.amount.tolist(),
        sample.merchant.tolist(), sample.millis_encoded.tolist(), strict=True,
    ):  # fmt: skip
        event = {
            "user_id": user,
            "amount": None if amount != amount else amount,  # NaN -> null
            "merchant": merchant,
            "event_timestamp": ns // NS_PER_MS if as_millis else rfc3339(ns),
        }
        yield str(user).encode(), json.dumps(event, separators=(",", ":")).encode()
