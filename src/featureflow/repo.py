"""The Feast repo as featureflow sees it: which stream views to compute, and how.

Reads Feast's own objects (``FeatureStore``, ``StreamFeatureView``,
``KafkaSource``, ``Aggregation``) and reduces each stream view to a
:class:`StreamViewSpec` of plain values that Spark can ship to executors.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featureflow.errors import RepoError

if TYPE_CHECKING:
    from feast import FeatureStore, StreamFeatureView

NS_PER_S = 1_000_000_000

SESSION_TAG = "featureflow.window"
"""Tag that makes a StreamFeatureView a session view: ``{SESSION_TAG: "session"}``.

Feast has no session windows, so a session view is declared with Feast's own
objects: every ``Aggregation``'s ``time_window`` is the session gap (the same for
all), its ``name`` the feature, and the schema also declares the two fields every
session view gets, :data:`SESSION_START` and :data:`SESSION_DURATION`."""

SESSION_MAX_LENGTH_TAG = "featureflow.session_max_length"
"""Tag of a session view: the longest a session may last, a duration such as ``"24h"``,
``"90m"`` or ``"2d"`` (:func:`featureflow.ops.sessions`' ``max_length``). An event more
than this after its session's first event (strictly; ns) opens a new session even
within the gap. Default :data:`DEFAULT_SESSION_MAX_LENGTH_NS`."""

DEFAULT_SESSION_MAX_LENGTH_NS = 86_400 * NS_PER_S
"""A session view's maximum session length without the tag: 24 h (ns). It bounds the
stream job's state: an entity that is never idle for a gap still closes a session a
day, so the state holds at most a day (plus the watermark delay) of its events."""

SESSION_START = "session_start"
"""Feature of a session view: time of the session's first event (timestamp, UTC)."""

SESSION_DURATION = "session_duration_s"
"""Feature of a session view: last event time minus first event time, seconds (float)."""

# Feast aggregation function -> featureflow.ops aggregation.
_OPS_AGGREGATIONS = {
    "count": "count",
    "sum": "sum",
    "mean": "mean",
    "avg": "mean",
    "min": "min",
    "max": "max",
    "std": "std",
    "stddev": "std",
    "var": "var",
    "count_distinct": "count_distinct",
}


@dataclass(frozen=True)
class AggregationSpec:
    """One Feast ``Aggregation`` over one window.

    The frame of an event at time ``t`` is every event of the same entity with
    event time in ``[t - window_ns, t]`` (both ends included).
    """

    column: str
    function: str  # featureflow.ops name: count, sum, mean, min, max, std, ...
    window_ns: int
    output_name: str  # Feast's Aggregation.resolved_name(time_window), e.g. sum_amount_3600s


@dataclass(frozen=True)
class StreamViewSpec:
    """What the stream job needs of one ``StreamFeatureView``, as plain picklable values."""

    name: str
    join_key: str
    timestamp_field: str
    topic: str
    bootstrap_servers: str
    json_schema: str  # Spark DDL of the JSON events, e.g. "user_id long, amount double, ..."
    watermark_ns: int
    aggregations: tuple[AggregationSpec, ...]
    tile_hop_ns: int | None = None
    """Feast's ``tiling_hop_size`` when the view sets ``enable_tiling``: the frame of an
    event at ``t`` becomes the sawtooth ``[floor((t - W) / hop) * hop, t]`` (ns)."""
    avro_schema: str | None = None
    """The source's Avro schema (JSON text) when its messages are Avro
    (``AvroFormat``); ``json_schema`` then lists the same fields as Spark DDL."""
    session_gap_ns: int | None = None
    """Set for a session view (tag ``featureflow.window: session``): the inactivity gap
    (ns) that closes a session; its aggregations cover whole sessions, not windows."""
    session_max_length_ns: int = DEFAULT_SESSION_MAX_LENGTH_NS
    """Session view: the longest a session lasts (ns, tag :data:`SESSION_MAX_LENGTH_TAG`);
    an event with ``t - session_start > session_max_length_ns`` opens a new session.
    Ignored by rolling views."""

    @property
    def is_session_view(self) -> bool:
        return self.session_gap_ns is not None

    @property
    def state_horizon_ns(self) -> int:
        """How far before the watermark the events of a future frame can reach (ns).

        Rolling views: the largest window (a tiled frame starts up to one hop
        earlier). Session views: the maximum session length; the stream job keeps
        the events of open sessions (:func:`featureflow.window_state.session_outputs`),
        and a session that started more than that before the watermark is closed.
        """
        if self.session_gap_ns is not None:
            return self.session_max_length_ns
        return max(self.windows_ns) + (self.tile_hop_ns or 0)

    @property
    def windows_ns(self) -> tuple[int, ...]:
        """The distinct windows, ascending."""
        return tuple(sorted({agg.window_ns for agg in self.aggregations}))

    @property
    def value_columns(self) -> tuple[str, ...]:
        """The event columns the aggregations read, in first-use order."""
        return tuple(dict.fromkeys(agg.column for agg in self.aggregations))

    @property
    def feature_names(self) -> tuple[str, ...]:
        names = tuple(agg.output_name for agg in self.aggregations)
        return (SESSION_START, SESSION_DURATION, *names) if self.is_session_view else names


def _message_schemas(view_name: str, message_format: object) -> tuple[str, str | None]:
    """``json_schema`` (Spark DDL) and ``avro_schema`` of a KafkaSource's message format."""
    from feast.data_format import AvroFormat, JsonFormat

    if isinstance(message_format, JsonFormat):
        return str(message_format.schema_json), None
    if isinstance(message_format, AvroFormat):
        schema = str(message_format.schema_json)
        return _avro_fields_ddl(view_name, schema), schema
    kind = type(message_format).__name__
    msg = f"stream view {view_name!r}: featureflow reads JSON or Avro messages, got {kind}"
    raise RepoError(msg)


_AVRO_TO_DDL = {
    "long": "long", "int": "int", "double": "double", "float": "float",
    "string": "string", "boolean": "boolean", "bytes": "binary",
}  # fmt: skip


def _avro_fields_ddl(view_name: str, schema_json: str) -> str:
    """The Spark DDL of an Avro record schema's fields (nullable unions allowed)."""
    import json

    try:
        record = json.loads(schema_json)
        fields = record["fields"]
    except (ValueError, KeyError, TypeError) as error:
        msg = f"stream view {view_name!r}: the Avro schema is not a record schema: {error}"
        raise RepoError(msg) from error
    columns = []
    for field in fields:
        avro_type = field["type"]
        if isinstance(avro_type, list):  # ["null", T]
            avro_type = next((t for t in avro_type if t != "null"), "null")
        if isinstance(avro_type, dict):
            avro_type = avro_type.get("type")
        ddl = _AVRO_TO_DDL.get(avro_type) if isinstance(avro_type, str) else None
        if ddl is None:
            msg = (
                f"stream view {view_name!r}: Avro field {field['name']!r} has type "
                f"{field['type']!r}; featureflow reads {sorted(_AVRO_TO_DDL)} (or null unions)"
            )
            raise RepoError(msg)
        columns.append(f"{field['name']} {ddl}")
    return ", ".join(columns)


def _in_spark_worker() -> bool:
    """Whether this process is one of Spark's Python workers (they run ``pyspark.worker``)."""
    return "pyspark.worker" in sys.modules


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """typeguard's ``@typechecked`` as it is under ``python -O``: the target unchanged
    (used bare or with options)."""
    return _unchecked if target is None else target


def _import_feast_unchecked() -> None:
    """Import Feast without typeguard's run-time type checks of its definitions.

    Feast decorates ``FeatureView``, ``DataSource``, ``Entity`` and others with
    typeguard's ``@typechecked``, which re-parses and recompiles their source when the
    module is imported: 2.2 of the 3.3 s of CPU that ``import feast`` takes here
    (1.1 s without it), paid by the worker that writes a micro-batch's features before
    its first write. Spark's Python workers only read the registry's objects, which
    ``feast apply`` built and checked on the driver; typeguard turns the decorator off
    itself under ``python -O`` (for checks that "aren't meant to be run in
    production"). The decorator is restored once Feast is imported, so nothing else in
    the process loses its checks.
    """
    import typeguard

    checked = typeguard.typechecked
    typeguard.typechecked = _unchecked
    try:
        import feast  # noqa: F401
    finally:
        typeguard.typechecked = checked


def load_store(repo_path: str | Path) -> FeatureStore:
    """Feast's ``FeatureStore`` of the repo at ``repo_path`` (its ``feature_store.yaml``).

    In Spark's Python workers, Feast is imported without typeguard's instrumentation
    (:func:`_import_feast_unchecked`) when this is its first import there."""
    import warnings

    if _in_spark_worker() and "feast" not in sys.modules:
        _import_feast_unchecked()
    from feast import FeatureStore

    # Feast's import puts its own warning filters first; ours must come after it.
    warnings.filterwarnings("ignore", message="Stream feature views are experimental")
    path = Path(repo_path).resolve()
    if not (path / "feature_store.yaml").is_file():
        msg = f"{path} is not a Feast repo: it has no feature_store.yaml"
        raise RepoError(msg)
    return FeatureStore(repo_path=str(path))


_cached_stores: dict[str, FeatureStore] = {}
_cached_stores_lock = threading.Lock()


def cached_store(repo_path: str | Path) -> FeatureStore:
    """:func:`load_store`, once per process and repo: Spark reuses its Python workers
    across tasks, and opening a repo (registry, config) costs more than a batch's write."""
    key = str(Path(repo_path).resolve())
    with _cached_stores_lock:  # the driver's pass runs partitions on threads
        if key not in _cached_stores:
            _cached_stores[key] = load_store(key)
        return _cached_stores[key]


def stream_view_spec(view: StreamFeatureView) -> StreamViewSpec:
    """Reduce a Feast ``StreamFeatureView`` with a ``KafkaSource`` to a :class:`StreamViewSpec`."""
    from feast.data_source import KafkaSource

    source = view.stream_source
    if not isinstance(source, KafkaSource):
        kind = type(source).__name__
        msg = f"stream view {view.name!r}: featureflow reads Kafka sources, got {kind}"
        raise RepoError(msg)
    join_keys = [column.name for column in view.entity_columns]
    if len(join_keys) != 1:
        msg = (
            f"stream view {view.name!r}: exactly one entity join key is supported, got {join_keys}"
        )
        raise RepoError(msg)
    aggregations = []
    for aggregation in view.aggregations:
        function = _OPS_AGGREGATIONS.get(aggregation.function)
        if function is None:
            msg = (
                f"stream view {view.name!r}: aggregation function {aggregation.function!r} is not "
                f"supported; use one of {sorted(_OPS_AGGREGATIONS)}"
            )
            raise RepoError(msg)
        window = aggregation.time_window
        if window is None or window.total_seconds() <= 0:
            msg = (
                f"stream view {view.name!r}: aggregation "
                f"{aggregation.function}({aggregation.column}) needs a positive time_window"
            )
            raise RepoError(msg)
        aggregations.append(
            AggregationSpec(
                column=aggregation.column,
                function=function,
                window_ns=round(window.total_seconds() * NS_PER_S),
                output_name=aggregation.resolved_name(window),
            )
        )
    kafka = source.kafka_options
    watermark = kafka.watermark_delay_threshold
    json_schema, avro_schema = _message_schemas(view.name, kafka.message_format)
    tile_hop_ns, session_gap_ns = _window_kind(view, aggregations)
    return StreamViewSpec(
        tile_hop_ns=tile_hop_ns,
        session_gap_ns=session_gap_ns,
        session_max_length_ns=_session_max_length_ns(view),
        name=view.name,
        join_key=join_keys[0],
        timestamp_field=view.timestamp_field or source.timestamp_field,
        topic=kafka.topic,
        bootstrap_servers=kafka.kafka_bootstrap_servers,
        json_schema=json_schema,
        avro_schema=avro_schema,
        watermark_ns=round(watermark.total_seconds() * NS_PER_S) if watermark else 0,
        aggregations=tuple(aggregations),
    )


def _window_kind(
    view: StreamFeatureView, aggregations: list[AggregationSpec]
) -> tuple[int | None, int | None]:
    """``tile_hop_ns`` and ``session_gap_ns`` of the view, checked for consistency."""
    kind = (view.tags or {}).get(SESSION_TAG, "rolling")
    if kind == "rolling":
        hop = view.tiling_hop_size if view.enable_tiling else None
        if hop is not None and hop.total_seconds() <= 0:
            msg = f"stream view {view.name!r}: tiling_hop_size must be positive, got {hop}"
            raise RepoError(msg)
        return (round(hop.total_seconds() * NS_PER_S) if hop else None), None
    if kind != "session":
        msg = (
            f"stream view {view.name!r}: tag {SESSION_TAG}={kind!r} is unknown; "
            "use 'session' or leave the tag out (rolling windows)"
        )
        raise RepoError(msg)
    gaps = {agg.window_ns for agg in aggregations}
    if len(gaps) != 1:
        msg = (
            f"stream view {view.name!r} is a session view: every aggregation's time_window is "
            f"the session gap and must be the same, got {sorted(gaps)} ns"
        )
        raise RepoError(msg)
    declared = {field.name for field in view.schema}
    missing = [name for name in (SESSION_START, SESSION_DURATION) if name not in declared]
    if missing:
        msg = f"stream view {view.name!r} is a session view: declare the fields {missing}"
        raise RepoError(msg)
    if view.enable_tiling:
        msg = f"stream view {view.name!r}: a session view can't be tiled (enable_tiling=True)"
        raise RepoError(msg)
    return None, gaps.pop()


def _session_max_length_ns(view: StreamFeatureView) -> int:
    """The view's :data:`SESSION_MAX_LENGTH_TAG` in ns, or the default."""
    from featureflow.ops._durations import duration_ns

    tags = view.tags or {}
    if SESSION_MAX_LENGTH_TAG not in tags:
        return DEFAULT_SESSION_MAX_LENGTH_NS
    if tags.get(SESSION_TAG) != "session":
        msg = (
            f"stream view {view.name!r}: tag {SESSION_MAX_LENGTH_TAG} applies to session views "
            f"only (tag {SESSION_TAG}: session)"
        )
        raise RepoError(msg)
    try:
        return duration_ns(tags[SESSION_MAX_LENGTH_TAG], f"tag {SESSION_MAX_LENGTH_TAG}")
    except (TypeError, ValueError) as error:
        msg = f"stream view {view.name!r}: {error}"
        raise RepoError(msg) from error


def stream_view_specs(store: FeatureStore, names: list[str] | None = None) -> list[StreamViewSpec]:
    """Specs of the repo's stream views with aggregations (all, or those named)."""
    views = {view.name: view for view in _repo_stream_views(store)}
    if names:
        missing = [name for name in names if name not in views]
        if missing:
            msg = f"no stream feature view named {missing} in the repo; it has {sorted(views)}"
            raise RepoError(msg)
        views = {name: views[name] for name in names}
    specs = [stream_view_spec(view) for view in views.values() if view.aggregations]
    if not specs:
        msg = "the repo declares no StreamFeatureView with aggregations: nothing to compute"
        raise RepoError(msg)
    return specs


def _repo_stream_views(store: FeatureStore) -> list[StreamFeatureView]:
    # The registry, i.e. what `featureflow apply` accepted through the schema
    # gate and what Feast serves from: the job computes exactly that.
    views = list(store.list_stream_feature_views())
    if not views:
        msg = (
            f"the registry of {store.repo_path} holds no stream feature views; run "
            "'featureflow apply --repo <repo> --schemas <schemas>' first"
        )
        raise RepoError(msg)
    return views
