"""Online-store write throughput: featureflow.online.write vs Feast's writer and vs the store alone.

One view of 18 float features (``{function}_amount_{seconds}s``, as the example
repo's ``user_txn_stats``) keyed by ``user_id`` (int64); 100,000 entities. Per
store (SQLite, a local redis-server):

- Feast's ``write_to_online_store`` and featureflow write the same table into
  their own empty stores; a sample read back with Feast's
  ``get_online_features`` must agree, so a fast but wrong writer cannot pass.
- ``--floor-rounds`` rounds, each on a fresh store: featureflow writes the
  table (new entities), a newer table (updates: every entity exists, the
  steady state of a stream) and the first table again (a stale replay: nothing
  may change); then the store's *floor* writes the same bytes in the same
  layout with no Python per row and no ordering check (``FLOORS`` says exactly
  how; it is saved with the results). Each round's ratios are featureflow's
  time over the floor's of the same round (new entities over the new-entity
  floor, updates over the update floor), wall and CPU; medians are reported,
  since on the shared 2-vCPU machine one round swings with the load.

Results: a markdown table on stdout and ``bench/results/online_write.json``.

Run: ``PYTHONPATH=src .venv/bin/python bench/online_write.py [--entities N]
[--floor-rounds R] [--stores sqlite,redis] [--no-feast] [--no-save]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sqlite3
import tempfile
import time
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import redis
from feast import Entity, FeatureStore, FeatureView, Field, FileSource, RepoConfig
from feast.infra.online_stores.redis import RedisOnlineStoreConfig
from feast.infra.online_stores.sqlite import SqliteOnlineStoreConfig
from feast.types import Float64, Int64
from feast.value_type import ValueType

from featureflow.infra.redis_server import RedisServer
from featureflow.online import write
from featureflow.online.write import WriteStats

RESULTS = Path(__file__).parent / "results" / "online_write.json"
FEATURES = [
    f"{fn}_amount_{seconds}s"
    for seconds in (600, 3600, 86400)
    for fn in ("count", "sum", "mean", "min", "max", "std")
]
VIEW = "user_txn_stats"
SAMPLE = 1_000


def make_store(root: Path, online_store: Any) -> FeatureStore:
    """A fresh Feast repo in ``root`` with the benchmark view applied."""
    config = RepoConfig(
        project="bench", provider="local", registry=str(root / "registry.db"),
        online_store=online_store, entity_key_serialization_version=3, repo_path=root,
    )
    store = FeatureStore(config=config)
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.INT64)
    view = FeatureView(
        name=VIEW, entities=[user], ttl=timedelta(days=2), online=True,
        schema=[Field(name="user_id", dtype=Int64)]
        + [Field(name=name, dtype=Float64) for name in FEATURES],
        source=FileSource(path=str(root / "unused.parquet"), timestamp_field="event_timestamp"),
    )
    store.apply([user, view])
    return store


def make_table(n: int, seed: int, start: str) -> pa.Table:
    """``n`` entities with random features and event times within one minute of ``start``."""
    rng = np.random.default_rng(seed)
    base = pd.Timestamp(start, tz="UTC")
    columns: dict[str, Any] = {
        "user_id": rng.permutation(n).astype(np.int64),
        "event_timestamp": base + pd.to_timedelta(rng.integers(0, 60_000_000, n), unit="us"),
    }
    for name in FEATURES:
        columns[name] = rng.normal(100.0, 30.0, n)
    return pa.Table.from_pandas(pd.DataFrame(columns), preserve_index=False)


def read_sample(store: FeatureStore, ids: np.ndarray) -> dict[str, list[Any]]:
    """Feast's own read of the sampled entities."""
    rows = [{"user_id": int(i)} for i in ids]
    return store.get_online_features(
        features=[f"{VIEW}:{name}" for name in FEATURES], entity_rows=rows
    ).to_dict()


FLOORS = {
    "sqlite": {
        "new": "an empty copy of Feast's table (same schema, primary key and entity_key index, "
               "same file) filled by one INSERT INTO copy SELECT * FROM a staging table with the "
               "same schema and indexes: SQLite's transfer optimisation (records and index "
               "entries copied as they are; measured 5-15 % below a plain INSERT ... SELECT from "
               "an unindexed staging table, which the earlier floor was)",
        "update": "the copy holding the older rows, then one INSERT ... SELECT ... ON CONFLICT "
                  "DO UPDATE (no ordering condition) from a staging table of the newer rows: the "
                  "same rows replaced in place (measured: UPDATE ... FROM the same staging table "
                  "within noise of it, INSERT OR REPLACE 2x slower)",
        "common": "rows are featureflow's own bytes, staged beforehand (untimed) in in-memory "
                  "TEMP tables in (entity_key, feature_name) order; timed: BEGIN IMMEDIATE, the "
                  "statement, COMMIT, with SQLite's default durability (journal_mode=DELETE, "
                  "synchronous=FULL) and the same 256 MiB page cache as featureflow's write",
    },
    "redis": {
        "new": "one plain HSET per entity (the 19 fields featureflow wrote) into an empty "
               "database, pre-built RESP bytes sent in one sendall on a raw socket, replies "
               "only counted",
        "update": "the same HSETs of the newer hashes over a database holding the older ones "
                  "(restored untimed)",
        "restore": "not the target's floor, recorded to question it: RESTORE of each hash's "
                   "DUMP payload (the same listpack hash, bytes copied as they are) into an "
                   "empty database, pre-built on a raw socket like the HSETs",
        "common": "no ordering check, no atomicity, no Python per entity",
    },
}
"""What each store's floor does, exactly (saved with the results)."""


class SqliteFloor:
    """SQLite alone writing featureflow's rows in Feast's layout (see ``FLOORS["sqlite"]``).

    ``after_new`` / ``after_update`` stage what featureflow's writes left in the table
    (untimed) on a connection kept open meanwhile (TEMP tables only, no lock held);
    ``measure`` times the new-entity and the update floor."""

    def __init__(self, store: FeatureStore) -> None:
        self.path = Path(store.config.repo_path) / store.config.online_store.path
        self.table = f"{store.project}_{VIEW}"
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        self.conn.execute(f"PRAGMA cache_size = -{256 * 1024}")
        self.conn.execute("PRAGMA temp_store = MEMORY")
        self.schema = self.conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = ?", (self.table,)).fetchone()[0]

    def _copy_of_schema(self, name: str, schema: str = "main") -> None:
        """An empty table ``schema.name`` like Feast's: same columns, primary key and
        ``entity_key`` index (the transfer optimisation needs the same indexes)."""
        self.conn.execute(self.schema.replace(f'"{self.table}"', f"{schema}.{name}", 1))
        self.conn.execute(f"CREATE INDEX {schema}.ix_{name} ON {name} (entity_key)")

    def _stage(self, name: str) -> None:
        self._copy_of_schema(name, "temp")
        self.conn.execute(f'INSERT INTO temp.{name} SELECT * FROM "{self.table}" '
                          "ORDER BY entity_key, feature_name")

    def after_new(self, _: FeatureStore) -> None:
        self._stage("older")

    def after_update(self, _: FeatureStore) -> None:
        self._stage("newer")

    def _timed(self, sql: str) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.thread_time()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(sql)
        self.conn.execute("COMMIT")
        return time.perf_counter() - wall, time.thread_time() - cpu

    def measure(self, _: FeatureStore) -> dict[str, float]:
        """Floor seconds (wall, and CPU of SQLite's thread) for new entities and updates."""
        try:
            self._copy_of_schema("floor_copy")
            new_s, new_cpu = self._timed("INSERT INTO floor_copy SELECT * FROM temp.older")
            update_s, update_cpu = self._timed(
                "INSERT INTO floor_copy SELECT * FROM temp.newer WHERE true "
                "ON CONFLICT(entity_key, feature_name) DO UPDATE SET value = excluded.value, "
                "value_text = excluded.value_text, event_ts = excluded.event_ts, "
                "created_ts = excluded.created_ts")
            return {"floor_s": new_s, "floor_cpu_s": new_cpu,
                    "update_floor_s": update_s, "update_floor_cpu_s": update_cpu}
        finally:
            for table in ("floor_copy", "temp.older", "temp.newer"):
                self.conn.execute(f"DROP TABLE IF EXISTS {table}")
            self.conn.close()


_last_cpu: dict[int, float] = {}


def _server_busy_s(client: redis.Redis) -> float:
    """CPU seconds (user + system) redis-server used since the last call.

    From ``INFO cpu``, so networking and parsing count and nothing counts twice:
    ``INFO commandstats`` adds the commands a ``MULTI``/``EXEC`` or a script runs to the
    ``EXEC``'s or ``EVALSHA``'s own time (measured: EXEC 0.36 s holding HSETs of 0.29 s),
    which doubled featureflow's figure."""
    cpu = client.info("cpu")
    used = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    key = id(client)
    last = _last_cpu.get(key, used)
    _last_cpu[key] = used
    return used - last


def _resp(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class RedisFloor:
    """Redis alone writing the hashes featureflow wrote (see ``FLOORS["redis"]``): the
    commands are built (untimed) from what featureflow's writes left in its database."""

    def __init__(self, store: FeatureStore, server_port: int) -> None:
        self.port = server_port
        self.db = int(store.config.online_store.connection_string.rsplit("db=", 1)[1])
        self.source = redis.Redis(port=server_port, db=self.db)
        self.target = redis.Redis(port=server_port, db=15)
        self.older: list[bytes] = []
        self.newer_hset: list[bytes] = []
        self.newer_restore: list[bytes] = []

    def _dumps(self) -> list[tuple[bytes, bytes]]:
        keys = list(self.source.scan_iter(count=10_000))
        pipe = self.source.pipeline(transaction=False)
        for key in keys:
            pipe.dump(key)
        return list(zip(keys, pipe.execute(), strict=True))

    def after_new(self, _: FeatureStore) -> None:
        self.older = [_resp([b"RESTORE", k, b"0", d]) for k, d in self._dumps()]

    def after_update(self, _: FeatureStore) -> None:
        dumps = self._dumps()
        self.newer_restore = [_resp([b"RESTORE", k, b"0", d]) for k, d in dumps]
        self.newer_hset = [
            _resp([b"HSET", k, *[x for kv in self.source.hgetall(k).items() for x in kv]])
            for k, _ in dumps]

    def _blast(self, commands: list[bytes]) -> tuple[float, float]:
        """(wall s, server CPU s) of ``commands`` sent at once into database 15."""
        payload = b"".join(commands)
        with socket.create_connection(("127.0.0.1", self.port)) as sock:
            sock.sendall(b"*2\r\n$6\r\nSELECT\r\n$2\r\n15\r\n")
            sock.recv(16)
            _server_busy_s(self.target)
            started = time.perf_counter()
            sock.sendall(payload)
            lines, last = 0, b""
            while lines < len(commands):  # HSET and RESTORE replies are one line each
                data = sock.recv(1 << 20)
                if not data:
                    msg = "redis-server closed the connection during the floor"
                    raise SystemExit(msg)
                # a reply may be split between two reads, "\r" ending one, "\n" the next
                lines += data.count(b"\r\n") + (last == b"\r" and data[:1] == b"\n")
                last = data[-1:]
            elapsed = time.perf_counter() - started
        return elapsed, _server_busy_s(self.target)

    def measure(self, _: FeatureStore) -> dict[str, float]:
        """Floor seconds (wall, and redis-server CPU) for new entities and updates, and
        the RESTORE floor of new entities."""
        try:
            self.target.flushdb()
            new_s, new_server = self._blast(self.newer_hset)
            self.target.flushdb()
            self._blast(self.older)
            update_s, update_server = self._blast(self.newer_hset)
            self.target.flushdb()
            restore_s, restore_server = self._blast(self.newer_restore)
            return {"floor_s": new_s, "floor_server_s": new_server,
                    "update_floor_s": update_s, "update_floor_server_s": update_server,
                    "restore_floor_s": restore_s, "restore_floor_server_s": restore_server}
        finally:
            self.target.flushdb()


class Floor(Protocol):
    def after_new(self, store: FeatureStore) -> None: ...
    def after_update(self, store: FeatureStore) -> None: ...
    def measure(self, store: FeatureStore) -> dict[str, float]: ...


def timed_write(store: FeatureStore, table: pa.Table,
                busy: Callable[[], float] | None) -> tuple[WriteStats, float]:
    """featureflow's write of ``table``: its stats and the CPU seconds it cost (Redis:
    redis-server's, from INFO cpu; SQLite: this process's, every thread)."""
    if busy:
        busy()
    cpu = time.process_time()
    stats = write(store, VIEW, table)
    return stats, (busy() if busy else time.process_time() - cpu)


def ff_round(store: FeatureStore, table: pa.Table, newer: pa.Table, floor: Floor,
             busy: Callable[[], float] | None) -> dict[str, Any]:
    """featureflow writes ``table`` (new entities), ``newer`` (updates) and ``table``
    again (a stale replay: nothing written), then the floor runs on the same rows;
    the ratios are of the same round."""
    n = table.num_rows
    first, first_cpu = timed_write(store, table, busy)
    floor.after_new(store)
    update, update_cpu = timed_write(store, newer, busy)
    floor.after_update(store)
    replay = write(store, VIEW, table)  # older than what is stored: skipped entirely
    if first.written != n or update.written != n or replay.written != 0:
        msg = f"unexpected write counts {first} {update} {replay}"
        raise SystemExit(msg)
    floors = floor.measure(store)
    cpu = "server" if busy else "cpu"
    out = {"new_s": first.seconds, f"new_{cpu}_s": first_cpu,
           "update_s": update.seconds, f"update_{cpu}_s": update_cpu,
           "stale_replay_s": replay.seconds, **floors,
           "new_ratio": first.seconds / floors["floor_s"],
           "update_ratio": update.seconds / floors["update_floor_s"],
           "update_ratio_to_new_floor": update.seconds / floors["floor_s"],
           "new_cpu_ratio": first_cpu / floors[f"floor_{cpu}_s"],
           "update_cpu_ratio": update_cpu / floors[f"update_floor_{cpu}_s"],
           "load_1m": os.getloadavg()[0]}
    if "restore_floor_s" in floors:
        out["new_ratio_to_restore_floor"] = first.seconds / floors["restore_floor_s"]
    return out


def bench_store(kind: str, feast_store: FeatureStore, ff_store: FeatureStore,
                table: pa.Table, newer: pa.Table, floor: Floor,
                busy: Callable[[], float] | None = None) -> dict[str, Any]:
    """Time Feast's writer and featureflow's on ``table`` into their own empty stores,
    check reads agree, then the rest of featureflow's round and the floor."""
    n = table.num_rows
    df = table.to_pandas()
    server: dict[str, float] = {}
    if busy:
        busy()
    started = time.perf_counter()
    feast_store.write_to_online_store(VIEW, df=df)
    feast_s = time.perf_counter() - started
    if busy:
        server["feast_server_s"] = busy()
    check = write(ff_store, VIEW, table)
    ids = np.random.default_rng(7).choice(table.column("user_id").to_numpy(), SAMPLE, False)
    if read_sample(feast_store, ids) != read_sample(ff_store, ids):
        msg = f"{kind}: featureflow's rows read back differently from Feast's"
        raise SystemExit(msg)
    return {"store": kind, "entities": n, "features": len(FEATURES), "feast_s": feast_s,
            "feast_rows_per_s": n / feast_s, "featureflow_check_s": check.seconds,
            "ratio": feast_s / check.seconds, **server}


def floor_reps(kind: str, fresh: Callable[[int], tuple[FeatureStore, Floor]],
               table: pa.Table, newer: pa.Table, busy: Callable[[], float] | None,
               reps: int) -> dict[str, Any]:
    """``reps`` rounds of featureflow (new entities, updates, a stale replay) and the
    floor, each on a fresh store; per-round ratios and their medians (on a shared
    machine one round's ratio swings with the load)."""
    rounds = []
    for rep in range(reps):
        store, floor = fresh(rep)
        r = ff_round(store, table, newer, floor, busy)
        rounds.append(r)
        print(f"{kind} round {rep + 1}: new {r['new_s']:.2f} s / floor {r['floor_s']:.2f} s "
              f"= {r['new_ratio']:.2f}x; updates {r['update_s']:.2f} s / update floor "
              f"{r['update_floor_s']:.2f} s = {r['update_ratio']:.2f}x (CPU "
              f"{r['new_cpu_ratio']:.2f}x, {r['update_cpu_ratio']:.2f}x; load "
              f"{r['load_1m']:.1f})", flush=True)
    keys = [k for k in rounds[0] if k.endswith(("ratio", "_s", "ratio_to_new_floor",
                                                "ratio_to_restore_floor"))]
    return {"rounds": rounds, "median": {k: float(np.median([r[k] for r in rounds]))
                                         for k in keys}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--no-save", action="store_true", help="do not write the JSON")
    parser.add_argument("--floor-rounds", type=int, default=3,
                        help="rounds of featureflow (new entities, updates, stale replay) "
                             "against the floor, each on a fresh store; medians reported")
    parser.add_argument("--stores", default="sqlite,redis", help="comma-separated subset")
    parser.add_argument("--no-feast", action="store_true",
                        help="skip Feast's writer (and the read-back check against it)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    n = args.entities
    kinds = args.stores.split(",")
    load_start = os.getloadavg()[0]
    table = make_table(n, seed=1, start="2026-11-30 10:00:00")
    newer = make_table(n, seed=2, start="2026-11-30 10:05:00")
    results = []
    with tempfile.TemporaryDirectory(prefix="ff-bench-") as tmp:
        root = Path(tmp)
        if "sqlite" in kinds:
            def fresh_sqlite(rep: int | str) -> FeatureStore:
                (root / f"sqlite-{rep}").mkdir()
                return make_store(root / f"sqlite-{rep}", SqliteOnlineStoreConfig(path="online.db"))

            result: dict[str, Any] = {"store": "sqlite", "entities": n}
            if not args.no_feast:
                result = bench_store("sqlite", fresh_sqlite("feast"), fresh_sqlite("check"),
                                     table, newer, SqliteFloor(fresh_sqlite("unused")))

            def sqlite_round(rep: int) -> tuple[FeatureStore, Floor]:
                store = fresh_sqlite(rep)
                return store, SqliteFloor(store)

            result["floor_rounds"] = floor_reps("sqlite", sqlite_round, table, newer, None,
                                                args.floor_rounds)
            results.append(result)
        if "redis" in kinds:
            with RedisServer() as server:
                def fresh_redis(db: int, name: str) -> FeatureStore:
                    (root / f"redis-{name}").mkdir(exist_ok=True)
                    redis.Redis(port=server.port, db=db).flushdb()
                    url = f"{server.connection_string},db={db}"
                    return make_store(root / f"redis-{name}",
                                      RedisOnlineStoreConfig(connection_string=url))

                admin = redis.Redis(port=server.port)
                result = {"store": "redis", "entities": n}
                if not args.no_feast:
                    ff = fresh_redis(1, "ff")
                    result = bench_store("redis", fresh_redis(0, "feast"), ff, table, newer,
                                         RedisFloor(ff, server.port),
                                         lambda: _server_busy_s(admin))

                def redis_round(_: int) -> tuple[FeatureStore, Floor]:
                    store = fresh_redis(1, "ff")
                    return store, RedisFloor(store, server.port)

                result["floor_rounds"] = floor_reps("redis", redis_round, table, newer,
                                                    lambda: _server_busy_s(admin),
                                                    args.floor_rounds)
                results.append(result)

    print(f"\nOnline write, {n:,} entities x {len(FEATURES)} float features; median of "
          f"{args.floor_rounds} rounds (time ratio to the floor of the same round; target "
          "<= 1.3x)\n")
    print("| store | Feast (rows/s) | featureflow new (rows/s) | vs Feast | new / floor "
          "| updates / update floor | CPU: new, updates |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        m = r["floor_rounds"]["median"]
        feast = (f"{r['feast_rows_per_s']:,.0f}", f"{r['ratio']:.1f}x") if "feast_s" in r \
            else ("-", "-")
        print(f"| {r['store']} | {feast[0]} | {n / m['new_s']:,.0f} | {feast[1]} | "
              f"{m['new_ratio']:.2f}x | {m['update_ratio']:.2f}x | "
              f"{m['new_cpu_ratio']:.2f}x, {m['update_cpu_ratio']:.2f}x |")
    for r in results:
        m = r["floor_rounds"]["median"]
        extra = (f"; new vs the RESTORE floor {m['new_ratio_to_restore_floor']:.2f}x "
                 f"(RESTORE {m['restore_floor_s']:.2f} s, server "
                 f"{m['restore_floor_server_s']:.2f} s)"
                 if "new_ratio_to_restore_floor" in m else "")
        print(f"{r['store']}: updates vs the new-entity floor {m['update_ratio_to_new_floor']:.2f}x"
              + extra)
    print("\nCPU: SQLite, this process's CPU (every thread) against SQLite's thread in the "
          "floor; Redis, redis-server's CPU (INFO cpu).")
    if args.no_save:
        return
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "online_write",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "sqlite": sqlite3.sqlite_version,
                    "load_average_1m_at_start_and_end": [load_start, os.getloadavg()[0]],
                    "note": "2 vCPUs shared with other engineers' jobs during the run"},
        "floors": {k: FLOORS[k] for k in kinds},
        "cpu_s": "sqlite: process CPU of featureflow's write (all threads), thread CPU of the "
                 "floor's statement; redis: redis-server CPU (INFO cpu, user + sys)",
        "results": results,
    }, indent=2) + "\n")
    print(f"\nwritten {RESULTS}")


if __name__ == "__main__":
    main()
