"""The job's pass per Kafka partition (--keyed-topic) against its shuffled layout on
the same topic: a real broker, a 4-partition topic keyed by the user (librdkafka's default
partitioner, crc32), uneven partitions, several micro-batches, both views. The offline
history must be the same row for row; a record keyed otherwise is a dead letter naming
its key, in keyed mode only."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from duckdb_oracle import END_NS
from job_harness import apply, copy_repo, job_command, run, run_job, sorted_history

from featureflow.events import sample
from featureflow.infra import kafka_broker, kafka_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 4


def _assert_same_history(got: pa.Table, want: pa.Table, view: str) -> None:
    """Row for row; floats to 1e-12 relative: a partition whose state a batch recomputes
    cold (on the driver after the executors, as the shuffled job also does) may sum in
    another order, as the chaos test allows."""
    assert got.schema == want.schema and got.num_rows == want.num_rows, view
    for name in got.column_names:
        a, b = got.column(name), want.column(name)
        if pa.types.is_floating(a.type):
            np.testing.assert_allclose(
                a.to_numpy(zero_copy_only=False), b.to_numpy(zero_copy_only=False),
                rtol=1e-12, equal_nan=True, err_msg=f"{view}.{name}",
            )  # fmt: skip
        else:
            assert a.equals(b), f"{view}.{name}"


def _history(repo: Path, view: str) -> pa.Table:
    history = sorted_history(repo, view)
    return history.drop_columns(["batch"]).sort_by(
        [(name, "ascending") for name in history.column_names if name != "batch"]
    )


@pytest.mark.parametrize("driver_pass_records", ["0", "150000"], ids=["executors", "driver"])
def test_keyed_pass_writes_what_the_shuffled_pass_writes(
    kafka_bootstrap: str, tmp_path: Path, driver_pass_records: str
) -> None:
    topic = f"test-keyed-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(kafka_bootstrap, topic, partitions=PARTITIONS)
    # every micro-batch on the executors (one task per Kafka partition), or on the driver
    # many cold keys and a few hot ones: the partitions come out uneven
    events = sample.generate(6000, users=400, seed=23, end_ns=END_NS, span_s=8 * 3600)
    kafka_client.produce(kafka_bootstrap, topic, sample.to_json(events))
    # events whose timestamps only Spark reads (no "T"): their partitions' batches take the
    # Spark path in keyed mode, the same events either way
    odd = [
        (
            str(user).encode(),
            (
                f'{{"user_id":{user},"amount":{user}.5,"merchant":"m",'
                f'"event_timestamp":"2026-11-29 2{user % 4}:1{user % 6}:00"}}'
            ).encode(),
        )
        for user in range(1, 400, 37)
    ]
    kafka_client.produce(kafka_bootstrap, topic, odd)
    # a valid event whose key is not its user's text: a dead letter in keyed mode only
    stray = b'{"user_id":5,"amount":1.0,"merchant":"m","event_timestamp":1795996800000}'
    kafka_client.produce(kafka_bootstrap, topic, [(b"not-5", stray)], partition=0)
    runs = {}
    for mode, extra in (
        ("shuffled", ()),
        # 3 slices of each Kafka partition (local[2] would take 2: 4 per core in all)
        ("keyed", ("--keyed-topic", "crc32", "--partitions", str(PARTITIONS),
                   "--keyed-slices", "3")),
    ):
        repo = copy_repo(tmp_path / mode)
        apply(repo, topic)
        log = run_job(repo, kafka_bootstrap, tmp_path / mode / "checkpoint",
                      "--max-offsets-per-trigger", "1500",
                      "--driver-pass-records", driver_pass_records,
                      *extra)  # fmt: skip
        runs[mode] = (repo, log)
    keyed_log = runs["keyed"][1]
    if driver_pass_records == "0":
        # the keyed state refuses a run that would place entities otherwise
        repo, checkpoint = runs["keyed"][0], tmp_path / "keyed" / "checkpoint"
        for extra, why in (
            (("--keyed-topic", "crc32", "--partitions", "3"), "has 4 partitions, not"),
            ((), "run the job with --keyed-topic crc32"),
            (("--keyed-topic", "crc32", "--partitions", "4", "--keyed-slices", "2"),
             "run the job with --keyed-topic crc32 --keyed-slices 3"),
        ):
            refused = run(job_command(repo, kafka_bootstrap, checkpoint, "--available-now", *extra))
            assert refused.returncode != 0 and why in refused.stdout + refused.stderr, why
    assert re.search(rf"skipped record {topic}\[0\]@\d+: field 'key': the Kafka key", keyed_log)
    for view in ("user_txn_stats", "user_sessions"):
        shuffled = _history(runs["shuffled"][0], view)
        keyed = _history(runs["keyed"][0], view)
        # the stray event is in the shuffled history only: user 5's rows differ
        stray_user = pa.compute.equal(shuffled.column("user_id"), 5)
        assert (
            shuffled.filter(stray_user).num_rows
            != keyed.filter(pa.compute.equal(keyed.column("user_id"), 5)).num_rows
            or view == "user_sessions"
        )
        shuffled = shuffled.filter(pa.compute.invert(stray_user))
        keyed = keyed.filter(pa.compute.not_equal(keyed.column("user_id"), 5))
        assert keyed.num_rows > 0
        _assert_same_history(keyed, shuffled, view)
