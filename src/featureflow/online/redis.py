"""Bulk writes into Feast's Redis online store, in Feast's own key and hash layout.

Layout (``feast.infra.online_stores.redis``): one hash per entity at key
``serialised_entity_key + project``; per feature the field
``mmh3("{view}:{feature}")`` (4 bytes) holds the serialised ``ValueProto``;
the field ``_ts:{view}`` holds the event time as a serialised
``google.protobuf.Timestamp``.

Ordering and atomicity of the checked path, per chunk of ``CHUNK`` entities (optimistic
locking):
``WATCH`` the chunk's keys, let one small Lua call that only reads
(:data:`LUA_DECIDE`) compare their stored ``_ts`` with the new event times and
answer one byte per entity, keep the entities whose new event time is not older
than the stored one, then ``MULTI``, one ``HSET`` per kept entity, ``EXEC``. An equal event
time replaces, as on SQLite (:mod:`featureflow.online.write` states the rule):
Feast's own writer skips it, which kept stale values when a later
micro-batch recomputed an entity's features for the same latest event. If another
client changed a watched key in between, ``EXEC`` does nothing and the chunk
is read and decided again. So a chunk is applied whole or not at all, each
entity is always all old or all new, and an older event never replaces a
newer one even with concurrent writers.

Optimistic pass first (``OPTIMISTIC``): every chunk goes out without waiting for
any reply, as WATCH (a guard key of this write + the chunk's keys), the decision
script in guarded mode, MULTI, every entity's HSET, EXEC. The script writes the
guard unless every row of the chunk is not older than the stored one (and on any
error), which aborts that chunk's EXEC; a concurrent writer aborts it through
WATCH as before. So an applied EXEC holds only rows decided newer, atomically,
and only the aborted chunks (stale rows, errors, races) take the per-chunk path
above. A stream's steady state (every row newer) then costs no round trip per
chunk; a replay of old rows sends its HSETs twice (queued and discarded, then
decided per chunk).

New entities first (``RESTORE``): a write asks ``EXISTS`` of a sample of its keys
and, when some are absent, of every key; each absent entity's hash is then created
whole by ``RESTORE`` without ``REPLACE`` from a payload built here
(:mod:`featureflow.online.redis_dump`), which the server copies as it is, and which
it refuses (``BUSYKEY``) if another writer created the key meanwhile. So nothing is
overwritten on that path, and what it did not create (every existing entity, the
refused ones, values the payload cannot hold) takes the checked path above. The
payload format is checked once per server against the server's own ``DUMP``
(:func:`restore_version`); a server that differs gets ``HSET`` only. Measured on
Redis 7.0, 100 k new entities of 19 fields: 0.17-0.25 s of server CPU against
0.40-0.47 s for plain ``HSET``s (the floor), and the write's wall time 0.74-0.77x
the floor's; a stream's steady state (every sampled key exists) pays one ``EXISTS``
round trip per write.

Existing entities next (``RESTORE``, :func:`_replace_existing`): per ``CHUNK`` keys,
``WATCH`` them and read natively what decides whether ``RESTORE ... REPLACE`` of an
entity's payload leaves exactly what ``HSET`` of the same fields would (``HLEN``, ``PTTL``,
every view's stored ``_ts``); the client decides (no view's stored ``_ts`` newer than its
row, no ``_ts`` of a view without a row, as many fields stored as the payload holds, no
TTL to keep) and sends the kept entities' ``RESTORE ... REPLACE`` in one ``MULTI``/``EXEC``,
which does nothing if another client touched a watched key in between. Every other
entity (a stale row, fields of other views or of removed features, a TTL to keep, a
chunk another client touched) takes the checked path above. Measured on Redis 7.0, 100 k
updates of 19 fields, 2026-12-06 (``bench/online_write.py``, alternating runs): the
server's CPU 0.67-0.91x that of plain ``HSET``s of the same fields and the write's time
0.86-1.15x theirs, against 1.10-1.49x and 1.16-1.58x when one Lua script per chunk made
the same check and ``RESTORE`` (each ``redis.call`` from Lua costs the server more than
the native command, and every payload became a Lua string first). The client's CPU for
the write rose from ~0.27 s to ~0.65 s (the replies: ~4 per entity, read by hiredis
without Python per reply; the stored times decoded in numpy per chunk); the two
together cost less than before (~1.4 s against ~1.55 s).

Several views at once (``write_views``, the stream job's one write per topic): each
entity gets one ``HSET`` holding the fields of every view with a row for it; the Lua
call reads every view's ``_ts`` (``HMGET``) and decides the rule above per
(entity, view), so the ``HSET`` carries exactly the views whose row is not older
than the stored one. One view's write sends the same bytes as before.

Why not a Lua check-and-set script per entity: measured here, a script that
receives the values spends ~38 µs per entity of 18 features in Redis (every
value becomes a Lua string first), against ~11 µs for the plain ``HSET``;
with ``WATCH``/``MULTI`` the values go straight into ``HSET`` and only the
timestamps pass through Lua, so Redis does about what a blind write costs.

Performance: the ``HSET`` commands are built as raw RESP bytes by numpy (no
per-row Python), ``PLAN_BLOCK`` entities at a time for a one-view write, each
block while the chunks before it are on the wire; the decisions come back as
one byte string per chunk (decoding the stored timestamps in numpy, chunk by
chunk, cost ~0.5 s of client CPU per 100 k entities).
The replies (one ``QUEUED`` and one ``HSET`` count per entity) are parsed by
hiredis straight from the socket instead of one redis-py ``read_response``
(µs of Python) each; on the careful path the WATCH and timestamp read of the
next chunk go out in the same packet as this chunk's MULTI/EXEC, and ``LANES``
connections work on disjoint chunks at once so the waits overlap.

Where the time goes (redis-server CPU from INFO cpu, 100 k entities x 19 fields,
pipelined on a raw socket; ``bench/online_write.py`` records the totals): plain
HSETs, the floor, 0.40-0.45 s; the same inside MULTI/EXEC per 128-entity chunk
0.41-0.45 s (queueing is nearly free); + WATCH of the chunk's keys 0.48-0.55 s;
+ a native HGET of each ``_ts`` 0.52-0.59 s (the cheapest check, but the decision
would then be the client's, one round trip per chunk); the Lua decision instead
of WATCH 0.56-0.66 s; this module's optimistic pass (WATCH + guarded Lua decision
+ MULTI/EXEC) 0.63-0.69 s; one script per chunk carrying the values and doing the
HSETs itself 0.83-0.95 s (every value becomes a Lua string). So the check itself,
at its cheapest, costs the server ~1.3x the floor: the newer-or-equal rule needs
each entity's stored ``_ts`` read inside the server before its ``HSET``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import operator
import socket
import threading
import uuid
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import hiredis
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from feast.infra.online_stores.helpers import _mmh3
from feast.infra.online_stores.redis import RedisOnlineStore, RedisOnlineStoreConfig
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError
from redis.retry import Retry

from featureflow.errors import OnlineStoreError
from featureflow.online import _bytes as B
from featureflow.online import encoding as E
from featureflow.online import redis_dump as D
from featureflow.online.batch import Batch, reorder
from featureflow.secrets import redis_address

CHUNK = 128
"""Entities per WATCH/MULTI/EXEC round. Redis 7's WATCH checks each new key
against the keys the client already watches (quadratic in the chunk): in the
server's commandstats, ~3-4 µs per entity at 256 keys, ~1.5 at 128, <1 at 64.
Smaller chunks cost more client-side work per entity (one timestamp decode and
one round trip per chunk): 30,000 entities, measured on a loaded 2-vCPU machine,
writing updates went 4 k/s at 8 lanes x 32, 7-9 k/s at 8 x 64 and 4 x 128,
7-11 k/s at 1 x 256; new entities 9-15 k/s for all but 8 x 32."""

LANES = 4
"""Connections one write uses at once, each with its own chunks (disjoint keys, so
their WATCHes never abort each other): while the client reads one connection's
replies the server executes the others', so the client's waits overlap. On a
busy machine every round trip costs a context switch each way."""

OPTIMISTIC = True
"""Whether a write first sends every chunk without waiting (see ``_ChunkWriter.optimistic``);
only the chunks that pass are applied, the rest go entity by entity. Off: every chunk
waits for its decision (one round trip per chunk per lane)."""

RETRIES = 20
"""Times a chunk is re-read and re-decided when concurrent writers touched its keys."""

_LUA_NEWER = r"""
-- newer(old, sec, nanos): whether an event at sec.nanos is not older than the stored
-- google.protobuf.Timestamp bytes old (equal replaces).
local function varint(str, k)
  local value, scale, start = 0, 1, k
  while true do
    local b = string.byte(str, k)
    if not b then return value, k end
    k = k + 1
    value = value + (b % 128) * scale
    scale = scale * 128
    if b < 128 then break end
  end
  if k - start >= 10 then  -- a negative int64 (two's complement): -(~x) - 1, exactly
    local inverted, m = 0, 1
    for q = start, start + 8 do
      inverted = inverted + (127 - string.byte(str, q) % 128) * m
      m = m * 128
    end
    value = -inverted - 1
  end
  return value, k
end
local function decoded_newer(old, sec, nanos)
  local s, ns, k = 0, 0, 1
  while k <= #old do
    local tag = string.byte(old, k)
    local v
    v, k = varint(old, k + 1)
    if tag == 8 then s = v elseif tag == 16 then ns = v end
  end
  return sec > s or (sec == s and nanos >= ns)
end
-- The stored times of this era (2^28 <= seconds < 2^35: 1978-07-05 .. 3058-08-26) in
-- the canonical form: tag 8, five varint bytes of seconds, then tag 16 and the nanos'
-- varint, or no nanos. Their seconds are read from one string.byte call (a byte at a
-- time, the decode above was ~1 us an entity, a sixth of the script's work); any
-- other form decodes.
local byte = string.byte
local function newer(old, sec, nanos)
  local n = #old
  local b1, b2, b3, b4, b5, b6, b7 = byte(old, 1, 7)
  if n < 6 or b1 ~= 8 or b2 < 128 or b3 < 128 or b4 < 128 or b5 < 128 or b6 > 127
      or (n > 6 and b7 ~= 16) then
    return decoded_newer(old, sec, nanos)
  end
  local s = (b2 - 128) + (b3 - 128) * 128 + (b4 - 128) * 16384 + (b5 - 128) * 2097152
    + b6 * 268435456
  local ns, k = 0, n + 1
  if n > 6 then ns, k = varint(old, 8) end
  if k ~= n + 1 then return decoded_newer(old, sec, nanos) end
  return sec > s or (sec == s and nanos >= ns)
end
"""

LUA_DECIDE = _LUA_NEWER + r"""
-- KEYS[1]: the write's guard key; KEYS[2 ..]: entity hash keys. ARGV[1]: "1" guarded,
-- "0" not; ARGV[2]: the number of views V; ARGV[3 .. 2 + V]: their _ts fields; then per
-- key, per view: the new event time's whole seconds and nanoseconds ("" seconds: the
-- write has no row of that view for the key). Returns one byte per (key, view): "1"
-- where the new row is not older than the stored _ts (or none is stored), else "0".
-- Guarded (the client WATCHes the guard and has queued every HSET of the chunk after
-- this call): unless every row is newer, and on any error, the script writes the guard,
-- so the chunk's EXEC aborts.
local function decide()
  local views = tonumber(ARGV[2])
  local fields = {}
  for j = 1, views do fields[j] = ARGV[2 + j] end
  local out = {}
  local all = true
  local at = 3 + views
  for i = 2, #KEYS do
    local stored = redis.call('HMGET', KEYS[i], unpack(fields))
    for j = 1, views do
      local sec, nanos = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
      at = at + 2
      local flag = '0'
      if sec then
        local old = stored[j]
        if not old or newer(old, sec, nanos) then flag = '1' end
        if flag == '0' then all = false end
      end
      out[#out + 1] = flag
    end
  end
  return table.concat(out), all
end
if ARGV[1] ~= '1' then return (decide()) end
local ok, flags, all = pcall(decide)
if not ok or not all then redis.call('SET', KEYS[1], '1', 'EX', '600') end
if not ok then return redis.error_reply(tostring(flags)) end
return flags
"""
"""Decides in Redis, per chunk, which (entity, view) rows are not older than the store's:
the client gets one byte per decision instead of the stored timestamps to decode
(measured: decoding them in numpy, chunk by chunk, was ~0.5 s of client CPU per 100 k
entities, more than half of Redis's own time for the write)."""

_stores: dict[str, RedisOnlineStore] = {}
_stores_lock = threading.Lock()


SOCKET_TIMEOUT_S = 10.0
"""Default wait for any one Redis reply, seconds, when the connection string sets no
``socket_timeout``: a hung (e.g. SIGSTOPped) server fails the write with a typed error
instead of hanging the batch. A write sends one chunk's commands per lane and then waits
for their replies; a chunk takes milliseconds, so 10 s is far above a healthy server."""

CONNECT_TIMEOUT_S = 5.0
"""Default wait for a TCP connection to Redis, seconds (``socket_connect_timeout``)."""


_ONE_RETRY = Retry(NoBackoff(), 1)
"""The retry of featureflow's writing client: once, at once."""


def _client(config: RedisOnlineStoreConfig):  # type: ignore[no-untyped-def]
    """Feast's own Redis client for ``config`` (same parsing of the connection string).

    Every wait is bounded: the connection string's ``socket_timeout`` and
    ``socket_connect_timeout`` (seconds, Feast passes them to redis-py) apply, else
    :data:`SOCKET_TIMEOUT_S` and :data:`CONNECT_TIMEOUT_S`. The raw socket reads of
    :class:`_Replies` use the same timeout (redis-py sets it on the socket).
    """
    with _stores_lock:
        store = _stores.setdefault(config.connection_string, RedisOnlineStore())
    client = store._get_client(config)
    kwargs = client.connection_pool.connection_kwargs
    if kwargs.get("socket_timeout") is None:
        kwargs["socket_timeout"] = SOCKET_TIMEOUT_S
    if kwargs.get("socket_connect_timeout") is None:
        kwargs["socket_connect_timeout"] = CONNECT_TIMEOUT_S
    if kwargs.get("retry") is not _ONE_RETRY:
        # redis-py retries a command 3 times with up to 7 s of backoff by default, which
        # hides an outage for up to 4 timeouts; one immediate retry (a pooled connection
        # the server closed) bounds a command at 2 timeouts, and the stream job's restart
        # does the retrying (featureflow.spark.supervisor).
        client.set_retry(_ONE_RETRY)
    return client


def _bulk(parts: list[B.Cells | B.Packed]) -> list[B.Cells | B.Packed]:
    """RESP bulk-string framing ``$<len>\\r\\n<bytes>\\r\\n`` of the rows ``concat(parts)``."""
    n = parts[0].n
    crlf = B.const(b"\r\n", n)
    lengths = [p.row_lengths() if isinstance(p, B.Cells) else p.lengths() for p in parts]

    def fixed(part: B.Cells | B.Packed, rows: npt.NDArray[np.int64]) -> bool:
        if isinstance(part, B.Cells):
            return part.lengths is None
        return n == 0 or int(rows.min()) == int(rows.max())

    if all(fixed(p, rows) for p, rows in zip(parts, lengths, strict=True)):
        # a constant header; Packed parts become fixed cells (a zero-copy reshape) for
        # concat's fixed-width path
        cells = [p if isinstance(p, B.Cells) else B.pad(p) for p in parts]
        return [B.const(b"$%d\r\n" % sum(c.width for c in cells), n), *cells, crlf]
    return [B.const(b"$", n), B.ascii_decimal(np.sum(lengths, axis=0)), crlf, *parts, crlf]


def _resp(args: Sequence[bytes]) -> bytes:
    """One command as RESP bytes."""
    return b"*%d\r\n%s" % (len(args), _resp_args(args))


def _resp_args(args: Sequence[bytes]) -> bytes:
    return b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def write(
    config: RedisOnlineStoreConfig,
    project: str,
    fv_name: str,
    batch: Batch,
) -> tuple[int, int]:
    """Write ``batch`` as the hashes Feast reads; returns (entities written, skipped).

    ``fv_name`` is the view's name as Feast uses it in field names (versioned
    when feature view versioning is on). Raises ``OnlineStoreError`` when Redis
    fails; chunks applied before the failure stay, each entity whole.
    """
    return write_views(config, project, [(fv_name, batch)])[0]


def write_views(
    config: RedisOnlineStoreConfig,
    project: str,
    views: Sequence[tuple[str, Batch]],
) -> list[tuple[int, int]]:
    """Write several views' batches with one ``HSET`` per entity for all of them (Feast
    keeps one hash per entity key and project, shared by every view); returns per view
    (entities written, skipped).

    Ordering is per view: an entity's fields of view ``v`` are replaced when its new
    event time for ``v`` is not older than the stored ``_ts:v``; the ``HSET`` of an
    entity carries exactly the views that pass. Chunks are applied whole (MULTI/EXEC
    under WATCH), so every entity is all old or all new for every view.
    """
    given = list(views)
    live = [i for i, (_, batch) in enumerate(given) if batch.n]
    if not live:
        return [(0, 0)] * len(given)
    ttl = int(config.key_ttl_seconds or 0)
    project_bytes = project.encode("utf8")
    todo = [given[i] for i in live]

    client = _client(config)
    try:
        sha = client.script_load(LUA_DECIDE).encode()
    except RedisError as exc:
        msg = f"Redis at {redis_address(config.connection_string)} refused a script: {exc}"
        raise OnlineStoreError(msg) from exc
    written = np.zeros(len(todo), dtype=np.int64)
    version = restore_version(client, config.connection_string) if RESTORE else None
    if version is not None:
        written, todo = _create_absent(client, config, todo, project_bytes, ttl, version)
        left = [k for k, (_, batch) in enumerate(todo) if batch.n]
        if left:
            replaced, rest_of = _replace_existing(client, config, [todo[k] for k in left],
                                                  project_bytes, ttl, version)
            written[left] += replaced
            for k, view in zip(left, rest_of, strict=True):
                todo[k] = view
    rest = [k for k, (_, batch) in enumerate(todo) if batch.n]
    if rest:
        written[rest] += _check_and_set(client, config, [todo[k] for k in rest], sha,
                                        project_bytes, ttl, int(written.sum()))
    counts = [(0, 0)] * len(given)
    for k, i in enumerate(live):
        counts[i] = (int(written[k]), given[i][1].n - int(written[k]))
    return counts


def _check_and_set(client, config: RedisOnlineStoreConfig,  # type: ignore[no-untyped-def]
                   views: list[tuple[str, Batch]], sha: bytes, project: bytes, ttl: int,
                   before: int) -> npt.NDArray[np.int64]:
    """Write ``views`` (each with rows) under the newer-or-equal rule, chunk by chunk (see
    the module's docstring); returns the entities written per view. ``before``: entities
    this write already created (for the error messages)."""
    n_views = len(views)
    pool = client.connection_pool
    entities = max(batch.n for _, batch in views)
    chunks = _chunks(_plans(views, project, ttl))
    conns = [pool.get_connection() for _ in range(min(LANES, -(-entities // CHUNK)))]
    guard = b"featureflow:guard:" + uuid.uuid4().hex.encode()
    writers = [_ChunkWriter(_Replies(conn._sock), sha, n_views, 2 if ttl else 1, guard)
               for conn in conns]
    fast = np.zeros(n_views, dtype=np.int64)
    try:
        fast, again = (writers[0].optimistic(chunks) if OPTIMISTIC
                       else (fast, list(chunks)))
        written, first_error = _drive([
            writer.run(again[lane :: len(writers)]) for lane, writer in enumerate(writers)])
        written = written + fast
        writers[0].replies.send([_resp([b"DEL", guard])])
        writers[0].replies.next()
    except (RedisError, OSError) as exc:
        for conn in conns:
            conn.disconnect()
        done = before + int(fast.sum() + sum(writer.written.sum() for writer in writers))
        msg = (f"Redis write to {redis_address(config.connection_string)} failed after {done} "
               "entities; every entity is either fully old or fully new. Retry the batch: "
               f"{exc}")
        raise OnlineStoreError(msg) from exc
    except BaseException:
        # e.g. a failure building a later plan: replies of chunks already sent are
        # unread, so the connections must not go back to the pool as they are
        for conn in conns:
            conn.disconnect()
        raise
    finally:
        for conn in conns:
            pool.release(conn)
    if first_error is not None:
        msg = (f"Redis rejected part of the write to {redis_address(config.connection_string)} "
               f"({before + int(written.sum())} entities written, each fully; the chunks with "
               f"errors not): {first_error}")
        raise OnlineStoreError(msg) from first_error
    return written


RESTORE = True
"""Whether a write uses ``RESTORE`` payloads where the server passed
:func:`restore_version`'s check: to create the hashes of absent entities
(:func:`_create_absent`) and to replace those whose layout is exactly the write's
(:func:`_replace_existing`). Off: every entity goes the checked ``HSET`` way."""

SAMPLE = 128
"""Keys a write asks ``EXISTS`` about before looking for absent entities at all: when
every one of them exists (a stream's steady state), the write skips the search."""

_versions: dict[str, bytes | None] = {}


def restore_version(client, connection_string: str) -> bytes | None:  # type: ignore[no-untyped-def]
    """The RDB version (2 bytes) of the server's ``DUMP`` payloads when it restores
    :mod:`featureflow.online.redis_dump`'s payloads exactly as its own; ``None`` when it
    does not (another hash encoding, e.g. Redis 6's ziplist; ``RESTORE`` or ``DUMP``
    refused by ACLs or renamed away). Checked once per connection string and process:
    a probe hash shaped like a view's (a ``_ts`` field, 4-byte field names, a double's
    ``ValueProto``, an empty value) is made by ``HSET`` and, under another key, by
    ``RESTORE``; both must ``DUMP`` to the same bytes. The probe keys are deleted. A
    lost connection during the probe answers ``None`` for this write only; a refusal
    of a later payload (:func:`_payload_refused`) makes the next write probe again.
    The probe also checks and replaces the restored hash as :func:`_replace_existing`
    does (:func:`_replaces`), so a user who may not run ``HLEN``, ``PTTL``, ``HMGET`` or
    ``RESTORE ... REPLACE`` under ``WATCH`` gets ``HSET``."""
    with _stores_lock:
        if connection_string in _versions:
            return _versions[connection_string]
    probe = b"featureflow:probe:" + uuid.uuid4().hex.encode()
    fields = [(b"_ts:probe", E.timestamp_protos(np.array([1_700_000_000_123_456])).to_pylist()[0]),
              (_mmh3("probe:a"), b")" + np.float64(0.25).tobytes()), (_mmh3("probe:b"), b"")]
    version: bytes | None = None
    answered = True  # a refusal or a mismatch is kept; a lost connection is asked again
    try:
        client.hset(probe + b":hset", mapping=dict(fields))
        dump = client.dump(probe + b":hset")
        candidate = bytes(dump[-10:-8])
        cells = [B.Packed(np.frombuffer(cell, np.uint8), np.array([0, len(cell)], np.int64))
                 for pair in fields for cell in pair]
        made = D.payloads(D.entry_parts(cells), np.array([len(cells)], np.int64), candidate)
        payload = made.to_pylist()[0]
        client.restore(probe + b":restore", 0, payload)
        if (client.dump(probe + b":restore") == dump
                and _replaces(client, probe + b":restore", fields, payload)):
            version = candidate
    except (ResponseError, IndexError):
        version = None
    except RedisError:
        version, answered = None, False
    finally:
        with contextlib.suppress(RedisError):
            client.delete(probe + b":hset", probe + b":restore")
    if answered:
        with _stores_lock:
            _versions[connection_string] = version
    return version


def _create_absent(client, config: RedisOnlineStoreConfig,  # type: ignore[no-untyped-def]
                   views: list[tuple[str, Batch]], project: bytes, ttl: int, version: bytes,
                   ) -> tuple[npt.NDArray[np.int64], list[tuple[str, Batch]]]:
    """Create the hashes of the entities absent from Redis with ``RESTORE`` (no
    ``REPLACE``); returns (entities created per view, each view's rows still to write).

    ``RESTORE`` without ``REPLACE`` refuses a key that exists (``BUSYKEY``), so an entity
    another writer created meanwhile is left to the checked path, like every entity that
    existed, and no stored row is ever replaced here; each hash is created whole, with
    its TTL. Steps: ``EXISTS`` of :data:`SAMPLE` keys spread over the write (all exist:
    nothing to do); ``EXISTS`` of every key, pipelined; the payloads of the absent ones
    (:mod:`~featureflow.online.redis_dump`; entities whose fields it cannot hold stay
    for ``HSET``), ``PLAN_BLOCK`` at a time, each block built while the one before is on
    the wire."""
    n_views = len(views)
    created = np.zeros(n_views, dtype=np.int64)
    union, rows = _union(views)
    n = union.n
    spread = np.unique(np.linspace(0, n - 1, min(SAMPLE, n)).astype(np.int64))
    sample = [key + project for key in B.take(union, spread).to_pylist()]
    try:
        if client.exists(*sample) == len(sample):
            return created, views
    except RedisError as exc:
        msg = f"Redis at {redis_address(config.connection_string)} failed EXISTS: {exc}"
        raise OnlineStoreError(msg) from exc
    fields = _hash_fields(views)
    if fields is None:
        return created, views
    hashes = _hash_views(views, fields)
    keys = B.concat(_bulk([union, B.const(project, n)]))
    ttl_arg = _resp_args([b"%d" % (ttl * 1000)])
    done = np.zeros(n, dtype=bool)
    with _connection(client, config, done) as replies:
        replies.send([_span(B.concat([B.const(b"*2\r\n" + _resp_args([b"EXISTS"]), n), keys]))])
        exists = replies.uniform(n, 4, b":")
        absent = (exists[:, 1] == ord("0") if isinstance(exists, np.ndarray)
                  else np.array([reply == 0 for reply in exists], dtype=bool))
        blocks = [np.flatnonzero(absent[lo : lo + PLAN_BLOCK]) + lo
                  for lo in range(0, n, PLAN_BLOCK)]
        sent: list[npt.NDArray[np.int64]] = []
        for block in [*(b for b in blocks if len(b)), None]:  # None: read the last replies
            if block is not None:
                positions, payloads = D.hash_payloads(hashes, rows[block], version)
                chosen = block[positions]
                if len(chosen):
                    replies.send([_span(B.concat([
                        B.const(b"*4\r\n" + _resp_args([b"RESTORE"]), len(chosen)),
                        B.take(keys, chosen), B.const(ttl_arg, len(chosen)),
                        *_bulk([payloads])]))])
                sent.append(chosen)
            if len(sent) > (block is not None):
                previous = sent.pop(0)
                restored = replies.uniform(len(previous), 5, b"+")  # +OK
                done[previous] = (True if isinstance(restored, np.ndarray)
                                  else [_restored(reply, config) for reply in restored])
    return _without(views, rows, done)


def _replaces(client, key: bytes, fields: list[tuple[bytes, bytes]],  # type: ignore[no-untyped-def]
              payload: bytes) -> bool:
    """Whether the commands of :func:`_replace_existing` run for this client on ``key`` (a
    hash of ``fields``, no TTL): its reads answer what the hash holds, and ``RESTORE ...
    REPLACE`` of ``payload`` under ``WATCH``/``MULTI``/``EXEC`` succeeds. A refused command
    raises ``ResponseError``."""
    reads = client.pipeline(transaction=False)
    reads.hlen(key).pttl(key).hmget(key, [fields[0][0]])
    if reads.execute() != [len(fields), -1, [fields[0][1]]]:
        return False
    with client.pipeline() as replace:
        replace.watch(key)
        replace.multi()
        replace.restore(key, 0, payload, replace=True)
        return bool(replace.execute() == [b"OK"])


@contextlib.contextmanager
def _connection(client, config: RedisOnlineStoreConfig,  # type: ignore[no-untyped-def]
                done: npt.NDArray[np.bool_]) -> Iterator[_Replies]:
    """The replies of one pooled connection, given back after use. On a failure the
    connection is dropped (replies may be unread) and a Redis or socket error becomes an
    ``OnlineStoreError`` that counts the entities ``done`` marks (filled in by the caller)."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        yield _Replies(conn._sock)
    except (RedisError, OSError) as exc:
        conn.disconnect()
        msg = (f"Redis write to {redis_address(config.connection_string)} failed after "
               f"{int(done.sum())} entities; every entity is either fully old or fully new. "
               f"Retry the batch: {exc}")
        raise OnlineStoreError(msg) from exc
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


def _hash_fields(views: list[tuple[str, Batch]]) -> list[list[bytes]] | None:
    """Per view, the hash fields of its rows: ``_ts:<view>``, then each feature's
    ``mmh3("<view>:<feature>")``; ``None`` when two of them collide (HSET's way only)."""
    fields = [[f"_ts:{name}".encode(), *(_mmh3(f"{name}:{feature}") for feature in batch.features)]
              for name, batch in views]
    names = [name for view_fields in fields for name in view_fields]
    return fields if len(set(names)) == len(names) else None


def _without(views: list[tuple[str, Batch]], rows: npt.NDArray[np.int64],
             done: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.int64], list[tuple[str, Batch]]]:
    """(per view, the rows of the entities ``done`` marks; each view's batch without them).
    ``rows``: per entity of the write's union (:func:`_union`) and view, its row (-1: none)."""
    counts = np.zeros(len(views), dtype=np.int64)
    remaining = []
    for v, (name, batch) in enumerate(views):
        mine = rows[done, v]
        mine = mine[mine >= 0]
        counts[v] = len(mine)
        keep = np.ones(batch.n, dtype=bool)
        keep[mine] = False
        remaining.append((name, batch if keep.all() else reorder(batch, np.flatnonzero(keep))))
    return counts, remaining


def _replace_existing(client, config: RedisOnlineStoreConfig,  # type: ignore[no-untyped-def]
                      views: list[tuple[str, Batch]], project: bytes, ttl: int, version: bytes,
                      ) -> tuple[npt.NDArray[np.int64], list[tuple[str, Batch]]]:
    """Replace the hashes of existing entities whose stored layout is exactly the write's
    with one ``RESTORE ... REPLACE`` each; returns (entities written per view, each view's
    rows still to write).

    Per chunk of ``CHUNK`` entities (:class:`_LayoutCheck`): ``WATCH`` their keys and read,
    with native commands, each one's ``HLEN``, ``PTTL`` (when the write sets no TTL) and
    the stored ``_ts`` of every view of the write (``HMGET``); the client then keeps the
    entities where every view with a row holds a stored ``_ts`` not newer than the row's,
    no view without a row holds one, the hash has as many fields as the payload and,
    without a TTL to set, the key has none to keep: there ``RESTORE ... REPLACE`` leaves
    what ``HSET`` of the same fields would. Their ``RESTORE``s go in one ``MULTI``/``EXEC``,
    which the server runs only if no watched key changed since the read, so no other
    client comes between an entity's check and its replacement. Every other entity (a
    stale row, fields of other views or of removed features, a TTL, a stored time that is
    no ``Timestamp``, values the payload cannot hold, a chunk another client touched)
    takes the checked
    ``HSET`` path. What this check cannot tell apart: a hash lacking k of the payload's
    fields and holding k fields of a view not in the write (its ``_ts`` not among the
    write's): only after a view gained features, and a view outside the write shares
    the entity, in equal numbers.

    ``LANES`` connections each hold one chunk at a time: a chunk's ``MULTI``/``EXEC`` and
    the next chunk's ``WATCH`` and reads go in one packet, and every lane's packet is sent
    before any lane's replies are read, so the server works while the client decides.
    Measured: see the module's docstring (*Existing entities next*)."""
    n_views = len(views)
    fields = _hash_fields(views)
    if fields is None:
        return np.zeros(n_views, dtype=np.int64), views
    union, rows = _union(views)
    n = union.n
    check = _LayoutCheck(
        hashes=_hash_views(views, fields), rows=rows,
        keys=B.concat(_bulk([union, B.const(project, n)])),
        counts=(rows >= 0).astype(np.int64) @ np.array([len(f) for f in fields], np.int64),
        times=_event_times(views, rows), ts_fields=[f[0] for f in fields], ttl=ttl,
        version=version)
    done = np.zeros(n, dtype=bool)
    chunks = check.chunks()
    with contextlib.ExitStack() as stack:
        lanes = [stack.enter_context(_connection(client, config, done))
                 for _ in range(min(LANES, -(-n // CHUNK)))]
        held: list[_CheckedChunk | None] = []
        for replies in lanes:
            chunk = next(chunks, None)
            if chunk is not None:
                replies.send(chunk.watch_and_read)
            held.append(chunk)
        while any(chunk is not None for chunk in held):
            sent = []
            for i, replies in enumerate(lanes):
                chunk = held[i]
                if chunk is None:
                    continue
                keep = check.decide(chunk, replies)
                after = next(chunks, None)
                packet = ([_MULTI, check.restores(chunk, keep), _EXEC] if keep.any()
                          else [_UNWATCH])
                replies.send([*packet, *(after.watch_and_read if after else [])])
                sent.append((replies, chunk, keep))
                held[i] = after
            for replies, chunk, keep in sent:
                if keep.any():
                    _applied(replies, config, chunk.entities[keep], done)
                else:
                    replies.next()  # UNWATCH: OK
    return _without(views, rows, done)


def _integers(replies: list[object]) -> npt.NDArray[np.int64]:
    """Integer replies as an array; -2 (no reply's value) for any other reply."""
    try:
        return np.array(replies, dtype=np.int64)
    except (TypeError, ValueError):
        return np.array([r if isinstance(r, int) else -2 for r in replies], dtype=np.int64)


def _applied(replies: _Replies, config: RedisOnlineStoreConfig,
             entities: npt.NDArray[np.int64], done: npt.NDArray[np.bool_]) -> None:
    """Read the replies of one ``MULTI``, ``RESTORE ... REPLACE`` of ``entities``, ``EXEC``
    and mark in ``done`` the entities replaced. An aborted ``EXEC`` (a watched key changed)
    replaces none; a refused ``RESTORE`` (when queued or when run) leaves its entity to the
    ``HSET`` path and the server to be probed again."""
    refused = replies.skip(1 + len(entities))  # OK, QUEUED per RESTORE
    result = replies.next()
    if isinstance(result, list):
        failed = _first_error(result)
        done[entities if failed is None else entities[
            [not isinstance(reply, ResponseError) for reply in result]]] = True
        refused = refused or failed
    if refused is not None:
        _payload_refused(config, f"RESTORE ... REPLACE of an entity's hash ({refused})")


@dataclass(frozen=True)
class _CheckedChunk:
    """Up to ``CHUNK`` entities of a :class:`_LayoutCheck`: their indices in the write's
    union, the ``WATCH`` and reads that check them, their ``RESTORE`` commands."""

    entities: npt.NDArray[np.int64]
    watch_and_read: list[bytes | memoryview]
    restore: B.Packed


@dataclass(frozen=True)
class _LayoutCheck:
    """What :func:`_replace_existing` needs to check and replace the write's entities:
    per entity (of the write's union) its key as a bulk string, its row per view, its
    payload's field count, its rows' event times (seconds, nanos; (entities, views))."""

    hashes: list[D.ViewFields]
    rows: npt.NDArray[np.int64]
    keys: B.Packed
    counts: npt.NDArray[np.int64]
    times: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]
    ts_fields: list[bytes]
    ttl: int
    version: bytes

    @property
    def reads(self) -> int:
        """Replies per entity to the reads: HLEN, PTTL (no TTL to set), HMGET."""
        return 2 if self.ttl else 3

    def chunks(self) -> Iterator[_CheckedChunk]:
        """The chunks, built ``PLAN_BLOCK`` entities at a time as they are asked for (the
        payloads of a block while the chunks before it are on the wire); entities whose
        values no payload can hold are left out (the ``HSET`` path writes them)."""
        n = len(self.counts)
        hmget = b"*%d\r\n%s" % (2 + len(self.ts_fields), _resp_args([b"HMGET"]))
        fields = _resp_args(self.ts_fields)
        for lo in range(0, n, PLAN_BLOCK):
            block = np.arange(lo, min(lo + PLAN_BLOCK, n))
            positions, payloads = D.hash_payloads(self.hashes, self.rows[block], self.version)
            chosen = block[positions]
            m = len(chosen)
            if not m:
                continue
            keys = B.take(self.keys, chosen)
            pttl: list[B.Cells | B.Packed] = ([] if self.ttl else
                                              [B.const(b"*2\r\n" + _resp_args([b"PTTL"]), m),
                                               keys])
            reads = B.concat([B.const(b"*2\r\n" + _resp_args([b"HLEN"]), m), keys, *pttl,
                              B.const(hmget, m), keys, B.const(fields, m)])
            restore = B.concat([B.const(b"*5\r\n" + _resp_args([b"RESTORE"]), m), keys,
                                B.const(_resp_args([b"%d" % (self.ttl * 1000)]), m),
                                *_bulk([payloads]), B.const(_resp_args([b"REPLACE"]), m)])
            for at in range(0, m, CHUNK):
                end = min(at + CHUNK, m)
                watch = b"*%d\r\n%s" % (1 + end - at, _resp_args([b"WATCH"]))
                yield _CheckedChunk(chosen[at:end],
                                    [watch, _span(keys.rows(at, end)), _span(reads.rows(at, end))],
                                    restore.rows(at, end))

    def decide(self, chunk: _CheckedChunk, replies: _Replies) -> npt.NDArray[np.bool_]:
        """Read the chunk's ``WATCH`` and read replies; per entity, whether ``RESTORE ...
        REPLACE`` of its payload leaves what ``HSET`` would (see :func:`_replace_existing`)."""
        entities = chunk.entities
        m, views = len(entities), len(self.ts_fields)
        got = replies.many(1 + m * self.reads)[1:]  # WATCH: OK, then the reads
        stored = got[self.reads - 1 :: self.reads]
        keep = _integers(got[:: self.reads]) == self.counts[entities]
        if not self.ttl:
            keep &= _integers(got[1 :: self.reads]) == -1
        try:
            flat = list(itertools.chain.from_iterable(stored))  # type: ignore[arg-type]
        except TypeError:  # an error reply (e.g. WRONGTYPE) instead of a field list
            keep &= np.fromiter((isinstance(s, list) for s in stored), bool, m)
            flat = [v for s in stored for v in (s if isinstance(s, list) else [None] * views)]
        held = np.fromiter(map(operator.is_not, flat, itertools.repeat(None)), bool,
                           m * views).reshape(m, views)
        seconds, nanos, readable = (a.reshape(m, views) for a in E.decode_timestamps(flat))
        new_seconds, new_nanos = (t[entities] for t in self.times)
        not_older = readable & ((new_seconds > seconds)
                                | ((new_seconds == seconds) & (new_nanos >= nanos)))
        has_row = self.rows[entities] >= 0
        return keep & np.where(has_row, held & not_older, ~held).all(axis=1)

    @staticmethod
    def restores(chunk: _CheckedChunk, keep: npt.NDArray[np.bool_]) -> bytes | memoryview:
        """The ``RESTORE ... REPLACE`` commands of the kept entities."""
        return _span(chunk.restore) if keep.all() else B.select_rows(chunk.restore, keep)


def _payload_refused(config: RedisOnlineStoreConfig, what: str) -> None:
    """A payload the server refused: the server is probed again by the next write
    (:func:`restore_version`; e.g. a server replaced by an older one), and the refusal
    is logged once per server. The entities go the ``HSET`` way all the same."""
    with _stores_lock:
        _versions.pop(config.connection_string, None)
    address = redis_address(config.connection_string)
    if address not in _refusals:
        _refusals.add(address)
        _log.warning("Redis at %s refused a %s; such entities are written with HSET instead",
                     address, what)


def _restored(reply: object, config: RedisOnlineStoreConfig) -> bool:
    """Whether a ``RESTORE`` reply says the hash was created. ``BUSYKEY`` (another writer
    created it first) is expected; any other refusal is logged once per server, and the
    entity is left to the checked path all the same."""
    if not isinstance(reply, ResponseError):
        return True
    if not str(reply).startswith("BUSYKEY"):
        _payload_refused(config, f"RESTORE of a new entity's hash ({reply})")
    return False


_refusals: set[str] = set()
_log = logging.getLogger(__name__)


def _union(views: list[tuple[str, Batch]]) -> tuple[B.Packed, npt.NDArray[np.int64]]:
    """The entities of all views (entity keys without the project), in order of first
    appearance (view 0's first), and per entity and view the view's row for it (-1:
    none). One view: its rows as they are."""
    if len(views) == 1:
        batch = views[0][1]
        return batch.keys, np.arange(batch.n, dtype=np.int64)[:, None]
    all_keys = pa.chunked_array(
        [_as_binary(batch.keys) for _, batch in views], pa.large_binary()).combine_chunks()
    encoded = pc.dictionary_encode(all_keys)
    codes = encoded.indices.to_numpy()
    union = _packed_of(encoded.dictionary)
    rows = np.full((union.n, len(views)), -1, dtype=np.int64)
    at = 0
    for v, (_, batch) in enumerate(views):
        rows[codes[at : at + batch.n], v] = np.arange(batch.n)
        at += batch.n
    return union, rows


def _hash_views(views: list[tuple[str, Batch]], fields: list[list[bytes]]) -> list[D.ViewFields]:
    """Each view's fields in the entities' hashes (``fields``: :func:`_hash_fields`), their
    values encoded once for the whole write: ``_ts:<view>`` and its Timestamp bytes, then
    each feature's ``ValueProto`` bytes."""
    return [D.ViewFields(names, [[E.timestamp_protos(batch.event_micros)],
                                 *(batch.encoded_parts(name) for name in batch.features)])
            for (_, batch), names in zip(views, fields, strict=True)]


def _by_timestamp_length(batch: Batch) -> Batch:
    """``batch`` with its entities grouped by the length of their Timestamp bytes.

    Entities are independent, so they may go in any order: grouping them makes every
    part fixed-width within a group, and fixed-width parts are concatenated without
    any per-byte masking."""
    ts_len = E.timestamp_protos(batch.event_micros).lengths()
    return reorder(batch, np.argsort(ts_len, kind="stable"))


def _groups(batch: Batch) -> list[tuple[int, int]]:
    groups = np.flatnonzero(np.diff(E.timestamp_protos(batch.event_micros).lengths())) + 1
    return list(itertools.pairwise([0, *groups.tolist(), batch.n]))


def _fields_part(group: Batch, ts_field: bytes, fields: list[bytes]) -> list[B.Cells | B.Packed]:
    """RESP arguments ``_ts:<view> <ts> <field> <value> ...`` of each entity of ``group``."""
    size = group.n
    parts: list[B.Cells | B.Packed] = [B.const(_resp_args([ts_field]), size),
                                       *_bulk([E.timestamp_protos(group.event_micros)])]
    for name, hash_field in zip(group.features, fields, strict=True):
        parts += [B.const(_resp_args([hash_field]), size), *_bulk(group.encoded_parts(name))]
    return parts


_BLOCK = 4096
"""Entities whose commands are built at once when several views share the hashes."""

PLAN_BLOCK = 8192
"""Entities per plan of a one-view write: the plans are built one after the other while
the chunks of the ones before are on the wire, so the server starts after the first
block's commands are built instead of the whole batch's (building them is ~2-4 µs of
client CPU per entity, about half the server's own time for the write)."""


def _plans(views: list[tuple[str, Batch]], project: bytes, ttl: int) -> Iterator[_Plan]:
    """The write's plans, built lazily: one view, ``PLAN_BLOCK`` entities each (every
    entity in exactly one plan); several views, one plan over the union of their
    entities (the views' rows of one entity must share its ``HSET``)."""
    if len(views) > 1:
        yield _Plan.build(views, project, ttl)
        return
    name, batch = views[0]
    for lo in range(0, batch.n, PLAN_BLOCK):
        yield _Plan.build([(name, batch.rows(lo, min(lo + PLAN_BLOCK, batch.n)))], project, ttl)


def _chunks(plans: Iterable[_Plan]) -> Iterator[_Chunk]:
    """The ``CHUNK``-entity chunks of each plan in turn (a plan is built when its first
    chunk is asked for)."""
    for plan in plans:
        for lo in range(0, plan.n, CHUNK):
            yield _Chunk(plan, lo, min(lo + CHUNK, plan.n))


@dataclass
class _Plan:
    """The entities of one write (the union of the views' entities) and their commands.

    ``commands[u]`` is entity ``u``'s ``HSET`` with the fields of every view that has a
    row for it (+ ``EXPIRE``); when the stored timestamps make only some of those views
    newer, :meth:`partial` builds the command with just those.
    """

    keys: B.Packed
    """Per entity: its hash key as a RESP bulk string."""
    commands: B.Packed
    ts_fields: list[bytes]
    pairs: list[int]
    """Per view: its field/value pairs in an ``HSET`` (features and ``_ts``)."""
    segments: list[B.Packed]
    """Per view: the RESP arguments of its fields, per row of its (reordered) batch."""
    rows: npt.NDArray[np.int64]
    """(entities, views): the row of each view's batch for the entity (-1: none)."""
    times: B.Packed
    """Per entity: the RESP arguments of :data:`LUA_DECIDE` giving its new event time per
    view (seconds and nanoseconds; empty seconds where the view has no row for it)."""
    ttl: int

    @property
    def n(self) -> int:
        return self.keys.n

    @property
    def present(self) -> npt.NDArray[np.bool_]:
        return self.rows >= 0

    @classmethod
    def build(cls, views: list[tuple[str, Batch]], project: bytes, ttl: int) -> _Plan:
        batches = [_by_timestamp_length(batch) for _, batch in views]
        ts_fields = [f"_ts:{name}".encode() for name, _ in views]
        fields = [[_mmh3(f"{name}:{feature}") for feature in batch.features]
                  for (name, _), batch in zip(views, batches, strict=True)]
        if len(views) == 1:
            return cls._one_view(batches[0], ts_fields[0], fields[0], project, ttl)
        segments = [
            B.stack([B.concat(_fields_part(batch.rows(lo, hi), ts_field, f))
                   for lo, hi in _groups(batch)])
            for batch, ts_field, f in zip(batches, ts_fields, fields, strict=True)
        ]
        union, rows = _union([(name, batch) for (name, _), batch
                              in zip(views, batches, strict=True)])
        n = union.n
        seconds, nanos = _event_times([(name, batch) for (name, _), batch
                                       in zip(views, batches, strict=True)], rows)
        keys = B.concat(_bulk([union, B.const(project, n)]))
        pairs = [1 + len(f) for f in fields]
        plan = cls(keys, keys, ts_fields, pairs, segments, rows,
                   _time_args(seconds, nanos, rows >= 0), ttl)
        blocks = [np.arange(lo, min(lo + _BLOCK, n)) for lo in range(0, n, _BLOCK)]
        plan.commands = B.stack([plan._commands(block, plan.present[block]) for block in blocks])
        return plan

    @classmethod
    def _one_view(cls, batch: Batch, ts_field: bytes, fields: list[bytes], project: bytes,
                  ttl: int) -> _Plan:
        """One view: every entity's command is built in one fixed-width pass per group."""
        head = b"*%d\r\n%s" % (2 + 2 * (len(fields) + 1), _resp_args([b"HSET"]))
        key_data: list[B.Packed] = []
        cmd_data: list[B.Packed] = []
        for lo, hi in _groups(batch):
            group = batch.rows(lo, hi)
            size = hi - lo
            key = _bulk([group.keys, B.const(project, size)])
            parts: list[B.Cells | B.Packed] = [B.const(head, size), *key,
                                               *_fields_part(group, ts_field, fields)]
            if ttl:
                parts += _expire(key, ttl, size)
            key_data.append(B.concat(key))
            cmd_data.append(B.concat(parts))
        n = batch.n
        micros = batch.event_micros[:, None]
        segments: list[B.Packed] = []  # only needed by partial(), never with one view
        return cls(B.stack(key_data), B.stack(cmd_data), [ts_field], [1 + len(fields)], segments,
                   np.arange(n, dtype=np.int64)[:, None],
                   _time_args(micros // 1_000_000, (micros % 1_000_000) * 1_000,
                              np.ones((n, 1), dtype=bool)), ttl)

    def _commands(self, entities: npt.NDArray[np.int64], views: npt.NDArray[np.bool_]
                  ) -> B.Packed:
        """The ``HSET`` (+ ``EXPIRE``) of ``entities`` with the views ``views`` marks
        (one row of ``views`` per entity)."""
        size = len(entities)
        present = views & (self.rows[entities] >= 0)
        argc = 2 + present.astype(np.int64) @ (2 * np.asarray(self.pairs, dtype=np.int64))
        key = B.take(self.keys, entities)
        parts: list[B.Cells | B.Packed] = [B.const(b"*", size), B.ascii_decimal(argc),
                                           B.const(b"\r\n" + _resp_args([b"HSET"]), size), key]
        for v, segment in enumerate(self.segments):
            parts.append(B.take(segment, np.maximum(self.rows[entities, v], 0), present[:, v]))
        if self.ttl:
            parts += _expire([key], self.ttl, size)
        return B.concat(parts)

    def partial(self, entities: npt.NDArray[np.int64], views: npt.NDArray[np.bool_]) -> bytes:
        """The commands of ``entities`` (each with at least one view marked in ``views``)."""
        return _span(self._commands(entities, views)).tobytes()


def _event_times(views: list[tuple[str, Batch]], rows: npt.NDArray[np.int64]
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(entities, views) event times of each entity's row per view (``rows``, -1: none):
    whole seconds since the epoch (floor) and the nanoseconds past them; 0 where none."""
    seconds = np.zeros(rows.shape, dtype=np.int64)
    nanos = np.zeros(rows.shape, dtype=np.int64)
    for v, (_, batch) in enumerate(views):
        mine = np.flatnonzero(rows[:, v] >= 0)
        micros = batch.event_micros[rows[mine, v]]
        seconds[mine, v] = micros // 1_000_000
        nanos[mine, v] = (micros % 1_000_000) * 1_000
    return seconds, nanos


def _time_args(seconds: npt.NDArray[np.int64], nanos: npt.NDArray[np.int64],
               present: npt.NDArray[np.bool_]) -> B.Packed:
    """Per entity (row of the (entities, views) inputs): ``$<len>\\r\\n<seconds>\\r\\n
    $<len>\\r\\n<nanos>\\r\\n`` per view, seconds signed decimal and empty where the
    view has no row."""
    n, views = seconds.shape
    parts: list[B.Cells | B.Packed] = []
    for v in range(views):
        sec, here = seconds[:, v], present[:, v]
        # the sign and the digits are one bulk string's two parts (no join, no byte mask)
        minus = B.const(b"-", n).where((sec < 0) & here)
        signed: list[B.Cells | B.Packed] = [minus, B.ascii_decimal(np.abs(sec)).where(here)]
        parts += [*_bulk(signed), *_bulk([B.ascii_decimal(nanos[:, v])])]
    return B.concat(parts)


def _expire(key: list[B.Cells | B.Packed], ttl: int, size: int) -> list[B.Cells | B.Packed]:
    return [B.const(b"*3\r\n" + _resp_args([b"EXPIRE"]), size), *key,
            B.const(_resp_args([str(ttl).encode()]), size)]


def _as_binary(packed: B.Packed) -> pa.Array:
    """``packed`` as an Arrow ``large_binary`` array (no copy of the bytes)."""
    start = int(packed.offsets[0])
    offsets = packed.offsets - start
    data = packed.data[start : int(packed.offsets[-1])]
    return pa.Array.from_buffers(pa.large_binary(), packed.n,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _packed_of(array: pa.Array) -> B.Packed:
    """An Arrow binary array as ``Packed``."""
    return B.from_arrow(array)


def _span(packed: B.Packed) -> memoryview:
    return packed.data[int(packed.offsets[0]) : int(packed.offsets[-1])].data


_MORE = object()
"""What the reply reader answers when it needs more bytes (unlike ``False``, which equals
an integer reply of 0, it equals nothing else)."""


_CLOSED = "Redis closed the connection"


class _Replies:
    """Replies read straight from the connection's socket and parsed by hiredis (C).

    redis-py's ``read_response`` costs a few µs of Python per reply; one write
    gets one ``QUEUED`` and one ``HSET`` reply per entity, so they are parsed
    here in bulk instead. The connection is redis-py's own (its handshake did
    AUTH, SELECT and TLS), and every reply is consumed before it is handed back.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._reader = hiredis.Reader(replyError=ResponseError, notEnoughData=_MORE)

    def send(self, parts: Sequence[bytes | memoryview]) -> None:
        self._sock.sendall(b"".join(parts))

    def next(self) -> object:
        """The next reply (``ResponseError`` instances for error replies)."""
        return self.many(1)[0]

    def many(self, count: int) -> list[object]:
        """The next ``count`` replies, parsed by hiredis without Python per reply."""
        replies: list[object] = []
        while True:
            replies += itertools.islice(iter(self._reader.gets, _MORE), count - len(replies))
            if len(replies) == count:
                return replies
            data = self._sock.recv(1 << 20)
            if not data:
                raise ConnectionError(_CLOSED)
            self._reader.feed(data)

    def uniform(self, count: int, width: int, kind: bytes) -> npt.NDArray[np.uint8] | list[object]:
        """The next ``count`` replies. When they are all ``width`` bytes of type ``kind``
        (``b":"``, ``b"+"``), they come straight from the socket as a ``(count, width)``
        byte matrix (no Python per reply); otherwise (an error among them) hiredis parses
        them and they come as a list, the stream in step either way. Replies are aligned:
        the first one unlike the others starts a row, so its type byte shows it."""
        if self._reader.has_data() or not count:
            return self.many(count)
        block = bytearray(count * width)
        view = memoryview(block)
        got = 0
        while got < len(block):
            size = self._sock.recv_into(view[got:])
            if not size:
                raise ConnectionError(_CLOSED)
            got += size
        matrix = np.frombuffer(block, dtype=np.uint8).reshape(count, width)
        if ((matrix[:, 0] == kind[0]) & (matrix[:, -2] == ord("\r"))
                & (matrix[:, -1] == ord("\n"))).all():
            return matrix
        self._reader.feed(bytes(block))
        return self.many(count)

    def skip(self, count: int) -> ResponseError | None:
        """Read ``count`` replies; the first error among them, if any."""
        return _first_error(self.many(count))


def _first_error(replies: list[object]) -> ResponseError | None:
    """The first error reply among ``replies``, if any."""
    if replies.count(b"QUEUED") + replies.count(b"OK") == len(replies):  # no Python per reply
        return None
    return next((r for r in replies if isinstance(r, ResponseError)), None)


_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"
_UNWATCH = b"*1\r\n$7\r\nUNWATCH\r\n"

@dataclass(frozen=True)
class _Chunk:
    """Consecutive entities ``lo:hi`` (rows of ``plan``) written as one unit."""

    plan: _Plan
    lo: int
    hi: int

    @property
    def rows(self) -> npt.NDArray[np.int64]:
        return np.arange(self.lo, self.hi)

    def __len__(self) -> int:
        return self.hi - self.lo


@dataclass
class _ChunkWriter:
    """WATCH, read, decide, MULTI/EXEC chunk after chunk, one round trip per chunk.

    The WATCH and timestamp read of the next chunk travel in the same packet as
    the MULTI/EXEC of the current one (EXEC ends every WATCH, so the order on
    the wire keeps each chunk's guarantees). A chunk whose EXEC was aborted by
    a concurrent writer is read and decided again, up to ``RETRIES`` times.
    """

    replies: _Replies
    sha: bytes
    views: int
    """Views of the write (every plan has their ``_ts`` fields in the same order)."""
    per_entity: int
    guard: bytes
    """A key of this write only: the optimistic pass WATCHes it, and :data:`LUA_DECIDE`
    writes it to abort a chunk's EXEC."""
    written: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    """Per view: entities whose fields of the view were written."""

    def __post_init__(self) -> None:
        self.written = np.zeros(self.views, dtype=np.int64)

    def _watch_read(self, chunk: _Chunk, guarded: bool = False) -> list[bytes | memoryview]:
        plan, lo, hi = chunk.plan, chunk.lo, chunk.hi
        keys = plan.keys.rows(lo, hi)
        count = keys.n
        fields = plan.ts_fields
        views = len(fields)
        guard = _resp_args([self.guard])
        script = ([b"EVAL", LUA_DECIDE.encode()] if guarded else [b"EVALSHA", self.sha])
        return [b"*%d\r\n%s%s" % (1 + count + guarded, _resp_args([b"WATCH"]),
                                  guard if guarded else b""), _span(keys),
                b"*%d\r\n%s%s" % (6 + count + views + 2 * views * count,
                                  _resp_args([*script, b"%d" % (1 + count)]), guard),
                _span(keys), _resp_args([b"1" if guarded else b"0", b"%d" % views, *fields]),
                _span(plan.times.rows(lo, hi))]

    def optimistic(self, chunks: Iterable[_Chunk], group: int = 32
                   ) -> tuple[npt.NDArray[np.int64], list[_Chunk]]:
        """Every chunk without waiting on any reply: WATCH (guard + keys), the guarded
        :data:`LUA_DECIDE`, MULTI, every entity's HSET, EXEC, all pipelined, ``group``
        chunks per packet. A chunk's EXEC runs only when no watched key changed, and the
        script changes the guard unless every row of the chunk is not older than the
        stored one: so what an EXEC applies was decided newer, atomically, and the
        chunks whose EXEC aborted (a stale row, an error, a concurrent writer) are
        returned to be decided entity by entity. Returns (entities written per view,
        those chunks). The steady state of a stream (every row newer) costs no round
        trip per chunk. ``chunks`` is consumed lazily, ``group`` at a time, after the
        previous group is sent and before its replies are read: building the next plan
        (see :func:`_plans`) overlaps the server's work on what is on the wire."""
        written = np.zeros(self.views, dtype=np.int64)
        again: list[_Chunk] = []
        pending: list[_Chunk] = []
        source = iter(chunks)
        while True:
            batch = list(itertools.islice(source, group))
            if batch:
                packet: list[bytes | memoryview] = []
                for chunk in batch:
                    commands = chunk.plan.commands.rows(chunk.lo, chunk.hi)
                    packet += [*self._watch_read(chunk, guarded=True), _MULTI,
                               _span(commands), _EXEC]
                self.replies.send(packet)
            for chunk in pending:
                self.replies.next()  # WATCH: OK
                self.replies.next()  # the decisions (or the error that aborted the EXEC)
                self.replies.skip(1 + len(chunk) * self.per_entity)  # MULTI, QUEUED
                result = self.replies.next()
                if result is None or isinstance(result, ResponseError):
                    again.append(chunk)
                    continue
                replies = list(result)  # type: ignore[call-overload]
                if any(isinstance(r, ResponseError) for r in replies):
                    again.append(chunk)  # rewritten whole by the careful pass
                    continue
                written += chunk.plan.present[chunk.lo : chunk.hi].sum(axis=0)
            if not batch:
                return written, again
            pending = batch

    def _read_stored(self) -> bytes | ResponseError:
        """The reply of :data:`LUA_DECIDE` for the chunk just watched."""
        self.replies.next()  # WATCH: OK
        return self.replies.next()  # type: ignore[return-value]

    def _body(self, chunk: _Chunk, newer: npt.NDArray[np.bool_]) -> bytes | memoryview:
        """The commands of the entities with a newer row for at least one view."""
        plan = chunk.plan
        present = plan.present[chunk.lo : chunk.hi]
        keep: npt.NDArray[np.bool_] = np.asarray(newer.any(axis=1))
        if not np.array_equal(newer[keep], present[keep]):  # some views stale, others not
            return plan.partial(chunk.rows[keep], newer[keep])
        commands = plan.commands.rows(chunk.lo, chunk.hi)
        return _span(commands) if keep.all() else B.select_rows(commands, keep)

    def run(self, chunks: list[_Chunk]
            ) -> Generator[None, None, tuple[npt.NDArray[np.int64], Exception | None]]:
        """Write every chunk; returns (entities written per view, first error).

        A generator that yields after each packet it sends, before reading the
        replies, so ``_drive`` can keep several connections busy at once.
        """
        first_error: Exception | None = None
        if not chunks:
            return self.written, None
        self.replies.send(self._watch_read(chunks[0]))
        yield
        stored = self._read_stored()
        i, tries = 0, 0
        while i < len(chunks):
            chunk = chunks[i]
            ahead = self._watch_read(chunks[i + 1]) if i + 1 < len(chunks) else []
            if isinstance(stored, ResponseError):  # e.g. WRONGTYPE: a key is not a hash
                first_error = first_error or stored
                self.replies.send([_UNWATCH, *ahead])
                yield
                self.replies.next()
                i, tries = i + 1, 0
                stored = self._read_stored() if ahead else stored
                continue
            newer = _newer(stored, chunk.plan, chunk.rows)
            keep = newer.any(axis=1)
            kept = int(keep.sum())
            if kept == 0:
                self.replies.send([_UNWATCH, *ahead])
                yield
                self.replies.next()
            else:
                self.replies.send([_MULTI, self._body(chunk, newer), _EXEC, *ahead])
                yield
                queued_error = self.replies.skip(1 + kept * self.per_entity)
                result = self.replies.next()
                if result is None:  # a watched key changed: decide this chunk again
                    tries += 1
                    if ahead:
                        self._read_stored()
                        self.replies.send([_UNWATCH])
                        yield
                        self.replies.next()
                    if tries >= RETRIES:
                        first_error = first_error or OnlineStoreError(
                            f"concurrent writers kept changing the same {len(chunk)} keys; "
                            f"gave up after {RETRIES} tries")
                        i, tries = i + 1, 0
                        if i < len(chunks):
                            self.replies.send(self._watch_read(chunks[i]))
                            yield
                            stored = self._read_stored()
                        continue
                    self.replies.send(self._watch_read(chunk))
                    yield
                    stored = self._read_stored()
                    continue
                if queued_error is not None or isinstance(result, ResponseError):
                    first_error = (first_error or queued_error  # EXECABORT: nothing applied
                                   or (result if isinstance(result, ResponseError) else None))
                else:
                    replies = list(result)  # type: ignore[call-overload]
                    failed = [r for r in replies if isinstance(r, ResponseError)]
                    ok = np.array([not isinstance(r, ResponseError)
                                   for r in replies[:: self.per_entity]], dtype=bool)
                    self.written += newer[keep][ok].sum(axis=0)
                    first_error = first_error or (failed[0] if failed else None)
            i, tries = i + 1, 0
            if ahead:
                stored = self._read_stored()
        return self.written, first_error


def _drive(lanes: list[Generator[None, None, tuple[npt.NDArray[np.int64], Exception | None]]]
           ) -> tuple[npt.NDArray[np.int64], Exception | None]:
    """Run the lanes round-robin: every lane sends its packet before any waits for
    its replies, so the server works on one lane while the client reads another."""
    written: npt.NDArray[np.int64] | int = 0
    first_error = None
    active = list(lanes)
    while active:
        still = []
        for lane in active:
            try:
                next(lane)
                still.append(lane)
            except StopIteration as done:
                written = written + done.value[0]
                first_error = first_error or done.value[1]
        active = still
    return np.asarray(written, dtype=np.int64), first_error


def _newer(decided: bytes, plan: _Plan, chunk: npt.NDArray[np.int64]
           ) -> npt.NDArray[np.bool_]:
    """(entities ``chunk`` of ``plan``, views): the entity has a row for the view and no stored
    ``_ts`` of the view or one not newer than the row's (equal replaces), as
    :data:`LUA_DECIDE` answered."""
    flags = np.frombuffer(decided, dtype=np.uint8).reshape(len(chunk), len(plan.ts_fields))
    return (flags == ord("1")) & plan.present[chunk]
