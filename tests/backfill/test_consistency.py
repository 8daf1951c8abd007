"""No training-serving skew: the same events through the stream job (Kafka) and the backfill.

The events go to a Kafka topic; ``spark-submit jobs/realtime.py --available-now``
computes them in several micro-batches (windows carried across batches in
the job's state) into its offline history, and ``spark-submit
jobs/backfill.py --from-kafka`` reads the same retained records in one batch
pass. Per event, the two offline rows must be equal.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from backfill_helpers import BIN, REPO_ROOT, applied_repo, assert_history_equals_duckdb, run
from duckdb_oracle import END_NS, FEATURE_NAMES

from featureflow.events import sample
from featureflow.infra import kafka_broker, kafka_client
from featureflow.spark.offline_sink import read_history

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Bad rows in the range are reported (one whose readable time is outside it is not its concern).
BAD_RECORDS = [
    b"{not json",
    b'{"user_id": "x", "amount": 1.0, "event_timestamp": %d}' % (END_NS // 10**6 - 1000),
]


def _sorted(history: pa.Table) -> pa.Table:
    order = [(name, "ascending") for name in ("user_id", "event_timestamp", *FEATURE_NAMES)]
    return history.select(["user_id", "event_timestamp", *FEATURE_NAMES]).sort_by(order)


def test_stream_job_and_backfill_write_equal_features_per_event(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"test-backfill-{uuid.uuid4().hex[:10]}"
    # One partition: micro-batches follow event time, so the job drops no event as late.
    kafka_broker.create_topic(kafka_bootstrap, topic, partitions=1)
    events = sample.generate(
        2000, users=40, seed=8, end_ns=END_NS, span_s=4 * 3600, out_of_order_share=0.0
    )
    kafka_client.produce(kafka_bootstrap, topic, sample.to_json(events))
    kafka_client.produce(kafka_bootstrap, topic, [(b"bad", value) for value in BAD_RECORDS])
    repo = applied_repo(tmp_path / "feature_repo", topic)

    stream = run(
        [str(BIN / "spark-submit"), "--master", "local[2]", str(REPO_ROOT / "jobs" / "realtime.py"),
         "--repo", str(repo), "--view", "user_txn_stats", "--bootstrap", kafka_bootstrap,
         "--checkpoint", str(tmp_path / "checkpoint"), "--available-now",
         "--max-offsets-per-trigger", "800", "--offline-path", str(tmp_path / "stream")],
        timeout=1200,
    )  # fmt: skip
    assert stream.returncode == 0, (stream.stdout + stream.stderr)[-4000:]
    backfill = run(
        [str(BIN / "spark-submit"), "--master", "local[2]", str(REPO_ROOT / "jobs" / "backfill.py"),
         "--repo", str(repo), "--view", "user_txn_stats", "--from-kafka",
         "--bootstrap", kafka_bootstrap, "--start", "2026-11-29T12:00:00Z",
         "--end", "2026-11-30T00:00:01Z", "--offline-path", str(tmp_path / "backfill"),
         "--no-progress"],
        timeout=1200,
    )  # fmt: skip
    log = backfill.stdout + backfill.stderr
    assert backfill.returncode == 0, log[-4000:]
    assert f"backfill done: {len(events)} rows, " in log
    assert "1 bad rows: field 'value': not a JSON object" in log
    assert "1 bad rows: field 'user_id': entity key is not an integer" in log
    assert f"{topic}[0]@{len(events)}: field 'value'" in log  # where the bad record is

    streamed = read_history(str(tmp_path / "stream"), "user_txn_stats")
    backfilled = read_history(str(tmp_path / "backfill"), "user_txn_stats")
    assert streamed.num_rows == backfilled.num_rows == len(events)
    want, got = _sorted(streamed), _sorted(backfilled)
    for name in ("user_id", "event_timestamp", *FEATURE_NAMES):
        got_column, want_column = got.column(name), want.column(name)
        if pa.types.is_floating(want_column.type):
            # Same kernels on different row sets (the job's state vs the whole history):
            # the sliding sums may round differently in the last bits.
            np.testing.assert_allclose(
                np.array(got_column.to_pylist(), dtype=float),
                np.array(want_column.to_pylist(), dtype=float),
                rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=name,
            )  # fmt: skip
        else:
            assert got_column.equals(want_column), name
    # ... and both equal the independent oracle.
    assert_history_equals_duckdb(backfilled, events, 0, END_NS + 1)
