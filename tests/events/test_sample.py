"""Sample events: deterministic, realistic in the ways the windows care about, valid JSON."""

from __future__ import annotations

import json
from datetime import datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from featureflow.events import sample

END_NS = 1_795_996_800_000_000_000  # 2026-11-30T00:00:00Z


def test_same_seed_same_events() -> None:
    a = sample.generate(1000, users=50, seed=3, end_ns=END_NS)
    b = sample.generate(1000, users=50, seed=3, end_ns=END_NS)
    assert list(sample.to_json(a)) == list(sample.to_json(b))
    c = sample.generate(1000, users=50, seed=4, end_ns=END_NS)
    assert list(sample.to_json(a)) != list(sample.to_json(c))


def test_users_are_skewed_and_time_mostly_ordered() -> None:
    events = sample.generate(50_000, users=1000, seed=1, end_ns=END_NS, span_s=86_400)
    counts = np.bincount(events.user_id, minlength=1001)
    assert counts.argmax() == 1
    assert counts[1] > 20 * np.median(counts[counts > 0])
    assert events.event_ns.max() <= END_NS
    assert events.event_ns.min() >= END_NS - 86_400 * 10**9 - 3 * 3600 * 10**9
    backwards = np.diff(events.event_ns) < 0
    assert 0.002 < backwards.mean() < 0.03  # ~1 % out of order
    assert 0.01 < np.isnan(events.amount).mean() < 0.03  # ~2 % null amounts


def test_empty_and_invalid_sizes() -> None:
    assert len(sample.generate(0, end_ns=END_NS)) == 0
    with pytest.raises(ValueError, match="users"):
        sample.generate(10, users=0)


@settings(max_examples=25, deadline=None)
@given(events=st.integers(1, 300), users=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_json_carries_every_column_exactly(events: int, users: int, seed: int) -> None:
    generated = sample.generate(events, users=users, seed=seed, end_ns=END_NS)
    for i, (key, value) in enumerate(sample.to_json(generated)):
        event = json.loads(value)
        assert key == str(event["user_id"]).encode()
        assert event["user_id"] == generated.user_id[i]
        assert 1 <= event["user_id"] <= users
        amount = generated.amount[i]
        assert (event["amount"] is None) == bool(np.isnan(amount))
        if event["amount"] is not None:
            assert event["amount"] == amount
        stamp = event["event_timestamp"]
        if isinstance(stamp, int):
            assert stamp * 1_000_000 == generated.event_ns[i]
        else:
            parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            assert round(parsed.timestamp() * 1000) * 1_000_000 == generated.event_ns[i]


@given(ns=st.integers(0, 4_000_000_000_000_000_000).map(lambda v: v // 1_000_000 * 1_000_000))
def test_rfc3339_round_trips_at_millisecond_precision(ns: int) -> None:
    text = sample.rfc3339(ns)
    assert text.endswith("Z")
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert round(parsed.timestamp() * 1000) * 1_000_000 == ns
