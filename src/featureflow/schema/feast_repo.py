"""Feast as the schema gate sees it: views of a repo or a registry, and ``apply``.

Everything Feast-specific the gate needs lives here; the checks work on the
plain :class:`ViewSpec` built from Feast's own objects. Loading a repo uses
Feast's ``parse_repo`` (as ``feast apply`` does); views read back from the
registry are normalised to the same shape (entity columns are keys). The
registry is read with Feast's ``FileRegistryStore``, which never writes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featureflow.errors import SchemaError
from featureflow.schema.typemap import ddl_column_types

if TYPE_CHECKING:
    from feast.repo_config import RepoConfig
    from feast.types import FeastType

FS_YAML = "feature_store.yaml"
VERSION_TAG = "schema_version"


@dataclass(frozen=True)
class GatedAggregation:
    """One Feast ``Aggregation`` as the schema gate checks it: function, input column and
    the feature it produces (the window does not matter to types; the stream job's
    view of an aggregation, with its window, is :class:`featureflow.repo.AggregationSpec`)."""

    function: str
    column: str
    output: str


@dataclass(frozen=True)
class ViewSpec:
    """A feature view as the gate checks it."""

    name: str
    materialised: bool  # featureflow's stream job writes it (a StreamFeatureView)
    timestamp_field: str
    join_keys: tuple[tuple[str, FeastType], ...]
    features: tuple[tuple[str, FeastType], ...]
    aggregations: tuple[GatedAggregation, ...] = ()
    source_columns: dict[str, FeastType] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def version(self) -> str | None:
        """The ``schema_version`` tag, or None."""
        return self.tags.get(VERSION_TAG)


def _source_columns(view: Any) -> dict[str, FeastType]:
    source = getattr(view, "stream_source", None)
    options = getattr(source, "kafka_options", None)
    message_format = getattr(options, "message_format", None)
    ddl = getattr(message_format, "schema_json", None)
    return ddl_column_types(ddl) if isinstance(ddl, str) else {}


def view_spec(view: Any, join_keys: dict[str, tuple[str, FeastType]] | None = None) -> ViewSpec:
    """A :class:`ViewSpec` of a Feast ``FeatureView`` or ``StreamFeatureView``.

    Join key types come from the view's entity columns; ``join_keys`` (entity
    name -> (join key, type)) fills in keys a view does not list as columns.
    """
    from feast.stream_feature_view import StreamFeatureView

    keys = {f.name: f.dtype for f in view.entity_columns}
    for entity in view.entities:
        if entity in (join_keys or {}):
            key, dtype = (join_keys or {})[entity]
            keys.setdefault(key, dtype)
    aggregations = tuple(
        GatedAggregation(a.function, a.column, a.resolved_name(a.time_window))
        for a in getattr(view, "aggregations", None) or []
    )
    return ViewSpec(
        name=view.name,
        materialised=isinstance(view, StreamFeatureView),
        timestamp_field=getattr(view, "timestamp_field", "") or "",
        join_keys=tuple(keys.items()),
        # A view read back from its protobuf (the registry) lists the entity
        # columns among its features too; they are keys, not features.
        features=tuple((f.name, f.dtype) for f in view.features if f.name not in keys),
        aggregations=aggregations,
        source_columns=_source_columns(view),
        tags=dict(view.tags),
    )


def load_config(repo_path: Path) -> RepoConfig:
    """The repo's ``feature_store.yaml``; raises SchemaError when there is none."""
    from feast.repo_config import load_repo_config

    yaml_path = repo_path / FS_YAML
    if not yaml_path.is_file():
        msg = f"{repo_path} is not a Feast repo: {FS_YAML} is missing (pass --repo PATH)"
        raise SchemaError(msg)
    return load_repo_config(repo_path.resolve(), yaml_path)


@contextlib.contextmanager
def _repo_imports(repo_path: Path) -> Iterator[None]:
    """Import the repo's modules as ``feast apply`` does, then forget them.

    Feast imports repo files by module name relative to the working directory;
    dropping them afterwards lets one process load several repos.
    """
    cwd = Path.cwd()
    root = str(repo_path.resolve())
    before = set(sys.modules)
    sys.path.insert(0, root)
    os.chdir(root)
    try:
        yield
    finally:
        os.chdir(cwd)
        with contextlib.suppress(ValueError):
            sys.path.remove(root)
        for name in set(sys.modules) - before:
            module_file = getattr(sys.modules[name], "__file__", None) or ""
            if module_file.startswith(root + os.sep):
                del sys.modules[name]


def load_repo_views(repo_path: Path) -> list[ViewSpec]:
    """The feature views a repo defines, as the registry would hold them after apply."""
    from feast.feature_view import DUMMY_ENTITY_NAME
    from feast.repo_operations import parse_repo
    from feast.types import from_value_type

    load_config(repo_path)
    root = repo_path.resolve()
    with _repo_imports(root):
        try:
            contents = parse_repo(root)
        except Exception as error:  # a user's repo can raise anything on import
            msg = f"cannot load the Feast definitions of {repo_path}: {error}"
            raise SchemaError(msg) from error
    join_keys = {
        e.name: (e.join_key, from_value_type(e.value_type))
        for e in contents.entities
        if e.join_key and e.name != DUMMY_ENTITY_NAME
    }
    views = [view_spec(sfv, join_keys) for sfv in contents.stream_feature_views]
    views += [view_spec(fv, join_keys) for fv in contents.feature_views]
    return views


def registry_path(repo_path: Path) -> Path:
    """Where the repo's file registry lives (it may not exist yet)."""
    config = load_config(repo_path)
    if config.registry.registry_type != "file":
        msg = (
            f"the schema gate reads file registries only; {repo_path / FS_YAML} uses "
            f"registry_type {config.registry.registry_type!r}"
        )
        raise SchemaError(msg)
    path = Path(config.registry.path)
    return path if path.is_absolute() else repo_path.resolve() / path


def load_registry_views(repo_path: Path, registry: Path | None = None) -> list[ViewSpec] | None:
    """The views of the repo's project in a registry file; None when the file does not exist."""
    from feast.feature_view import FeatureView
    from feast.protos.feast.core.Registry_pb2 import Registry as RegistryProto
    from feast.stream_feature_view import StreamFeatureView

    project = load_config(repo_path).project
    path = registry if registry is not None else registry_path(repo_path)
    if not path.is_file():
        return None
    proto = RegistryProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as error:  # protobuf raises DecodeError and friends
        msg = f"cannot read the Feast registry {path}: {error}"
        raise SchemaError(msg) from error
    views = [
        view_spec(StreamFeatureView.from_proto(p))
        for p in proto.stream_feature_views
        if p.spec.project == project
    ]
    views += [
        view_spec(FeatureView.from_proto(p))
        for p in proto.feature_views
        if p.spec.project == project
    ]
    return views


def apply_repo(repo_path: Path) -> None:
    """Apply the repo to its registry exactly as ``feast apply`` does."""
    from feast.repo_operations import apply_total

    config = load_config(repo_path)
    root = repo_path.resolve()
    with _repo_imports(root):
        apply_total(config, root, skip_source_validation=False)
