"""Bulk writes into Feast's Redis online store, in Feast's own key and hash layout.

Layout (``feast.infra.online_stores.redis``): one hash per entity at key
``serialised_entity_key + project``; per feature the field
``mmh3("{view}:{feature}")`` (4 bytes) holds the serialised ``ValueProto``;
the field ``_ts:{view}`` holds the event time as a serialised
``google.protobuf.Timestamp``.

Ordering and atomicity: a Lua script does check-and-set per entity on the
server: it decodes the stored ``_ts`` and writes the whole hash with one
``HSET`` only when the new event time is strictly newer (as Feast's own
writer decides). One ``HSET`` per entity makes each entity all old or all
new whatever fails; running the check inside the script (instead of Feast's
read-then-write from the client) leaves no window for a concurrent writer.
We chose a script over ``WATCH``/``MULTI``/``EXEC`` because optimistic
transactions over thousands of watched keys must be retried whole on any
concurrent write, while the script needs one round trip and never retries.

Performance: the commands for the whole batch are built as raw RESP bytes by
numpy (no per-row Python): ``EVALSHA`` calls of ``CHUNK`` entities each, all
sent down one connection as a pipeline, then the replies are read. Each
script call runs atomically and blocks Redis for about a millisecond.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence

import numpy as np
from feast.infra.online_stores.helpers import _mmh3
from feast.infra.online_stores.redis import RedisOnlineStore, RedisOnlineStoreConfig
from redis.exceptions import RedisError, ResponseError

from featureflow.errors import OnlineStoreError
from featureflow.online import _bytes as B
from featureflow.online import encoding as E
from featureflow.online.batch import Batch, reorder

CHUNK = 512
"""Entities per ``EVALSHA`` call: large enough to amortise the call, small enough
that one call holds Redis for only about a millisecond."""

LUA_CHECK_AND_SET = r"""
-- KEYS: entity hash keys.
-- ARGV: m (features), ttl seconds (0: none), ts field, m feature fields,
--       then per key: Timestamp bytes, m serialised values.
-- Writes a key only when its new Timestamp is strictly newer than the stored one.
local function ts_of(s)
  local sec, nanos, i, n = 0, 0, 1, #s
  while i <= n do
    local tag = string.byte(s, i)
    i = i + 1
    local v, mul, b, start = 0, 1, 128, i
    while b >= 128 do
      b = string.byte(s, i)
      i = i + 1
      v = v + (b % 128) * mul
      mul = mul * 128
    end
    if tag == 8 and i - start == 10 then
      -- negative seconds: two's complement over 64 bits, decoded exactly
      v, mul = 0, 1
      for k = 0, 8 do
        v = v + (127 - string.byte(s, start + k) % 128) * mul
        mul = mul * 128
      end
      v = -(v + 1)
    end
    if tag == 8 then sec = v elseif tag == 16 then nanos = v end
  end
  return sec, nanos
end

local m = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local tsf = ARGV[3]
local args = {tsf, false}
for j = 1, m do args[2 * j + 1] = ARGV[3 + j] end
local written = 0
for i = 1, #KEYS do
  local o = 3 + m + (i - 1) * (m + 1)
  local ts = ARGV[o + 1]
  local newer = true
  local old = redis.call('HGET', KEYS[i], tsf)
  if old then
    local os, on = ts_of(old)
    local ns, nn = ts_of(ts)
    newer = ns > os or (ns == os and nn > on)
  end
  if newer then
    args[2] = ts
    for j = 1, m do args[2 * j + 2] = ARGV[o + 1 + j] end
    redis.call('HSET', KEYS[i], unpack(args))
    if ttl > 0 then redis.call('EXPIRE', KEYS[i], ttl) end
    written = written + 1
  end
end
return written
"""

_stores: dict[str, RedisOnlineStore] = {}
_stores_lock = threading.Lock()


def _client(config: RedisOnlineStoreConfig):  # type: ignore[no-untyped-def]
    """Feast's own Redis client for ``config`` (same parsing of the connection string)."""
    with _stores_lock:
        store = _stores.setdefault(config.connection_string, RedisOnlineStore())
    return store._get_client(config)


def _bulk(parts: list[B.Cells | B.Packed]) -> list[B.Cells | B.Packed]:
    """RESP bulk-string framing ``$<len>\\r\\n<bytes>\\r\\n`` of the rows ``concat(parts)``."""
    cells = [p if isinstance(p, B.Cells) else B.pad(p) for p in parts]
    n = cells[0].n
    crlf = B.const(b"\r\n", n)
    if all(c.lengths is None for c in cells):
        return [B.const(b"$%d\r\n" % sum(c.width for c in cells), n), *cells, crlf]
    total = np.zeros(n, dtype=np.int64)
    for c in cells:
        total += c.row_lengths()
    return [B.const(b"$", n), B.ascii_decimal(total), crlf, *cells, crlf]


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
    fails; entities of script calls that ran are written whole, the others not.
    """
    n = batch.n
    if n == 0:
        return 0, 0
    names = [name for name in batch.features]
    ts_field = f"_ts:{fv_name}".encode()
    fields = [_mmh3(f"{fv_name}:{name}") for name in names]
    ttl = int(config.key_ttl_seconds or 0)

    client = _client(config)
    try:
        sha = client.script_load(LUA_CHECK_AND_SET)
    except RedisError as exc:
        msg = f"Redis at {config.connection_string} refused the write script: {exc}"
        raise OnlineStoreError(msg) from exc
    fixed_args = _resp_args(
        [str(len(names)).encode(), str(ttl).encode(), ts_field, *fields]
    )
    # Entities are independent, so they may go in any order: grouping them by the
    # length of their Timestamp bytes makes every part fixed-width within a group,
    # and fixed-width parts are concatenated without any per-byte masking.
    ts_bytes = E.timestamp_protos(batch.event_micros).lengths()
    order = np.argsort(ts_bytes, kind="stable")
    batch = reorder(batch, order)
    edges = np.flatnonzero(np.diff(ts_bytes[order])) + 1
    bounds = [0, *edges.tolist(), n]
    project_bytes = project.encode("utf8")
    m = len(names)
    commands: list[bytes | memoryview] = []
    calls = 0
    for lo, hi in itertools.pairwise(bounds):
        group = batch.rows(lo, hi)
        keys = B.concat(_bulk([group.keys, B.const(project_bytes, hi - lo)]))
        arg_parts = _bulk([E.timestamp_protos(group.event_micros)])
        for name in names:
            arg_parts += _bulk(group.encoded_parts(name))
        args = B.concat(arg_parts)
        for start in range(0, hi - lo, CHUNK):
            stop = min(start + CHUNK, hi - lo)
            count = stop - start
            n_args = 3 + count + 3 + m + count * (1 + m)
            head = b"*%d\r\n%s" % (n_args, _resp_args([b"EVALSHA", sha.encode(), b"%d" % count]))
            commands += [
                head,
                keys.data[int(keys.offsets[start]) : int(keys.offsets[stop])].data,
                fixed_args,
                args.data[int(args.offsets[start]) : int(args.offsets[stop])].data,
            ]
            calls += 1
    return _run(client, commands, calls, n, config.connection_string)


def _run(client, commands: list[bytes | memoryview], replies: int, n: int,  # type: ignore[no-untyped-def]
         where: str) -> tuple[int, int]:
    """Send ``commands`` down one connection and sum the script replies."""
    pool = client.connection_pool
    conn = pool.get_connection()
    written = 0
    first_error: Exception | None = None
    try:
        conn.send_packed_command(commands)
        for _ in range(replies):
            try:
                written += int(conn.read_response())
            except ResponseError as exc:  # a script error: keep reading the other replies
                if first_error is None:
                    first_error = exc
    except (RedisError, OSError) as exc:
        conn.disconnect()
        msg = (f"Redis write to {where} failed after {written} entities; every entity is "
               f"either fully old or fully new. Retry the batch: {exc}")
        raise OnlineStoreError(msg) from exc
    finally:
        pool.release(conn)
    if first_error is not None:
        msg = (f"Redis rejected part of the write to {where} ({written} entities written, "
               f"each fully): {first_error}")
        raise OnlineStoreError(msg) from first_error
    return written, n - written

