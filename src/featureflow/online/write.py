"""``write``: pick the store's bulk writer, or fall back to Feast's own writer."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
from feast import FeatureStore
from feast.infra.online_stores.helpers import compute_table_id, compute_versioned_name
from feast.infra.online_stores.redis import RedisOnlineStoreConfig, RedisType
from feast.infra.online_stores.sqlite import SqliteOnlineStoreConfig
from redis.exceptions import AuthenticationError as RedisAuthenticationError
from redis.exceptions import AuthorizationError as RedisAuthorizationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from featureflow.errors import OnlineStoreError, OnlineStoreUnavailableError
from featureflow.online import redis as redis_store
from featureflow.online import sqlite as sqlite_store
from featureflow.online.batch import prepare, view_layout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriteStats:
    """What one ``write`` call did."""

    store: str
    """``"sqlite"``, ``"redis"``, or ``"feast"`` when Feast's own writer was used."""
    rows: int
    """Rows in the table given to ``write``."""
    entities: int
    """Distinct entities in it (only the latest row of each is written)."""
    written: int
    """Entities whose stored features were created or replaced."""
    skipped: int
    """Entities left alone because the store already held a newer event time."""
    seconds: float
    """Wall time of the call, seconds."""

    @property
    def rows_per_second(self) -> float:
        """Input rows per second of wall time."""
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


def _store_kind(store: FeatureStore) -> str | None:
    online = store.config.online_store
    if isinstance(online, SqliteOnlineStoreConfig):
        if online.vector_enabled or getattr(online, "enable_openai_compatible_store", False):
            return None  # extra columns (vector_value, value_num) featureflow does not fill
        return "sqlite"
    if isinstance(online, RedisOnlineStoreConfig):
        # cluster/sentinel: keys of one script call may live on different nodes
        return "redis" if online.redis_type == RedisType.redis else None
    return None


_REFUSED_CREDENTIALS = (RedisAuthenticationError, RedisAuthorizationError)
"""redis-py raises these as kinds of ConnectionError; a wrong password is no outage."""


def _unavailable(cause: BaseException | None) -> bool:
    """Whether a store failure is an outage (worth retrying) rather than a wrong setting or
    value: a timeout, a refused or dropped connection, or SQLite's lock wait run out. Refused
    credentials are a wrong setting."""
    if isinstance(cause, sqlite3.OperationalError):
        return "locked" in str(cause) or "busy" in str(cause)
    if isinstance(cause, _REFUSED_CREDENTIALS):
        return False
    return isinstance(cause, OSError | RedisConnectionError | RedisTimeoutError)


def _credentials_refused(error: BaseException) -> OnlineStoreError:
    return OnlineStoreError(
        f"Redis refused the credentials ({str(error).rstrip('.')}): check the password (and the "
        "user) in the online store's connection_string in feature_store.yaml"
    )


def write(store: FeatureStore, view: str, table: pa.Table) -> WriteStats:
    """Write ``table`` into the online store of ``store`` for feature view ``view``.

    ``table`` holds the view's join keys, its event timestamp column (the source's
    ``timestamp_field``; any Arrow timestamp unit, naive means UTC), every feature
    column of the view (cast to the view's schema) and, when the source declares
    one, the created timestamp column. Per entity only the latest row is written,
    and only when it is not older than what the store holds; the bytes are exactly
    Feast's, so ``store.get_online_features`` reads them back.

    The ordering rule, the same on both stores: a row replaces the stored one
    when its event time is newer **or equal**; an older event time never
    replaces a newer one. Equal times replace because the stream job rewrites
    an entity's features for the same latest event when a later micro-batch
    brings an older (out-of-order) event into its windows; micro-batches write
    in order (Spark starts one only after committing the one before), so among
    equal event times the later batch wins, and a replayed batch rewrites what
    it wrote. SQLite keeps event times in whole seconds (Feast's layout), so
    there "equal" means the same second.

    SQLite: one transaction, all or nothing. Redis (``redis_type: redis``): every
    entity is all old or all new (its check and write run in one script or one
    MULTI/EXEC; see :mod:`featureflow.online.redis`). Any other store,
    or a view with types featureflow does not encode, goes to Feast's
    ``write_to_online_store``
    (logged; Feast's writer does not keep the newer value on SQLite).

    Raises:
        OnlineStoreUnavailableError: the store timed out, refused or dropped the
            connection, or (SQLite) stayed locked past the lock wait: transient.
        OnlineStoreError: a column is missing or cannot be cast, a join key or
            event timestamp is null, the online table is missing, or the store failed.
    """
    started = time.perf_counter()
    fv, layout = view_layout(store, view)
    config = store.config
    kind = _store_kind(store)
    reason = (
        f"online store type {config.online_store.type!r}" if kind is None
        else layout.unsupported(config.entity_key_serialization_version)
    )
    if kind is None or reason is not None:
        log.warning(
            "featureflow.online: %s is not supported by the bulk writer; writing view %r "
            "with Feast's write_to_online_store (slower, no event-time ordering on SQLite)",
            reason, view,
        )
        store.write_to_online_store(view, df=table.to_pandas())
        return WriteStats("feast", table.num_rows, table.num_rows, table.num_rows, 0,
                          time.perf_counter() - started)

    batch = prepare(table, layout, config.entity_key_serialization_version)
    versioning = config.registry.enable_online_feature_view_versioning
    try:
        if kind == "sqlite":
            written, skipped = sqlite_store.write(
                config, compute_table_id(config.project, fv, versioning), batch
            )
        else:
            written, skipped = redis_store.write(
                config.online_store, config.project, compute_versioned_name(fv, versioning),
                batch,
            )
    except OnlineStoreError as error:
        if isinstance(error.__cause__, _REFUSED_CREDENTIALS):
            raise _credentials_refused(error) from error.__cause__
        if _unavailable(error.__cause__):
            service = "SQLite" if kind == "sqlite" else "Redis"
            raise OnlineStoreUnavailableError(service, str(error)) from error.__cause__
        raise
    except _REFUSED_CREDENTIALS as error:  # taking a pooled connection
        raise _credentials_refused(error) from error
    except (RedisConnectionError, RedisTimeoutError) as error:
        raise OnlineStoreUnavailableError("Redis", str(error)) from error
    return WriteStats(kind, table.num_rows, batch.n, written, skipped,
                      time.perf_counter() - started)


def write_views(store: FeatureStore, tables: Mapping[str, pa.Table]) -> dict[str, WriteStats]:
    """:func:`write` of several views at once (view name -> table), one stats per view.

    On Redis (``redis_type: redis``) every entity gets one ``HSET`` for all the views
    (Feast's layout keeps one hash per entity key and project, shared by the views),
    with :func:`write`'s ordering rule applied per view: the hash takes a view's
    fields only when that view's row is not older than the stored one. Every other
    store writes the views one after the other (SQLite: one table per view).

    Raises:
        OnlineStoreUnavailableError, OnlineStoreError: as :func:`write`.
    """
    if _store_kind(store) != "redis" or len(tables) < 2:
        return {view: write(store, view, table) for view, table in tables.items()}
    started = time.perf_counter()
    config = store.config
    versioning = config.registry.enable_online_feature_view_versioning
    batches = []
    for view, table in tables.items():
        fv, layout = view_layout(store, view)
        if layout.unsupported(config.entity_key_serialization_version) is not None:
            return {view: write(store, view, table) for view, table in tables.items()}
        batch = prepare(table, layout, config.entity_key_serialization_version)
        batches.append((compute_versioned_name(fv, versioning), batch))
    try:
        counts = redis_store.write_views(config.online_store, config.project, batches)
    except OnlineStoreError as error:
        if isinstance(error.__cause__, _REFUSED_CREDENTIALS):
            raise _credentials_refused(error) from error.__cause__
        if _unavailable(error.__cause__):
            raise OnlineStoreUnavailableError("Redis", str(error)) from error.__cause__
        raise
    except _REFUSED_CREDENTIALS as error:  # taking a pooled connection
        raise _credentials_refused(error) from error
    except (RedisConnectionError, RedisTimeoutError) as error:
        raise OnlineStoreUnavailableError("Redis", str(error)) from error
    seconds = time.perf_counter() - started
    return {
        view: WriteStats("redis", table.num_rows, batch.n, written, skipped, seconds)
        for (view, table), (_, batch), (written, skipped) in zip(
            tables.items(), batches, counts, strict=True
        )
    }
