"""Loading events, feature views and the stream job's history into Arrow tables (the IO side).

Every event loader returns an :class:`EventSample` whose table has the same
columns whatever the source:

- the view's join key (int64) and ``event_ns`` (int64 epoch ns, UTC);
- the other fields of the view's JSON schema, typed as the schema declares;
- ``partition`` (int32) and ``offset`` (int64): the arrival order. Within one
  partition, a larger offset arrived later (Kafka's order; row order for
  generated events and Parquet files without those columns).

Nothing here computes features: see :mod:`featureflow.explore.compute`.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow.columns import EVENT_NS, NS_PER_MS
from featureflow.errors import KafkaBrokerError, RepoError
from featureflow.events import ddl, reasons, sample
from featureflow.events.checks import StampReading, first_failing
from featureflow.events.json_records import (
    STAMP,
    JsonRecordParser,
)
from featureflow.repo import StreamViewSpec, load_store, stream_view_spec, stream_view_specs

if TYPE_CHECKING:
    import pandas as pd
    from feast import StreamFeatureView

PARTITION = "partition"
OFFSET = "offset"
BATCH = "batch"
"""Column of :func:`history`: the stream job's micro-batch id of each event."""

@dataclass(frozen=True)
class EventSample:
    """Events loaded for exploration, and where they came from."""

    table: pa.Table
    source: str  # human-readable: "Kafka topic 'transactions' on 127.0.0.1:9092 (50,000 records)"
    skipped: dict[str, int] = field(default_factory=dict)  # unusable records, by reason

    @property
    def num_events(self) -> int:
        return self.table.num_rows

    def to_pandas(self) -> pd.DataFrame:
        """The events as a DataFrame with an extra ``event_time`` column (datetime64[ns, UTC])."""
        return with_event_time(self.table.to_pandas())


def with_event_time(frame: pd.DataFrame, column: str = EVENT_NS) -> pd.DataFrame:
    """``frame`` with ``event_time`` (datetime64[ns, UTC]) derived from its epoch-ns ``column``."""
    import pandas as pd

    frame = frame.copy()
    frame["event_time"] = pd.to_datetime(frame[column].to_numpy(), unit="ns", utc=True)
    return frame


def json_fields(spec: StreamViewSpec) -> dict[str, pa.DataType]:
    """The view's JSON fields and their Arrow types, from its Spark DDL (``user_id long, ...``)."""
    fields: dict[str, pa.DataType] = {}
    for name, kind in ddl.fields(spec.json_schema):
        arrow_type = ddl.arrow_type(kind)
        if arrow_type is None:
            msg = (
                f"view {spec.name!r}: JSON schema field {name!r} has type {kind!r}, not one "
                f"of {', '.join(ddl.ARROW_TYPES)}"
            )
            raise RepoError(msg)
        fields[name] = arrow_type
    return fields


def view_spec(repo_path: str | Path, name: str) -> StreamViewSpec:
    """The :class:`StreamViewSpec` of stream view ``name`` of the Feast repo at ``repo_path``.

    The registry wins (what ``featureflow apply`` accepted and the stream job
    computes); a repo that was never applied is read from its Python
    definitions with Feast's own parser instead.
    """
    store = load_store(repo_path)
    try:
        return stream_view_specs(store, [name])[0]
    except RepoError:
        if any(view.name == name for view in store.list_stream_feature_views()):
            raise
    views = {view.name: view for view in _repo_definitions(Path(store.repo_path))}
    if name not in views:
        msg = f"no stream feature view named {name!r} in {store.repo_path}; it has {sorted(views)}"
        raise RepoError(msg)
    return stream_view_spec(views[name])


def _repo_definitions(repo: Path) -> list[StreamFeatureView]:
    """The stream views a repo's Python files define, parsed by Feast as ``feast apply`` does.

    Feast imports each file as a module named by its path relative to the
    working directory, so this runs in ``repo`` with ``repo`` on ``sys.path``.
    """
    from feast.repo_operations import parse_repo

    before = set(sys.modules)
    sys.path.insert(0, str(repo))
    try:
        with contextlib.chdir(repo):
            return list(parse_repo(repo).stream_feature_views)
    finally:
        sys.path.remove(str(repo))
        # Forget the repo's modules ("features"), so another repo's files load afresh.
        for module in [m for m in set(sys.modules) - before if _defined_in(m, repo)]:
            del sys.modules[module]


def _defined_in(module: str, repo: Path) -> bool:
    path = getattr(sys.modules.get(module), "__file__", None) or ""
    return path.startswith(f"{repo}/")


def from_generator(
    spec: StreamViewSpec,
    events: int = 50_000,
    *,
    users: int = 2000,
    seed: int = 7,
    end_ns: int | None = None,
    span_s: float = 86_400.0,
) -> EventSample:
    """Events of :func:`featureflow.events.sample.generate` (what ``featureflow produce`` sends).

    ``end_ns`` (epoch ns) fixes the time span, so the same arguments give the
    same events; the default ends the span now. Arrival order is production order.
    """
    generated = sample.generate(events, users=users, seed=seed, end_ns=end_ns, span_s=span_s)
    columns: dict[str, pa.Array] = {
        spec.join_key: pa.array(generated.user_id, pa.int64()),
        EVENT_NS: pa.array(generated.event_ns, pa.int64()),
    }
    generated_values = {
        "amount": pa.array(generated.amount, mask=np.isnan(generated.amount)),
        "merchant": pa.array(generated.merchant, pa.string()),
    }
    for name, arrow_type in json_fields(spec).items():
        if name in (spec.join_key, spec.timestamp_field):
            continue
        if name not in generated_values:
            msg = (
                f"the sample generator makes no field {name!r}; it makes {sorted(generated_values)}"
            )
            raise RepoError(msg)
        columns[name] = generated_values[name].cast(arrow_type)
    columns[PARTITION] = pa.array(np.zeros(len(generated), np.int32))
    columns[OFFSET] = pa.array(np.arange(len(generated), dtype=np.int64))
    return EventSample(
        pa.table(columns),
        f"generated sample ({len(generated):,} events, {users:,} users, seed {seed})",
    )


def from_parquet(path: str | Path, spec: StreamViewSpec) -> EventSample:
    """Events from Parquet: the join key, the view's timestamp field and its value fields.

    The timestamp field may be an Arrow timestamp or int64 epoch milliseconds;
    ``partition``/``offset`` are kept when present, else row order is arrival order.
    """
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    names = set(table.column_names)
    stamp = table.column(spec.timestamp_field)
    if pa.types.is_timestamp(stamp.type):
        event_ns = stamp.cast(pa.timestamp("ns", "UTC")).cast(pa.int64())
    else:
        event_ns = pc.multiply(stamp.cast(pa.int64()), NS_PER_MS)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        spec.join_key: table.column(spec.join_key).cast(pa.int64()),
        EVENT_NS: event_ns,
    }
    for name, arrow_type in json_fields(spec).items():
        if name not in (spec.join_key, spec.timestamp_field) and name in names:
            columns[name] = table.column(name).cast(arrow_type)
    if PARTITION in names and OFFSET in names:
        columns[PARTITION] = table.column(PARTITION).cast(pa.int32())
        columns[OFFSET] = table.column(OFFSET).cast(pa.int64())
    else:
        columns[PARTITION] = pa.array(np.zeros(table.num_rows, np.int32))
        columns[OFFSET] = pa.array(np.arange(table.num_rows, dtype=np.int64))
    return EventSample(pa.table(columns), f"Parquet {path} ({table.num_rows:,} events)")


def kafka_has_records(bootstrap: str, topic: str, timeout_s: float = 3.0) -> bool:
    """Whether a broker answers on ``bootstrap`` (in ``timeout_s`` s), with records in ``topic``."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "featureflow-explore", "log_level": 0}
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        partitions = metadata.topics[topic].partitions
        if metadata.topics[topic].error is not None or not partitions:
            return False
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
            if high > low:
                return True
        return False
    except KafkaException:
        return False
    finally:
        consumer.close()


def from_kafka(
    spec: StreamViewSpec,
    *,
    bootstrap: str | None = None,
    topic: str | None = None,
    max_events: int | None = 200_000,
    timeout_s: float = 60.0,
) -> EventSample:
    """A bounded read of the view's Kafka topic from the earliest offsets, parsed as the job does.

    Reads every partition up to the end offsets it had when the read began,
    at most ``max_events`` records in all (``None``: no cap), within ``timeout_s``
    seconds. Records the job would skip (not a JSON object, missing or
    non-integer key, a timestamp neither RFC 3339 text nor epoch ms, a field of
    the wrong type) are counted by reason in ``skipped`` and left out.

    Raises:
        KafkaBrokerError: the broker does not answer, or the topic is missing.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    bootstrap = bootstrap or spec.bootstrap_servers
    topic = topic or spec.topic
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"featureflow-explore-{time.time_ns()}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    records: list[tuple[int, int, bytes | None]] = []
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=min(timeout_s, 10.0))
        except KafkaException as error:
            msg = (
                f"no Kafka broker answers on {bootstrap} ({error}); start one: featureflow kafka up"
            )
            raise KafkaBrokerError(msg) from error
        described = metadata.topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            msg = f"Kafka topic {topic!r} does not exist on {bootstrap}; produce events first"
            raise KafkaBrokerError(msg)
        ends: dict[int, int] = {}
        for partition in sorted(described.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout_s)
            if high > low:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout_s
        cap = max_events if max_events is not None else sum(ends.values())
        while ends and len(records) < cap and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                if message.error() is not None:
                    continue
                partition, offset = message.partition(), message.offset()
                if partition is None or offset is None:
                    continue
                if partition in ends and offset < ends[partition]:
                    records.append((partition, offset, message.value()))
                    if offset + 1 >= ends[partition]:
                        del ends[partition]
        records = records[:cap]
    finally:
        consumer.close()
    table, skipped = parse_records(records, spec)
    return EventSample(
        table, f"Kafka topic {topic!r} on {bootstrap} ({len(records):,} records)", skipped
    )


def parse_records(
    records: list[tuple[int, int, bytes | None]], spec: StreamViewSpec
) -> tuple[pa.Table, dict[str, int]]:
    """(partition, offset, JSON value) records -> events table, and unusable records by reason.

    The stream job's own parser decodes the values
    (:class:`~featureflow.events.json_records.JsonRecordParser`) and the checks
    run in the job's order with its reasons (:mod:`featureflow.events.reasons`),
    so a notebook skips the records the job dead-letters. One difference:
    RFC 3339 text is parsed by pandas here and by Spark in the job (Spark also
    takes a few looser spellings).
    """
    parser = JsonRecordParser(
        ddl.canonical_fields(spec.json_schema),
        spec.join_key,
        spec.timestamp_field,
    )
    parsed = parser(pa.array([raw for _, _, raw in records], pa.binary()))
    event_ns, stamp_reason = _event_ns(parsed.column(STAMP).to_pylist())
    stamps = StampReading(event_ns, stamp_reason, np.zeros(len(records), dtype=bool))
    checked = first_failing(parsed, parser.fields, spec.join_key, spec.timestamp_field, stamps)
    usable = checked.reason.is_null().to_numpy(zero_copy_only=False)
    counted = pc.value_counts(checked.reason.drop_null())
    skipped: dict[str, int] = {
        str(entry["values"]): int(entry["counts"]) for entry in counted.to_pylist()
    }
    keep = pa.array(usable)
    columns: dict[str, pa.Array] = {
        spec.join_key: parsed.column(spec.join_key).combine_chunks().cast(pa.int64()).filter(keep),
        EVENT_NS: pa.array(event_ns[usable], pa.int64()),
    }
    fields = json_fields(spec)
    for name, _ in parser.fields:
        if name not in (spec.join_key, spec.timestamp_field):
            columns[name] = parsed.column(name).combine_chunks().cast(fields[name]).filter(keep)
    columns[PARTITION] = pa.array(np.array([p for p, _, _ in records], np.int32)[usable])
    columns[OFFSET] = pa.array(np.array([o for _, o, _ in records], np.int64)[usable])
    return pa.table(columns), skipped


_MILLIS = re.compile(r"^-?[0-9]+$")


def _event_ns(stamps: list[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """Epoch ns of each timestamp text (epoch milliseconds or RFC 3339), and why not
    (missing, out of range or not a timestamp, :mod:`~featureflow.events.reasons`; ""
    when the text is a timestamp)."""
    import pandas as pd

    event_ns = np.zeros(len(stamps), np.int64)
    why = np.full(len(stamps), "", dtype=object)
    texts: list[str] = []
    at: list[int] = []
    for i, stamp in enumerate(stamps):
        if stamp is None:
            why[i] = reasons.MISSING_TIMESTAMP
        elif _MILLIS.match(stamp):
            millis = int(stamp)
            if abs(millis) > reasons.MAX_ABS_MILLIS:
                why[i] = reasons.OUT_OF_RANGE
            else:
                event_ns[i] = millis * NS_PER_MS
        else:
            texts.append(stamp)
            at.append(i)
    parsed = pd.to_datetime(pd.Series(texts, dtype=object), utc=True, format="ISO8601",
                            errors="coerce")  # fmt: skip
    ok = parsed.notna().to_numpy()
    epoch = pd.Timestamp(0, tz="UTC")
    ns = parsed.fillna(epoch).dt.as_unit("ns").astype("int64").to_numpy()
    rows = np.asarray(at, dtype=np.int64)
    event_ns[rows[ok]] = ns[ok]
    why[rows[~ok]] = reasons.NOT_A_TIMESTAMP
    return event_ns, why


def history_root(repo_path: str | Path, offline_path: str | None = None) -> str:
    """The job's per-event history root: ``--offline-path``, else ``<repo>/data/offline``."""
    return offline_path or f"{Path(repo_path).resolve()}/data/offline"


def has_history(root: str, view: str) -> bool:
    """Whether the stream job has written history of ``view`` under ``root`` (a local path)."""
    return any(Path(root, view).glob("batch=*/*.parquet"))


def history(root: str, spec: StreamViewSpec) -> pa.Table:
    """The stream job's per-event features of ``spec``: join key, ``event_ns``, ``batch``, features.

    Rows are sorted by batch; ``event_ns`` (int64 epoch ns) comes from the
    view's timestamp field, which the job stores at microsecond precision.
    """
    from featureflow.spark.offline_sink import read_history

    table = read_history(root, spec.name)
    if table.num_rows == 0:
        msg = f"no history of view {spec.name!r} under {root}: run the stream job first (make demo)"
        raise RepoError(msg)
    stamps = table.column(spec.timestamp_field).cast(pa.timestamp("ns", "UTC")).cast(pa.int64())
    columns = {
        spec.join_key: table.column(spec.join_key).cast(pa.int64()),
        EVENT_NS: stamps,
        BATCH: table.column(BATCH).cast(pa.int64()),
    }
    columns.update({name: table.column(name) for name in spec.feature_names})
    result = pa.table(columns)
    return result.take(pc.sort_indices(result, [(BATCH, "ascending")]))
