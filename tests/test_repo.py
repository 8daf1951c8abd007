"""How featureflow reads Feast views: rolling, tiled and session views, JSON and Avro sources."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from feast import Entity, Field, FileSource, KafkaSource, StreamFeatureView
from feast.aggregation import Aggregation
from feast.data_format import AvroFormat, JsonFormat
from feast.types import Float64, Int64, UnixTimestamp
from feast.value_type import ValueType

from featureflow.errors import RepoError
from featureflow.events.avro import TRANSACTION_SCHEMA
from featureflow.repo import (
    DEFAULT_SESSION_MAX_LENGTH_NS,
    SESSION_DURATION,
    SESSION_MAX_LENGTH_TAG,
    SESSION_START,
    stream_view_spec,
)

USER = Entity(name="user", join_keys=["user_id"], value_type=ValueType.INT64)
GAP = timedelta(minutes=30)


def _source(message_format: object = None) -> KafkaSource:
    return KafkaSource(
        name="events",
        kafka_bootstrap_servers="127.0.0.1:9092",
        topic="events",
        timestamp_field="event_timestamp",
        message_format=message_format
        or JsonFormat(schema_json="user_id long, amount double, event_timestamp string"),
        batch_source=FileSource(name="b", path="x.parquet", timestamp_field="event_timestamp"),
        watermark_delay_threshold=timedelta(minutes=5),
    )


def _view(
    aggregations: list[Aggregation], fields: list[Field], **kwargs: object
) -> StreamFeatureView:
    return StreamFeatureView(
        name="v", source=kwargs.pop("source", _source()), entities=[USER], mode="spark",
        timestamp_field="event_timestamp", aggregations=aggregations,
        schema=[Field(name="user_id", dtype=Int64), *fields], **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def _session_fields() -> list[Field]:
    return [Field(name=SESSION_START, dtype=UnixTimestamp),
            Field(name=SESSION_DURATION, dtype=Float64), Field(name="n", dtype=Int64)]  # fmt: skip


def test_a_tiled_view_carries_its_hop() -> None:
    aggregation = Aggregation(column="amount", function="sum", time_window=timedelta(hours=1))
    spec = stream_view_spec(
        _view([aggregation], [Field(name="sum_amount_3600s", dtype=Float64)],
              enable_tiling=True, tiling_hop_size=timedelta(minutes=5))
    )  # fmt: skip
    assert spec.tile_hop_ns == 300 * 10**9
    assert spec.session_gap_ns is None
    assert spec.state_horizon_ns == 3600 * 10**9 + 300 * 10**9


def test_a_session_view_takes_the_gap_and_names_from_its_aggregations() -> None:
    aggregation = Aggregation(column="amount", function="count", time_window=GAP, name="n")
    spec = stream_view_spec(
        _view([aggregation], _session_fields(), tags={"featureflow.window": "session"})
    )
    assert spec.is_session_view and spec.session_gap_ns == 1800 * 10**9
    assert spec.feature_names == (SESSION_START, SESSION_DURATION, "n")
    assert spec.session_max_length_ns == DEFAULT_SESSION_MAX_LENGTH_NS == 86_400 * 10**9
    assert spec.state_horizon_ns == spec.session_max_length_ns


def test_a_session_view_takes_its_max_length_from_a_tag() -> None:
    aggregation = Aggregation(column="amount", function="count", time_window=GAP, name="n")
    tags = {"featureflow.window": "session", SESSION_MAX_LENGTH_TAG: "90m"}
    spec = stream_view_spec(_view([aggregation], _session_fields(), tags=tags))
    assert spec.session_max_length_ns == 90 * 60 * 10**9


@pytest.mark.parametrize(
    ("aggregations", "fields", "tags", "error"),
    [
        (
            [Aggregation(column="amount", function="count", time_window=GAP, name="n"),
             Aggregation(column="amount", function="sum", time_window=2 * GAP, name="s")],
            [*_session_fields(), Field(name="s", dtype=Float64)],
            {"featureflow.window": "session"},
            "must be the same",
        ),
        (
            [Aggregation(column="amount", function="count", time_window=GAP, name="n")],
            [Field(name="n", dtype=Int64)],
            {"featureflow.window": "session"},
            r"declare the fields \['session_start', 'session_duration_s'\]",
        ),
        (
            [Aggregation(column="amount", function="count", time_window=GAP, name="n")],
            [Field(name="n", dtype=Int64)],
            {"featureflow.window": "tumbling"},
            "'tumbling' is unknown",
        ),
        (
            [Aggregation(column="amount", function="count", time_window=GAP, name="n")],
            _session_fields(),
            {"featureflow.window": "session", "featureflow.session_max_length": "a day"},
            "featureflow.session_max_length: cannot parse duration 'a day'",
        ),
        (
            [Aggregation(column="amount", function="count", time_window=GAP, name="n")],
            _session_fields(),
            {"featureflow.window": "session", "featureflow.session_max_length": "0h"},
            "duration must be positive",
        ),
        (
            [Aggregation(column="amount", function="count", time_window=GAP)],
            [Field(name="count_amount_1800s", dtype=Int64)],
            {"featureflow.session_max_length": "2h"},
            "applies to session views only",
        ),
    ],
)  # fmt: skip
def test_inconsistent_session_views_are_refused_with_the_reason(
    aggregations: list[Aggregation], fields: list[Field], tags: dict[str, str], error: str
) -> None:
    with pytest.raises(RepoError, match=error):
        stream_view_spec(_view(aggregations, fields, tags=tags))


def test_an_avro_source_gives_its_schema_and_the_fields_as_spark_ddl() -> None:
    aggregation = Aggregation(column="amount", function="sum", time_window=timedelta(hours=1))
    spec = stream_view_spec(
        _view([aggregation], [Field(name="sum_amount_3600s", dtype=Float64)],
              source=_source(AvroFormat(schema_json=TRANSACTION_SCHEMA)))
    )  # fmt: skip
    assert spec.avro_schema == TRANSACTION_SCHEMA
    assert spec.json_schema == (
        "user_id long, amount double, merchant string, event_timestamp long"
    )


def test_an_avro_field_of_an_unsupported_type_is_named() -> None:
    schema = json.dumps(
        {"type": "record", "name": "r",
         "fields": [{"name": "tags", "type": {"type": "map", "values": "string"}}]}
    )  # fmt: skip
    aggregation = Aggregation(column="amount", function="sum", time_window=timedelta(hours=1))
    view = _view([aggregation], [Field(name="sum_amount_3600s", dtype=Float64)],
                 source=_source(AvroFormat(schema_json=schema)))  # fmt: skip
    with pytest.raises(RepoError, match="Avro field 'tags'"):
        stream_view_spec(view)


_LOAD_STORE = """
import json, sys
if sys.argv[2] == "worker":
    import pyspark.worker  # noqa: F401  (what a Spark Python worker has loaded)
import typeguard
decorator = typeguard.typechecked
from featureflow.repo import load_store
store = load_store(sys.argv[1])
from feast import FeatureView
view = store.get_stream_feature_view("user_txn_stats")
print(json.dumps({
    "instrumented": "check_argument_types_internal" in FeatureView.__init__.__code__.co_names,
    "decorator_restored": typeguard.typechecked is decorator,
    "features": sorted(field.name for field in view.features),
}))
"""


def _load_store_in_a_new_process(repo: Path, role: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_STORE, str(repo), role],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    loaded: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_a_spark_worker_imports_feast_without_typeguard_and_reads_the_same_views(
    feature_repo_copy: Path,
) -> None:
    from featureflow.schema import apply_repo

    apply_repo(feature_repo_copy)
    worker = _load_store_in_a_new_process(feature_repo_copy, "worker")
    driver = _load_store_in_a_new_process(feature_repo_copy, "driver")
    assert driver["instrumented"] is True  # the driver and the CLI keep Feast's checks
    assert worker["instrumented"] is False
    assert worker["decorator_restored"] is True
    assert worker["features"] == driver["features"]
    assert len(worker["features"]) == 19  # type: ignore[arg-type]  # user_id + 18 aggregates
