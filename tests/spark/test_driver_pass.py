"""The driver's pass of a small micro-batch equals the shuffled pass, partition for partition.

A micro-batch of at most ``--driver-pass-records`` records runs every shuffle
partition's views on the driver (:func:`~featureflow.spark.topic_pass.run_on_driver`),
with one online write for all of them; a larger one runs each partition in its own
task (:class:`~featureflow.spark.topic_pass.TopicPass`). A job may switch between
them from one batch to the next (and a replay may take the other path when the
setting changed), so both must leave the same counts, dead letters, state versions,
offline history and online features. The oracle is the shuffled pass itself, over
the same micro-batches: sample events of many cold users, out of order, with bad
records among them, both example views, on the SQLite online store.

And :func:`~featureflow.spark.topic_pass.shuffle_partition` must be Spark's own
partition of ``repartition(n, key)``: the states are laid out by it; the driver's
split of the records by it must keep the order a shuffled task receives them in
(ties in event time keep their arrival order in the state).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from duckdb_oracle import END_NS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from job_harness import REPO_ROOT, apply, copy_repo

from featureflow.columns import EVENT_NS
from featureflow.events import sample
from featureflow.online.sqlite import LOCK_TIMEOUT_ENV
from featureflow.repo import load_store, stream_view_specs
from featureflow.spark.offline_sink import OfflineFeatureLog, read_history
from featureflow.spark.online_sink import ViewOutputs, ViewTask
from featureflow.spark.parse import ERROR_FIELD, ERROR_REASON
from featureflow.spark.state import StateStore, drop_resident
from featureflow.spark.topic_pass import (
    COUNT,
    DEAD,
    PARTITION_COLUMN,
    VIEW,
    TopicPass,
    counted_and_split,
    run_on_driver,
    shuffle_partition,
    slices_in_turn,
    split_by_partition,
    view_columns,
)

PARTITIONS = 4
BATCHES = (0, 700, 1500, 1520, 2600)
"""Cuts of the events into micro-batches (one holds 20 records)."""


def _records(seed: int, n: int = 2600, users: int = 900) -> pa.Table:
    """Checked records as the pass receives them: usable events of ``users`` users (out of
    order), plus a bad record in every hundred."""
    events = sample.generate(n, users=users, seed=seed, end_ns=END_NS, span_s=6 * 3600)
    n = len(events.user_id)
    bad = np.arange(n) % 100 == 7
    return pa.table({
        "user_id": pa.array(np.where(bad, 0, events.user_id), pa.int64()),
        EVENT_NS: pa.array(events.event_ns, pa.int64()),
        "amount": pa.array(events.amount, pa.float64(), from_pandas=True),
        "topic": pa.array(["tx"] * n),
        "partition": pa.array(np.arange(n) % 3, pa.int32()),
        "offset": pa.array(np.arange(n), pa.int64()),
        "key": pa.array([b"k" if b else None for b in bad], pa.binary()),
        "value": pa.array([b"{oops" if b else None for b in bad], pa.binary()),
        ERROR_FIELD: pa.array(["value" if b else None for b in bad], pa.string()),
        ERROR_REASON: pa.array(["not a JSON object" if b else None for b in bad], pa.string()),
    })  # fmt: skip


def _tasks(repo: Path, batch_id: int, watermark_ns: int) -> tuple[ViewTask, ...]:
    store = load_store(repo)
    return tuple(
        ViewTask(
            spec, batch_id, StateStore(str(repo / "state" / spec.name), PARTITIONS),
            watermark_ns, OfflineFeatureLog(str(repo / "data" / "offline"), spec.name),
        )
        for spec in sorted(stream_view_specs(store), key=lambda spec: spec.name)
    )


def _comparable(out: pa.Table) -> tuple[Counter[Any], list[Any], list[Any]]:
    """Counts (summed over shuffle partitions), dead letters, and the views' rows per
    (view, shuffle partition) without the timings and freshness."""
    counts: Counter[Any] = Counter()
    for row in out.filter(pc.equal(out.column("kind"), COUNT)).to_pylist():
        counts[(row["partition"], row["reason"], "rows")] += row["rows"]
        key = (row["partition"], row["reason"], "max_ns")
        counts[key] = max(counts.get(key, -1), row["max_ns"] if row["max_ns"] is not None else -1)
    dead = sorted(
        (row["offset"], row["reason"], row["key"])
        for row in out.filter(pc.equal(out.column("kind"), DEAD)).to_pylist()
    )
    views = sorted(
        (row["view"], row["shuffle_partition"], row["rows"], row["entities"],
         row["state_rows"], row["state_bytes"])
        for row in out.filter(pc.equal(out.column("kind"), VIEW)).to_pylist()
    )  # fmt: skip
    return counts, dead, views


def _online(repo: Path, users: list[int]) -> dict[str, list[Any]]:
    store = load_store(repo)
    features = [
        f"{spec.name}:{name}"
        for spec in stream_view_specs(store)
        for name in spec.feature_names
    ]
    return store.get_online_features(
        features=features, entity_rows=[{"user_id": user} for user in users]
    ).to_dict()


def _applied_repos(tmp_path: Path, *names: str) -> list[Path]:
    repos = [copy_repo(tmp_path / name) for name in names]
    for repo in repos:
        apply(repo, "unused")
    return repos


def _micro_batches(records: pa.Table) -> Iterator[tuple[int, pa.Table, pa.Array]]:
    """``records`` cut at :data:`BATCHES`: (batch id, records, each one's shuffle
    partition: any assignment of users to partitions, the same for every path)."""
    partition_of = pa.array(records.column("user_id").to_numpy() * 7 % PARTITIONS)
    for batch_id, (lo, hi) in enumerate(itertools.pairwise(BATCHES)):
        yield batch_id, records.slice(lo, hi - lo), partition_of.slice(lo, hi - lo)


def _watermark_after(batch: pa.Table) -> int:
    usable = pc.is_null(batch.column(ERROR_REASON))
    return int(pc.max(batch.column(EVENT_NS).filter(usable)).as_py()) - 3600 * 10**9


@pytest.mark.slow
def test_the_drivers_pass_equals_the_shuffled_tasks(tmp_path: Path) -> None:
    """The driver's pass (partitions side by side, one online write) and one task taking
    its records' partitions one after the other (a keyed task's slices: each partition's
    views, online write and state saves before the next) both equal a shuffled task per
    partition."""
    records = _records(seed=11)
    driver, sliced, shuffled = _applied_repos(tmp_path, "driver", "sliced", "shuffled")
    watermark_ns = 0
    for batch_id, batch, partitions in _micro_batches(records):
        on_driver = run_on_driver(
            _tasks(driver, batch_id, watermark_ns), str(driver), batch_id,
            batch.append_column(PARTITION_COLUMN, partitions),
        )  # fmt: skip
        one_task = _in_turn(_tasks(sliced, batch_id, watermark_ns), sliced, batch_id, batch,
                            partitions)  # fmt: skip
        shuffled_out = _shuffled_pass(shuffled, batch_id, watermark_ns, batch, partitions)
        assert _comparable(on_driver) == _comparable(shuffled_out), batch_id
        assert _comparable(one_task) == _comparable(shuffled_out), batch_id
        watermark_ns = _watermark_after(batch)

    users = sorted(set(records.column("user_id").to_pylist()))
    for repo in (driver, sliced):
        for spec in stream_view_specs(load_store(repo)):
            got = read_history(str(repo / "data" / "offline"), spec.name)
            want = read_history(str(shuffled / "data" / "offline"), spec.name)
            order = [(name, "ascending") for name in got.column_names]
            assert got.num_rows and got.sort_by(order).equals(want.sort_by(order)), spec.name
            for partition in range(PARTITIONS):
                state = StateStore(str(repo / "state" / spec.name), PARTITIONS)
                oracle = StateStore(str(shuffled / "state" / spec.name), PARTITIONS)
                got_state = state.load_events(partition, before_batch=len(BATCHES))
                want_state = oracle.load_events(partition, before_batch=len(BATCHES))
                assert got_state is not None and want_state is not None
                assert got_state.equals(want_state), (spec.name, partition)
        assert _online(repo, users) == _online(shuffled, users)


def _in_turn(tasks: tuple[ViewTask, ...], repo: Path, batch_id: int, batch: pa.Table,
             partitions: pa.Array) -> pa.Table:  # fmt: skip
    """``batch`` as a keyed task runs it: counted and sorted out by state partition (the
    views' columns only), then the partitions one after the other (:func:`slices_in_turn`)."""
    out, by_partition = counted_and_split(batch, partitions, view_columns(t.spec for t in tasks))
    handed = {partition: [usable] for partition, usable in by_partition.items()}
    by_partition.clear()
    rows = [*out, *slices_in_turn(TopicPass(tasks, str(repo), batch_id), handed)]
    return pa.Table.from_batches(rows)


def _shuffled_pass(repo: Path, batch_id: int, watermark_ns: int, batch: pa.Table,
                   partitions: pa.Array) -> pa.Table:  # fmt: skip
    """``batch`` through one :class:`TopicPass` task per shuffle partition, in this process."""
    tasks = _tasks(repo, batch_id, watermark_ns)
    return pa.Table.from_batches([
        row
        for partition in range(PARTITIONS)
        if pc.any(pc.equal(partitions, partition)).as_py()
        for row in TopicPass(tasks, str(repo), batch_id).run_partition(
            partition, batch.filter(pc.equal(partitions, partition))
        )
    ])  # fmt: skip


@pytest.mark.slow
def test_a_partition_is_cold_in_a_worker_without_its_frame_states_and_computes_the_same(
    tmp_path: Path,
) -> None:
    """``state_cold`` (the job's ``cold_partitions``) marks each (view, partition) task
    that found its state without the frame states its last batch held: in a new worker
    (here: the resident versions dropped, as a restart or Spark handing the partition
    to another Python worker leaves them) every partition of both views is cold once,
    and the next batch in that worker is warm again. A cold task's outputs and state
    equal the same batch's computed warm (the other repo's states, dropped with them
    after its batch 2, are cold in batch 3 instead)."""
    moved, stayed = _applied_repos(tmp_path, "moved", "stayed")
    watermark_ns = 0
    cold_by_batch = []
    for batch_id, batch, partitions in _micro_batches(_records(seed=5)):
        want = _shuffled_pass(stayed, batch_id, watermark_ns, batch, partitions)
        if batch_id == 2:
            drop_resident()  # the next worker holds nothing
        got = _shuffled_pass(moved, batch_id, watermark_ns, batch, partitions)
        assert _comparable(got) == _comparable(want), batch_id
        views = got.filter(pc.equal(got.column("kind"), VIEW))
        cold_by_batch.append(sorted(
            (row["view"], row["shuffle_partition"], row["state_cold"])
            for row in views.to_pylist()
        ))  # fmt: skip
        watermark_ns = _watermark_after(batch)
    first, warm, moved_batch, after = cold_by_batch
    assert {cold for *_, cold in first} == {0}  # empty state: nothing to compute anew
    assert {cold for *_, cold in warm} == {0}
    assert len(moved_batch) == 2 * PARTITIONS  # both views in every partition
    assert {cold for *_, cold in moved_batch} == {1}
    assert {cold for *_, cold in after} == {0}
    for spec in stream_view_specs(load_store(moved)):
        for partition in range(PARTITIONS):
            got_state = StateStore(str(moved / "state" / spec.name), PARTITIONS).load_events(
                partition, before_batch=len(BATCHES))
            want_state = StateStore(str(stayed / "state" / spec.name), PARTITIONS).load_events(
                partition, before_batch=len(BATCHES))
            assert got_state is not None and want_state is not None
            assert got_state.equals(want_state), (spec.name, partition)


@dataclasses.dataclass(frozen=True)
class _PoolReadingTask(ViewTask):
    """A view's task that notes Arrow's pool as its state save begins: after the topic's
    online write and the history writes beside it."""

    readings: list[int] = dataclasses.field(default_factory=list)

    def save_state(self, partition: int, outputs: ViewOutputs) -> None:
        self.readings.append(pa.total_allocated_bytes())
        super().save_state(partition, outputs)


def _pool_reading_tasks(repo: Path, readings: list[int]) -> tuple[ViewTask, ...]:
    """Batch 0's tasks of ``repo``, noting Arrow's pool in ``readings`` as each state save
    begins."""
    return tuple(
        _PoolReadingTask(t.spec, t.batch_id, t.state, t.watermark_ns, t.offline,
                         readings=readings)
        for t in _tasks(repo, 0, 0)
    )  # fmt: skip


def test_a_task_handed_its_records_frees_them_before_its_writes(tmp_path: Path) -> None:
    """A shuffled task hands its records over in a one-element list (as
    :class:`TopicPass` does, in its worker or through the state host): the pass empties
    the list and, once the views have computed, holds neither the records nor the
    batches cut from them through the writes, where the host's two tasks peak. Its
    outputs are those of the same records passed as a table (held by the caller)."""
    handed_repo, kept_repo = _applied_repos(tmp_path, "handed", "kept")
    _, batch, partitions = next(_micro_batches(_records(seed=5)))
    # usable records only: bad ones would be filtered out into a copy the pass drops anyway
    usable = pc.is_null(batch.column(ERROR_REASON))
    rows = batch.filter(pc.and_(pc.equal(partitions, 0), usable))
    padding = pa.array(["x" * 20_000] * rows.num_rows)  # a column no view reads

    def padded() -> pa.Table:  # a fresh copy of the padding in Arrow's pool each time
        return rows.set_column(rows.schema.get_field_index("topic"), "topic",
                               pa.concat_arrays([padding.slice(0, 1), padding.slice(1)]))

    def run(repo: Path, records: pa.Table | list[pa.Table]) -> tuple[pa.Table, int]:
        """The pass's rows, and Arrow's pool after its online write above what it held
        when the pass began."""
        readings: list[int] = []
        tasks = _pool_reading_tasks(repo, readings)
        before = pa.total_allocated_bytes()
        out = pa.Table.from_batches(list(TopicPass(tasks, str(repo), 0).run_partition(0, records)))
        return out, readings[0] - before

    kept = padded()
    want, grown_kept = run(kept_repo, kept)
    handed = [padded()]
    got, grown_handed = run(handed_repo, handed)
    assert handed == []
    assert _comparable(got) == _comparable(want)
    assert grown_kept - grown_handed >= 0.9 * kept.column("topic").nbytes


def test_a_task_taking_its_partitions_in_turn_holds_one_partitions_outputs(
    tmp_path: Path,
) -> None:
    """A keyed task runs its Kafka partition's slices one after the other: each slice's
    views, online write and state saves before the next. As each state save begins,
    Arrow's pool then holds the states so far and one slice's outputs (its features,
    history rows, new state), where the driver's pass, side by side, holds every
    partition's at once: the sequence's largest reading is well under the side-by-side
    one. The outputs are the same."""
    records = _records(seed=8, n=40_000, users=4000)
    partition_of = pa.array(records.column("user_id").to_numpy() * 7 % PARTITIONS)
    in_turn_repo, side_by_side_repo = _applied_repos(tmp_path, "in_turn", "side_by_side")

    def run(repo: Path, in_turn: bool) -> tuple[pa.Table, int]:
        readings: list[int] = []
        tasks = _pool_reading_tasks(repo, readings)
        before = pa.total_allocated_bytes()
        if in_turn:
            out = _in_turn(tasks, repo, 0, records, partition_of)
        else:
            with_partitions = records.append_column(PARTITION_COLUMN, partition_of)
            out = run_on_driver(tasks, str(repo), 0, with_partitions, ThreadPoolExecutor(2))
        assert len(readings) == 2 * PARTITIONS  # both views in every partition
        return out, max(readings) - before

    got, held_in_turn = run(in_turn_repo, True)
    want, held_side_by_side = run(side_by_side_repo, False)
    assert _comparable(got) == _comparable(want)
    # 0.53x when written (40 k records, 4 partitions); all partitions at once read 1.0x
    assert held_in_turn < 0.75 * held_side_by_side, (held_in_turn, held_side_by_side)


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.lists(st.integers(-(2**63), 2**63 - 1) | st.none(), min_size=1, max_size=300),
    partitions=st.integers(1, 40),
)
def test_shuffle_partition_is_the_partition_spark_puts_a_long_key_in(
    spark: Any, keys: list[int | None], partitions: int
) -> None:
    _assert_partitions_equal(spark, keys, "bigint", partitions)


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.text(max_size=12) | st.none(), min_size=1, max_size=300))
def test_shuffle_partition_is_the_partition_spark_puts_a_string_key_in(
    spark: Any, keys: list[str | None]
) -> None:
    _assert_partitions_equal(spark, keys, "string", 16)


def _assert_partitions_equal(spark: Any, keys: list[Any], ddl: str, partitions: int) -> None:
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(at, key) for at, key in enumerate(keys)], f"at int, k {ddl}")
    got = frame.select("at", shuffle_partition("k", partitions)).toArrow()
    want = (
        frame.repartition(partitions, "k")
        .select("at", F.spark_partition_id().alias("partition"))
        .toArrow()
    )
    assert dict(zip(got.column("at").to_pylist(), got.column(PARTITION_COLUMN).to_pylist(),
                    strict=True)) == dict(
        zip(want.column("at").to_pylist(), want.column("partition").to_pylist(), strict=True)
    )  # fmt: skip
    # each partition's records in the order its shuffled task receives them
    split = split_by_partition(got.select(["at"]), got.column(PARTITION_COLUMN))
    received: dict[int, list[int]] = {}
    for at, partition in zip(want.column("at").to_pylist(), want.column("partition").to_pylist(),
                             strict=True):  # fmt: skip
        received.setdefault(partition, []).append(at)
    assert {p: rows.column("at").to_pylist() for p, rows in split.items()} == received


_WORKER = """
import json, sys
import pyspark.worker  # noqa: F401  (what a Spark Python worker has loaded)
from pyspark import cloudpickle
with open(sys.argv[1], "rb") as f:
    topic, records = cloudpickle.load(f)
unpickled_with_feast = "feast" in sys.modules
out = list(topic.run_partition(0, records))
from feast import FeatureView
print(json.dumps({
    "unpickled_with_feast": unpickled_with_feast,
    "rows": [batch.num_rows for batch in out],
    "instrumented": "check_argument_types_internal" in FeatureView.__init__.__code__.co_names,
}))
"""


def test_a_worker_unpickles_its_task_without_feast_and_writes_with_feast_unchecked(
    tmp_path: Path,
) -> None:
    """A Python worker that unpickles a topic task (its views' feature schemas included)
    imports no Feast: only the worker that writes does, when it opens the store, and
    then without typeguard's instrumentation (``featureflow.repo.load_store``). The
    write goes through and matches the same task run in this process."""
    from pyspark import cloudpickle

    from featureflow.schema import read_schemas

    worker_repo, here_repo = _applied_repos(tmp_path, "worker", "here")
    schemas = {s.view: s for s in read_schemas(sorted((REPO_ROOT / "schemas").glob("*.mojo")))}
    records = _records(seed=3).slice(0, 700)
    records = records.filter(pa.array(records.column("user_id").to_numpy() * 7 % PARTITIONS == 0))

    def topic(repo: Path) -> TopicPass:
        tasks = tuple(dataclasses.replace(task, feature_schema=schemas[task.spec.name])
                      for task in _tasks(repo, 0, 0))  # fmt: skip
        return TopicPass(tasks, str(repo), 0)

    pickled = tmp_path / "task.pickle"
    pickled.write_bytes(cloudpickle.dumps((topic(worker_repo), records)))
    done = subprocess.run([sys.executable, "-c", _WORKER, str(pickled)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    worker = json.loads(done.stdout.strip().splitlines()[-1])
    assert worker["unpickled_with_feast"] is False
    assert worker["instrumented"] is False
    here = pa.Table.from_batches(list(topic(here_repo).run_partition(0, records)))
    assert sum(worker["rows"]) == here.num_rows > 0
    users = records.column("user_id").unique().to_pylist()
    assert _online(worker_repo, users) == _online(here_repo, users)


@dataclasses.dataclass(frozen=True)
class _LockReleasingTask(ViewTask):
    """A view's task whose history write notes whether the online store's lock (held by
    the test's own connection) still keeps the online write waiting, then releases it,
    and whose state save notes the online rows already stored then."""

    lock: sqlite3.Connection | None = None
    database: Path | None = None
    noted: list[tuple[str, float]] = dataclasses.field(default_factory=list)

    def write_history(self, partition: int, outputs: ViewOutputs) -> None:
        assert self.lock is not None
        if self.lock.in_transaction:
            self.noted.append(("history while the online write waits", time.perf_counter()))
            self.lock.execute("COMMIT")
        super().write_history(partition, outputs)
        self.noted.append(("history ends", time.perf_counter()))

    def save_state(self, partition: int, outputs: ViewOutputs) -> None:
        self.noted.append(("save begins", time.perf_counter()))
        assert self.database is not None
        with sqlite3.connect(self.database) as reader:
            (stored,) = reader.execute(f"SELECT count(*) FROM {self.table}").fetchone()
        self.noted.append((f"online rows stored: {stored > 0}", time.perf_counter()))
        super().save_state(partition, outputs)

    @property
    def table(self) -> str:
        return f"featureflow_demo_{self.spec.name}"


def test_history_files_are_written_beside_the_online_write_and_states_saved_after_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Parquet history goes out while the online write runs (it mostly waits on the
    store): with the SQLite online store locked by another connection, the online write
    waits, and only a history write can release the lock, so the batch completes only if
    the history is written beside the online write. Every state save begins after both
    writes (the online rows are stored by then), so a crash before it leaves the version a
    replay reads. The outputs are those of plain tasks on an unlocked store."""
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, "5")  # written after it: the write fails in 5 s
    locked_repo, plain_repo = _applied_repos(tmp_path, "locked", "plain")
    _, batch, partitions = next(_micro_batches(_records(seed=6)))
    database = locked_repo / "data" / "online_store.db"
    assert database.exists(), "feast apply creates the online store's tables"
    lock = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
    lock.execute("BEGIN IMMEDIATE")
    noted: list[tuple[str, float]] = []
    tasks = tuple(
        _LockReleasingTask(t.spec, t.batch_id, t.state, t.watermark_ns, t.offline,
                           lock=lock, database=database, noted=noted)
        for t in _tasks(locked_repo, 0, 0)
    )  # fmt: skip
    side_by_side = ThreadPoolExecutor(2)  # as the driver's pass: one online write for all
    with_partitions = batch.append_column(PARTITION_COLUMN, partitions)
    got = run_on_driver(tasks, str(locked_repo), 0, with_partitions, side_by_side)
    lock.close()
    want = run_on_driver(_tasks(plain_repo, 0, 0), str(plain_repo), 0, with_partitions,
                         side_by_side)  # fmt: skip
    assert _comparable(got) == _comparable(want)

    def times(what: str) -> list[float]:
        return [at for name, at in noted if name == what]

    assert len(times("history while the online write waits")) == 1
    histories = len(times("history ends"))
    assert histories >= 2 and len(times("save begins")) == histories
    assert len(times("online rows stored: True")) == histories
    assert min(times("save begins")) > max(times("history ends"))
