"""Loading events (real Kafka broker, Parquet, JSON parsing) and the no-skew check."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from duckdb_oracle import END_NS, EXAMPLE_SPEC, FEATURE_NAMES, events_table, per_event_features

from featureflow import explore as ex
from featureflow.events import sample
from featureflow.explore.load import BATCH, parse_records
from featureflow.infra import kafka_client


def _generated(n: int = 2000, seed: int = 4) -> sample.SampleEvents:
    return sample.generate(n, users=30, seed=seed, end_ns=END_NS, span_s=4 * 3600)


def test_parse_records_reads_both_timestamp_forms_and_counts_unusable_records() -> None:
    good = [
        {
            "user_id": 1,
            "amount": 2.5,
            "merchant": "a",
            "event_timestamp": "2026-11-30T10:00:00.250Z",
        },
        {"user_id": 2, "amount": None, "merchant": "b", "event_timestamp": 1_795_996_800_123},
        {
            "user_id": 3,
            "amount": 4,
            "merchant": "c",
            "event_timestamp": "2026-11-30T10:00:00+01:00",
        },
    ]
    bad = [b"{not json", b'{"user_id": "x", "event_timestamp": 1}', b'{"user_id": 1}',
           b'{"user_id": 1, "event_timestamp": "yesterday"}',
           b'{"user_id": 1, "amount": "lots", "event_timestamp": 1}',
           b'{"user_id": 1, "amount": 1e400, "event_timestamp": 1}',
           b'{"user_id": 1, "amount": "NaN", "event_timestamp": 1}',
           b'{"user_id": 1, "event_timestamp": 253402214400000}']  # fmt: skip
    records = [(0, i, json.dumps(e).encode()) for i, e in enumerate(good)]
    records += [(1, i, raw) for i, raw in enumerate(bad)]
    table, skipped = parse_records(records, EXAMPLE_SPEC)
    assert table.column("user_id").to_pylist() == [1, 2, 3]
    assert table.column("event_ns").to_pylist() == [
        1_796_032_800_250_000_000, 1_795_996_800_123_000_000, 1_796_029_200_000_000_000,
    ]  # fmt: skip
    assert table.column("amount").to_pylist() == [2.5, None, 4.0]
    assert skipped == {
        "not a JSON object": 1,
        "entity key is not an integer": 1,
        "missing or null event timestamp": 1,
        "not an RFC 3339 timestamp or epoch milliseconds": 1,
        "not a valid double": 1,  # the job's words: a notebook skips what the job does
        "not a finite number": 2,
        "outside the years 1677-2262 (not representable in epoch nanoseconds)": 1,
    }


def test_from_kafka_reads_what_was_produced(kafka_bootstrap: str, topic: str) -> None:
    events = _generated(1500)
    kafka_client.produce(kafka_bootstrap, topic, sample.to_json(events))
    kafka_client.produce(kafka_bootstrap, topic, [(b"1", b"{broken")])
    loaded = ex.from_kafka(EXAMPLE_SPEC, bootstrap=kafka_bootstrap, topic=topic, max_events=None)
    assert loaded.skipped == {"not a JSON object": 1}
    assert loaded.num_events == len(events)
    table = loaded.table.sort_by([("partition", "ascending"), ("offset", "ascending")])
    # Within a partition, arrival order is production order.
    for partition in set(table.column("partition").to_pylist()):
        mine = table.filter(pa.compute.equal(table.column("partition"), partition))
        keys = set(mine.column("user_id").to_pylist())
        produced = [
            (u, t) for u, t in zip(events.user_id, events.event_ns, strict=True) if u in keys
        ]
        assert list(zip(mine.column("user_id").to_pylist(), mine.column("event_ns").to_pylist(),
                        strict=True)) == produced  # fmt: skip
    capped = ex.from_kafka(EXAMPLE_SPEC, bootstrap=kafka_bootstrap, topic=topic, max_events=100)
    assert capped.num_events == 100
    assert ex.kafka_has_records(kafka_bootstrap, topic)
    assert not ex.kafka_has_records(kafka_bootstrap, f"{topic}-missing")


def test_from_parquet_matches_the_generator(tmp_path: Path) -> None:
    events = _generated(500)
    path = tmp_path / "events.parquet"
    stamps = pa.array(events.event_ns // 1000, pa.timestamp("us", "UTC"))
    table = events_table(events).append_column("event_timestamp", stamps)
    pq.write_table(table.drop_columns(["event_ns"]), path)  # fmt: skip
    loaded = ex.from_parquet(path, EXAMPLE_SPEC).table
    assert loaded.column("event_ns").to_pylist() == events.event_ns.tolist()
    assert loaded.column("offset").to_pylist() == list(range(len(events)))


def _history(events: pa.Table, batch_of_row: np.ndarray) -> pa.Table:
    """What the stream job writes, from DuckDB: batch b's rows over the events of batches <= b."""
    parts = []
    for batch in np.unique(batch_of_row):
        seen = events.filter(pa.array(batch_of_row <= batch))
        features = per_event_features(seen.select(["user_id", "event_ns", "amount"]))
        mine = pa.array(batch_of_row[batch_of_row <= batch] == batch)
        rows = seen.filter(mine)
        columns = {"user_id": rows.column("user_id"), "event_ns": rows.column("event_ns"),
                   BATCH: pa.array(np.full(rows.num_rows, batch, np.int64))}  # fmt: skip
        columns.update({name: features.column(name).filter(mine) for name in FEATURE_NAMES})
        parts.append(pa.table(columns))
    return pa.concat_tables(parts)


def test_check_no_skew_replays_micro_batches_and_finds_differences() -> None:
    loaded = ex.from_generator(EXAMPLE_SPEC, 1500, users=20, seed=9, end_ns=END_NS, span_s=3600)
    batch_of_row = np.arange(loaded.num_events) * 3 // loaded.num_events  # 3 micro-batches
    # An out-of-order event: user 1's last event (batch 2) arrives with the time of their first.
    users = loaded.table.column("user_id").to_numpy()
    ns = loaded.table.column("event_ns").to_numpy().copy()
    first, last = np.flatnonzero(users == 1)[[0, -1]]
    assert (batch_of_row[first], batch_of_row[last]) == (0, 2)
    ns[last] = ns[first]
    events = loaded.table.set_column(1, "event_ns", pa.array(ns))
    # Out-of-order events in later batches do not count for earlier batches' rows.
    history = _history(events, batch_of_row)
    report = ex.check_no_skew(events, history, EXAMPLE_SPEC)
    assert report.ok, str(report)
    assert (report.compared, report.batches, report.unmatched) == (events.num_rows, 3, 0)
    assert "no skew" in str(report)
    # One pass over all events differs where out-of-order events crossed batches.
    one_pass = _history(events, np.zeros(events.num_rows, np.int64))
    one_pass = one_pass.set_column(2, BATCH, pa.array(batch_of_row))
    assert not ex.check_no_skew(events, one_pass, EXAMPLE_SPEC).ok

    values = history.column("sum_amount_600s").to_numpy(zero_copy_only=False).copy()
    values[7] += 0.01
    changed = history.set_column(
        history.column_names.index("sum_amount_600s"), "sum_amount_600s", pa.array(values)
    )
    skewed = ex.check_no_skew(events, changed, EXAMPLE_SPEC)
    assert skewed.mismatched_values == 1 and not skewed.ok
    assert skewed.mismatches is not None
    assert skewed.mismatches["feature"].tolist() == ["sum_amount_600s"]
    with pytest.raises(ex.SkewError, match="SKEW"):
        skewed.raise_if_skewed()
    # A history row without its event (an incomplete load) is reported, not ignored.
    partial = ex.check_no_skew(events.slice(0, events.num_rows - 1), history, EXAMPLE_SPEC)
    assert partial.unmatched == 1 and not partial.ok
