"""State saved as deltas with periodic snapshots: every load equals the resident version.

Each micro-batch saves the change of its state (:class:`featureflow.state_delta.StateDelta`)
instead of the whole table; snapshots, written in the background, bound the replay.
The oracle is the state a worker holds after computing the batch (resident) and the
state the former whole-file saves give (a store that saves every version whole): over
random batch boundaries, with the worker losing its resident state at random, a batch
replayed after a crash, snapshots written, late or never (a worker killed between
the delta and its snapshot), every version loaded from disk must be the same table —
rows, order, schema and, for runs, record batches — and every output the same.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from duckdb_oracle import END_NS, EXAMPLE_SPEC, SESSIONS_SPEC, events_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from micro_batches import micro_batches

from featureflow import session_runs
from featureflow.errors import StateError
from featureflow.events import sample
from featureflow.features import FrameStatesByColumn
from featureflow.repo import StreamViewSpec
from featureflow.spark import state as state_module
from featureflow.spark.offline_sink import OfflineFeatureLog
from featureflow.spark.online_sink import ViewOutputs, ViewTask
from featureflow.spark.state import StateStore, drop_resident, wait_for_snapshots
from featureflow.state_delta import StateDelta

DELAY_NS = 5 * 60 * 10**9
ROLLING = dataclasses.replace(EXAMPLE_SPEC, watermark_ns=DELAY_NS)
"""State as runs sorted by (entity, time)."""
TILED = dataclasses.replace(ROLLING, tile_hop_ns=5 * 60 * 10**9)
"""State as raw events in time order plus tile partials."""
SESSIONS = dataclasses.replace(SESSIONS_SPEC, watermark_ns=DELAY_NS)
"""State as runs with a closed watermark, two versions per batch (the view pass, then the
closer's)."""
SPECS = {"rolling": ROLLING, "tiled": TILED, "sessions": SESSIONS}


@dataclasses.dataclass(frozen=True)
class _WholeStore(StateStore):
    """The former layout: every version saved whole."""

    def save_events(self, partition: int, batch: int, events: pa.Table,
                    delta: StateDelta | None = None, *, read_before: int | None = None,
                    frames: FrameStatesByColumn | None = None) -> None:
        super().save_events(partition, batch, events, read_before=read_before, frames=frames)

    def save_tiles(self, partition: int, batch: int, tiles: pa.Table,
                   delta: StateDelta | None = None, *, read_before: int | None = None) -> None:
        super().save_tiles(partition, batch, tiles, read_before=read_before)


def _batches(events: pa.Table, cuts: list[int]) -> Iterator[tuple[pa.Table, int, int]]:
    """(accepted new events, watermark before, watermark after) per micro-batch."""
    for batch, before, after in micro_batches(events, cuts, DELAY_NS):
        yield batch, before or 0, after or 0


def _tasks(spec: StreamViewSpec, store: StateStore, offline: OfflineFeatureLog, batch_id: int,
           before: int, after: int) -> list[ViewTask]:  # fmt: skip
    """The batch's passes over the view, as the pipeline runs them."""
    if not spec.is_session_view:
        return [ViewTask(spec, batch_id, store, after, offline)]
    return [
        ViewTask(spec, batch_id, store, before, offline),
        ViewTask(spec, batch_id, store, after, offline, reads_before=batch_id + 1,
                 offline_suffix="-closed"),
    ]  # fmt: skip


def _run_step(task: ViewTask, received: list[pa.RecordBatch]) -> ViewOutputs | None:
    outputs = task.compute(0, received)
    if outputs is not None:
        task.finish(0, outputs)
    return outputs


def _same(got: pa.Table | None, want: pa.Table | None, what: str) -> None:
    """Equal tables: rows in order, schema with its metadata, record batch lengths."""
    assert (got is None) == (want is None), what
    if got is None or want is None:
        return
    assert got.schema.equals(want.schema, check_metadata=True), what
    assert got.equals(want), what
    batches = [b.num_rows for b in got.to_batches() if b.num_rows]
    assert batches == [b.num_rows for b in want.to_batches() if b.num_rows], what


def _close(got: pa.Table, want: pa.Table, what: str) -> None:
    """Equal tables but for float columns, equal within 1e-9 (relative)."""
    assert got.schema.equals(want.schema), what
    for name in got.column_names:
        if pa.types.is_floating(got.schema.field(name).type):
            np.testing.assert_allclose(
                np.array(got.column(name).to_pylist(), float),
                np.array(want.column(name).to_pylist(), float),
                rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=f"{what}: {name}",
            )  # fmt: skip
        else:
            assert got.column(name).equals(want.column(name)), f"{what}: {name}"


def _state(store: StateStore, before: int) -> tuple[pa.Table | None, pa.Table | None]:
    return store.load_events(0, before_batch=before), store.load_tiles(0, before_batch=before)


@contextmanager
def _snapshots(every: int, share: float, fates: Iterator[str]) -> Iterator[None]:
    """Snapshots due after ``every`` deltas or ``share`` of the snapshot's bytes; each
    one, in turn: written in the background ("late"), written before the next batch
    ("now"), or never (the worker died between the delta and the snapshot: "lost")."""
    real = state_module._start_snapshot
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(state_module, "SNAPSHOT_EVERY", every)
        patch.setattr(state_module, "SNAPSHOT_SHARE", share)

        def start(key: tuple[str, str], filesystem: object, final: str, table: pa.Table) -> None:
            fate = next(fates)
            if fate != "lost":
                real(key, filesystem, final, table)  # type: ignore[arg-type]
            if fate == "now":
                wait_for_snapshots()

        patch.setattr(state_module, "_start_snapshot", start)
        yield
    wait_for_snapshots()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    view=st.sampled_from(sorted(SPECS)),
    seed=st.integers(0, 10_000),
    cuts=st.lists(st.integers(1, 799), min_size=2, max_size=7),
    every=st.integers(1, 5),
    share=st.sampled_from([0.5, 100.0]),
    fates=st.lists(st.sampled_from(["late", "now", "lost"]), min_size=1, max_size=8),
    lose=st.lists(st.booleans(), min_size=1, max_size=20),
    replays=st.lists(st.booleans(), min_size=1, max_size=8),
    carry=st.lists(st.booleans(), min_size=1, max_size=8),
    max_runs=st.sampled_from([2, session_runs.MAX_RUNS]),
)  # fmt: skip
def test_every_version_loads_as_the_resident_and_the_whole_file_one(
    tmp_path_factory: pytest.TempPathFactory, view: str, seed: int, cuts: list[int],
    every: int, share: float, fates: list[str], lose: list[bool], replays: list[bool],
    carry: list[bool], max_runs: int,
) -> None:  # fmt: skip
    """``carry``: after a batch whose versions were checked, the workers keep holding what
    they computed (frame states, kept sessions) for the next batch; otherwise they hold
    the versions as loaded from disk (without them). ``max_runs``: a session state is
    compacted once it holds more runs (2: most batches compact)."""
    spec = SPECS[view]
    root = tmp_path_factory.mktemp(view)
    generated = sample.generate(800, users=15, seed=seed, end_ns=END_NS, span_s=6 * 3600)
    events = events_table(generated)
    drop_resident()
    deltas = StateStore(str(root / "deltas"), 1)
    whole = _WholeStore(str(root / "whole"), 1)
    offline = OfflineFeatureLog(str(root / "offline"), spec.name)
    losing, replaying = itertools.cycle(lose), itertools.cycle(replays)
    carrying = itertools.cycle(carry)
    with _snapshots(every, share, itertools.cycle(fates)), pytest.MonkeyPatch.context() as patch:
        patch.setattr(session_runs, "MAX_RUNS", max_runs)
        for batch_id, (batch, before, after) in enumerate(_batches(events, cuts)):
            runs = 2 if next(replaying) else 1  # a crash after the saves: Spark re-runs it
            for run in range(runs):
                for at, (task, oracle) in enumerate(zip(
                    _tasks(spec, deltas, offline, batch_id, before, after),
                    _tasks(spec, whole, offline, batch_id, before, after), strict=True,
                )):  # fmt: skip
                    if next(losing):  # the task lands on another worker, or after a restart
                        drop_resident()
                    received = batch.to_batches() if at == 0 and batch.num_rows else []
                    got, want = _run_step(task, received), _run_step(oracle, received)
                    assert (got is None) == (want is None)
                    if got is not None and want is not None:
                        _same(got.rows, want.rows, f"online rows of {batch_id}/{run}")
                        _same(got.history, want.history, f"history of {batch_id}/{run}")
                resident = _state(deltas, batch_id + 1)
                held = dict(state_module._RESIDENT)
                drop_resident()
                for rebuilt, oracle_table, part in zip(
                    _state(deltas, batch_id + 1), _state(whole, batch_id + 1),
                    ("events", "tiles"), strict=True,
                ):  # fmt: skip
                    _same(rebuilt, resident[0 if part == "events" else 1], f"{part} {batch_id}")
                    _same(rebuilt, oracle_table, f"{part} {batch_id} vs whole files")
                if next(carrying):  # the workers still hold what they computed
                    drop_resident()
                    state_module._RESIDENT.update(held)


def _run_view(spec: StreamViewSpec, store: StateStore, root: Path, events: pa.Table,
              cuts: list[int], upto: int | None = None) -> int:  # fmt: skip
    """Run the batches (the first ``upto``); returns the last batch id."""
    offline = OfflineFeatureLog(str(root / "offline"), spec.name)
    batch_id = -1
    for batch_id, (batch, before, after) in enumerate(_batches(events, cuts)):
        if upto is not None and batch_id >= upto:
            return batch_id - 1
        for at, task in enumerate(_tasks(spec, store, offline, batch_id, before, after)):
            _run_step(task, batch.to_batches() if at == 0 and batch.num_rows else [])
        wait_for_snapshots()
    return batch_id


def _sample(n: int = 3000, seed: int = 5) -> pa.Table:
    generated = sample.generate(n, users=20, seed=seed, end_ns=END_NS, span_s=12 * 3600)
    return events_table(generated)


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_file())


def _version(name: str) -> tuple[tuple[int, int], bool]:
    """((batch, step), is a delta) of a state file's name."""
    match = re.fullmatch(r"batch-(\d+)(?:\.(\d+))?(\.delta)?\.arrow", name)
    assert match is not None, name
    return (int(match.group(1)), int(match.group(2) or 0)), bool(match.group(3))


def _chain(
    spec: StreamViewSpec, tmp_path: Path, events: pa.Table, cuts: list[int]
) -> tuple[StateStore, int, Path]:
    """Run ``spec`` over the batches on one partition: its store, last batch id and the
    last batch's delta file."""
    store = StateStore(str(tmp_path / "state"), 1)
    last = _run_view(spec, store, tmp_path, events, cuts)
    part = tmp_path / "state" / "partitions=1" / "part-00000"
    return store, last, part / f"batch-{last}.delta.arrow"


@pytest.mark.parametrize("view", ["rolling", "sessions"])
def test_frame_bytes_are_what_a_worker_holds_beside_the_events(tmp_path: Path, view: str) -> None:
    """``state_frame_bytes`` (stats, metrics) counts the frame states or kept sessions a
    worker holds with each saved version: the held bytes are the events' and theirs."""
    spec = SPECS[view]
    store = StateStore(str(tmp_path / "state"), 1)
    offline = OfflineFeatureLog(str(tmp_path / "offline"), spec.name)
    drop_resident()
    seen = 0
    for batch_id, (batch, before, after) in enumerate(
        _batches(_sample(), list(range(300, 3000, 300)))
    ):
        for at, task in enumerate(_tasks(spec, store, offline, batch_id, before, after)):
            outputs = _run_step(task, batch.to_batches() if at == 0 and batch.num_rows else [])
            if outputs is None:
                continue
            held = state_module._RESIDENT[(store.root, store._partition_dir(0))]
            assert held.table is outputs.kept
            assert held.frames is outputs.frames
            assert held.nbytes == outputs.kept.nbytes + outputs.state_frame_bytes
            assert ViewTask.stats(outputs, [])["state_frame_bytes"] == outputs.state_frame_bytes
            seen += outputs.state_frame_bytes > 0
    assert seen > 3


def test_a_task_frees_the_version_it_read_and_its_retry_rebuilds_it(tmp_path: Path) -> None:
    """Once computed, a batch's task holds the runs of the version it read no longer (the
    runs merged away would otherwise stay through its writes); a retry after a failure
    in its writes rebuilds that version from the files and computes the same outputs.
    A batch that changes nothing keeps the version held."""
    store = StateStore(str(tmp_path / "state"), 1)
    offline = OfflineFeatureLog(str(tmp_path / "offline"), ROLLING.name)
    key = (store.root, store._partition_dir(0))
    drop_resident()
    batches = list(_batches(_sample(), list(range(300, 3000, 300))))
    for batch_id, (batch, _, after) in enumerate(batches[:-1]):
        _run_step(ViewTask(ROLLING, batch_id, store, after, offline), batch.to_batches())
    last = len(batches) - 1
    batch, _, after = batches[last]
    task = ViewTask(ROLLING, last, store, after, offline)
    first = task.compute(0, batch.to_batches())
    assert first is not None and not first.cold
    assert key not in state_module._RESIDENT  # freed once computed
    retry = task.compute(0, batch.to_batches())  # the writes failed: Spark runs it again
    assert retry is not None and retry.cold  # rebuilt from the files, frames computed anew
    # the retry computes the frames anew, not resumed: std may differ in the last bits
    _close(retry.rows, first.rows, "online rows of the retry")
    _close(retry.history, first.history, "history of the retry")
    _same(retry.kept, first.kept, "state of the retry")
    task.finish(0, retry)
    assert state_module._RESIDENT[key].table is retry.kept
    idle = ViewTask(ROLLING, last + 1, store, after, offline)
    assert idle.compute(0, []) is None
    assert state_module._RESIDENT[key].table is retry.kept  # nothing new: still held


def test_a_replayed_batch_rewrites_the_same_delta(tmp_path: Path) -> None:
    events, cuts = _sample(), list(range(300, 3000, 300))
    store, last, delta = _chain(ROLLING, tmp_path, events, cuts)
    first = delta.read_bytes()
    drop_resident()  # the replay runs on a restarted worker: it rebuilds version last - 1
    batch, _, after = list(_batches(events, cuts))[last]
    offline = OfflineFeatureLog(str(tmp_path / "offline"), ROLLING.name)
    _run_step(ViewTask(ROLLING, last, store, after, offline), batch.to_batches())
    assert delta.read_bytes() == first


def test_only_what_the_oldest_readable_version_needs_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After many batches: the newest snapshot at or before the version a replay of the
    last batch reads, and the deltas after it; the replay still loads."""
    monkeypatch.setattr(state_module, "SNAPSHOT_EVERY", 4)
    monkeypatch.setattr(state_module, "SNAPSHOT_SHARE", 100.0)  # by count only
    written: list[str] = []
    real_write = state_module._write_table

    def write(filesystem: object, final: str, table: pa.Table) -> object:
        written.append(final.rpartition("/")[2])
        return real_write(filesystem, final, table)  # type: ignore[arg-type]

    monkeypatch.setattr(state_module, "_write_table", write)
    events, cuts = _sample(6000), list(range(200, 6000, 200))
    store = StateStore(str(tmp_path / "state"), 1)
    last = _run_view(SESSIONS, store, tmp_path, events, cuts)
    assert last == 29
    assert any(name.endswith(".1.delta.arrow") for name in written)  # closers saved too
    part = tmp_path / "state" / "partitions=1" / "part-00000"
    files = [_version(name) for name in _files(part)]
    snapshots = sorted(v for v, is_delta in files if not is_delta)
    deltas = sorted(v for v, is_delta in files if is_delta)
    replay_reads = (last - 1, 1)  # the closer's version of the batch before
    kept_from = max(v for v in snapshots if v <= replay_reads)
    assert all(v >= kept_from for v in snapshots), files
    # every version saved after that snapshot's, as its delta
    saved = {_version(name)[0] for name in written if name.endswith(".delta.arrow")}
    assert deltas == sorted(v for v in saved if v > kept_from), files
    assert len(deltas) <= 2 * 4, files  # a snapshot at least every 4 deltas
    whole = _WholeStore(str(tmp_path / "whole"), 1)
    _run_view(SESSIONS, whole, tmp_path / "w", events, cuts)
    drop_resident()
    _same(store.load_events(0, before_batch=last), whole.load_events(0, before_batch=last),
          "the replay's input")  # fmt: skip
    _same(store.load_events(0, before_batch=last + 1),
          whole.load_events(0, before_batch=last + 1), "the newest version")  # fmt: skip
    assert not list(part.glob(".*.tmp"))


def test_a_damaged_or_missing_delta_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_module, "SNAPSHOT_EVERY", 100)  # the chain: batch 0, then deltas
    monkeypatch.setattr(state_module, "SNAPSHOT_SHARE", 100.0)
    events, cuts = _sample(), list(range(300, 3000, 300))
    store, last, delta = _chain(TILED, tmp_path, events, cuts)
    part = delta.parent
    intact = delta.read_bytes()
    delta.write_bytes(intact[: len(intact) // 2])
    drop_resident()
    with pytest.raises(StateError, match=re.escape(str(delta))) as raised:
        store.load_events(0, before_batch=last + 1)
    assert "new --checkpoint" in str(raised.value)
    delta.write_bytes(intact)
    middle = sorted(part.glob("batch-*.delta.arrow"), key=lambda p: p.stat().st_mtime_ns)[-2]
    middle.unlink()  # storage lost a file in the middle of the chain
    following = part / f"batch-{last}.delta.arrow"
    with pytest.raises(StateError, match=re.escape(str(following))):
        store.load_events(0, before_batch=last + 1)
    tiles = part / "tiles" / f"batch-{last}.delta.arrow"
    tiles.write_bytes(tiles.read_bytes()[:100])
    with pytest.raises(StateError, match=re.escape(str(tiles))):
        store.load_tiles(0, before_batch=last + 1)


def test_a_checkpoint_of_whole_files_loads_and_continues_with_deltas(tmp_path: Path) -> None:
    """State written by the former code (one whole ``batch-<id>.arrow`` per version, tiles
    alike) is a snapshot: the next batch continues from it and saves a delta."""
    events, cuts = _sample(), list(range(300, 3000, 300))
    whole = _WholeStore(str(tmp_path / "state"), 1)
    last = _run_view(TILED, whole, tmp_path, events, cuts, upto=5)
    part = tmp_path / "state" / "partitions=1" / "part-00000"
    assert _files(part) == [f"batch-{last - 1}.arrow", f"batch-{last}.arrow"]
    reference = _WholeStore(str(tmp_path / "reference"), 1)
    _run_view(TILED, reference, tmp_path / "r", events, cuts, upto=5)
    drop_resident()  # a restart with the new code
    store = StateStore(str(tmp_path / "state"), 1)
    offline = OfflineFeatureLog(str(tmp_path / "offline"), TILED.name)
    for batch_id, (batch, _, after) in enumerate(_batches(events, cuts)):
        if batch_id > last:
            _run_step(ViewTask(TILED, batch_id, store, after, offline), batch.to_batches())
            _run_step(ViewTask(TILED, batch_id, reference, after, offline), batch.to_batches())
            assert (part / f"batch-{batch_id}.delta.arrow").exists()
            assert (part / "tiles" / f"batch-{batch_id}.delta.arrow").exists()
            resident = _state(store, batch_id + 1)
            drop_resident()
            for got, held, want in zip(_state(store, batch_id + 1), resident,
                                       _state(reference, batch_id + 1), strict=True):  # fmt: skip
                _same(got, held, f"batch {batch_id}")
                _same(got, want, f"batch {batch_id} vs whole files")


def test_old_format_file_is_a_snapshot(tmp_path: Path) -> None:
    """A file exactly as the former code wrote it (``ipc.new_file`` of the table)."""
    table = events_table(sample.generate(50, users=3, seed=1, end_ns=END_NS, span_s=600))
    part = tmp_path / "partitions=1" / "part-00000"
    part.mkdir(parents=True)
    with pa.OSFile(str(part / "batch-7.arrow"), "wb") as sink, ipc.new_file(
        sink, table.schema
    ) as writer:
        writer.write_table(table)
    assert StateStore(str(tmp_path), 1).load_events(0, before_batch=8) == table
