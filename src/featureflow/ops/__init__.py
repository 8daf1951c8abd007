"""featureflow.ops: rolling, hopping and session window aggregates.

Times are int64 nanoseconds (or any Arrow timestamp type); durations are
strings (``"500ns"``, ``"250ms"``, ``"10s"``, ``"5m"``, ``"1h"``, ``"1d"``),
ints (ns) or ``timedelta``. Rows may come in any order; ``keys`` (integers
or strings) split them into entities. Nulls and NaN values are skipped
(SQL semantics). The work is done by compiled Mojo kernels reading the Arrow
buffers in place, or by the numpy reference when those are not available
(see `backend`).
"""

from __future__ import annotations

import importlib.metadata
from typing import Literal

import numpy as np
import pyarrow as pa

from featureflow.ops import _backend, _inputs, _nonfinite, _query, _tables
from featureflow.ops._aggs import AGGS, parse_aggs
from featureflow.ops._byte_rows import ByteRows
from featureflow.ops._durations import duration_ns
from featureflow.ops._flat_json import FlatColumn, FlatField, FlatRead
from featureflow.ops._query import FrameStates
from featureflow.ops._resume import InitialRecords, KeyedRows, RunColumns, Spliced

__all__ = [
    "AGGS",
    "ByteRows",
    "FlatColumn",
    "FlatField",
    "FlatRead",
    "FrameStates",
    "InitialRecords",
    "KeyedRows",
    "Spliced",
    "ascii_decimal",
    "backend",
    "backend_reason",
    "crc64_rows",
    "describe",
    "gather_chunks",
    "gather_runs",
    "hash_payloads",
    "hopping",
    "join_rows",
    "merge_runs",
    "read_flat_json",
    "record_segments",
    "resume_sessions",
    "rolling",
    "rolling_at",
    "rolling_at_resuming",
    "sessions",
    "sort_run",
    "splice_records",
    "stamp_micros",
    "varint",
]


def backend() -> Literal["mojo", "numpy"]:
    """``"mojo"`` when the compiled kernels are in use, ``"numpy"`` for the reference."""
    return _backend.current().backend.name


def backend_reason() -> str:
    """Where the kernels were loaded from, or why the numpy fallback is used."""
    return _backend.current().reason


def describe() -> dict[str, str]:
    """Facts for ``featureflow doctor``: backend, reason, Mojo version, kernel library."""
    from featureflow.ops import _mojo

    choice = _backend.current()
    info = _mojo.build_info()
    try:
        installed = importlib.metadata.version("mojo")
    except importlib.metadata.PackageNotFoundError:
        installed = "not installed"
    return {
        "backend": choice.backend.name,
        "reason": choice.reason,
        "mojo_version": info.get("mojo_version", installed),
        "library": choice.library or "",
    }


def _key_encoder() -> _inputs.IntKeyEncoder | None:
    """The backend's fast integer-key encoder, if it has one."""
    return getattr(_backend.current().backend, "int_key_codes", None)


def rolling(
    ts: object,
    values: object,
    windows: object,
    aggs: object,
    keys: object = None,
    hop: object = None,
) -> pa.Table:
    """Rolling aggregates: one output row per input row, in input order.

    The frame of row i is every row j of the same key with
    ``ts[i] - W <= ts[j] <= ts[i]`` (SQL ``RANGE BETWEEN W PRECEDING AND
    CURRENT ROW``: rows with an equal ts are in each other's frame). With
    ``hop`` the frame is the sawtooth ``floor((ts[i] - W) / hop) * hop <=
    ts[j] <= ts[i]`` used by tiled feature stores. All bounds are in ns.

    Args:
        ts: event times, int64 ns or an Arrow timestamp array; no nulls.
        values: float64, float32, int64 or int32; nulls and NaN are skipped.
        windows: one duration W or a list of them, all computed in one call.
        aggs: names from `AGGS`.
        keys: optional entity per row (integers or strings).
        hop: optional duration; switches to the sawtooth frame.

    Returns:
        A table with column ``f"{agg}_{window}"`` (window as written by the
        caller) for every window and agg, window-major. count and
        count_distinct are int64; min/max/first/last keep the value type;
        the others are float64. A frame without a non-null value gives null
        (std/var: fewer than two values). With ±inf in the frame: sum/mean
        +inf, -inf, or NaN when it holds both; std/var NaN (module docstring).

    Raises:
        TypeError, ValueError: naming the argument that is wrong.
    """
    s = _inputs.series(ts, values, keys, _key_encoder())
    wins = _inputs.windows(windows)
    names = parse_aggs(aggs)
    hop_ns = None if hop is None else duration_ns(hop, "hop")
    columns = _tables.allocate(
        [(f"{agg}_{label}", agg) for label, _ in wins for agg in names], s.values.type, s.n
    )
    impl = _backend.current().backend

    def kernel(rows: _inputs.Series, aggs: list[str], cols: list[_tables.OutputColumn]) -> int:
        impl.rolling(rows, [ns for _, ns in wins], hop_ns, aggs, cols)
        return rows.n

    _nonfinite.aggregate(s, names, columns, kernel)
    return _tables.table(columns, s.n)


def _arrayish(obj: object) -> object:
    """Lists and tuples as numpy arrays (the other inputs as they are)."""
    return np.asarray(obj, dtype=np.int64) if isinstance(obj, list | tuple) else obj


def _run(keys: object, ts: object, values: object, at: int) -> _query.Run:
    keys, ts = _arrayish(keys), _arrayish(ts)
    key_arr = _inputs.to_array(keys, f"runs[{at}] keys")
    if not pa.types.is_integer(key_arr.type) or key_arr.null_count:
        msg = f"runs[{at}] keys: expected integers without nulls, got {key_arr.type}"
        raise TypeError(msg)
    ts_arr = _inputs.to_array(ts, f"runs[{at}] ts")
    if pa.types.is_timestamp(ts_arr.type):
        ts_arr = ts_arr.cast(pa.int64())
    if ts_arr.type != pa.int64() or ts_arr.null_count:
        msg = f"runs[{at}] ts: expected int64 ns without nulls, got {ts_arr.type}"
        raise TypeError(msg)
    n = len(ts_arr)
    if len(key_arr) != n:
        msg = f"runs[{at}] keys: length {len(key_arr)} does not match ts length {n}"
        raise ValueError(msg)
    return _query.Run(
        np.ascontiguousarray(key_arr.cast(pa.int64()).to_numpy(), dtype=np.int64),
        np.ascontiguousarray(ts_arr.to_numpy(), dtype=np.int64),
        _inputs.value_array(values, n, f"runs[{at}] values"),
    )


def rolling_at(
    runs: list[tuple[object, object, object]],
    windows: object,
    aggs: object,
    at_keys: object,
    at_ts: object,
    hop: object = None,
) -> pa.Table:
    """Rolling aggregates at query points: output row j is the frame of key
    ``at_keys[j]`` at time ``at_ts[j]`` (ns), as `rolling` computes it for a row
    of that key at that time: every row of the key with ``t - W <= ts <= t``
    (sawtooth with ``hop``), rows with ts == t included.

    Only the queried keys' rows within reach of their frames are read: the
    stream job asks for the frames of a micro-batch's new events and of each
    touched entity's latest event, with 24 h of events as context.

    Args:
        runs: (keys, ts, values) per run, each sorted by key then ts (ties in
            arrival order), the runs in arrival order: ties on (key, ts) across
            runs go to the earlier run. Integer keys without nulls; all runs'
            values of one type (see `rolling`).
        windows, aggs, hop: as for `rolling`.
        at_keys: the queries' keys (integers); at_ts: their times (int64 ns).

    Returns:
        One row per query, in query order, with the columns `rolling` returns.

    Raises:
        TypeError, ValueError: naming the argument that is wrong.
    """
    return rolling_at_resuming(runs, windows, aggs, at_keys, at_ts, hop)[0]


def rolling_at_resuming(
    runs: list[tuple[object, object, object]],
    windows: object,
    aggs: object,
    at_keys: object,
    at_ts: object,
    hop: object = None,
    *,
    frames: _query.FrameStates | None = None,
    clip_ns: int | None = None,
    added_run: int | None = None,
    in_place: bool = False,
) -> tuple[pa.Table, _query.FrameStates | None]:
    """`rolling_at`, resuming the frames an earlier call kept, and keeping this call's.

    With ``clip_ns`` set, the Mojo backend returns each queried key's frame state at its
    last query, per window, clipped to ``clip_ns`` (ns: the rows before it leave, as
    the caller drops them from its runs); a later call given them as ``frames`` (with
    the same windows, aggregates, hop and value type) resumes each key's frame instead
    of summing its rows again, and reads only the rows that entered and left it since.

    The caller's contract for ``frames``: ``runs`` hold every row the earlier call's
    runs held from its ``clip_ns`` on, and the rows added since are the run
    ``runs[added_run]`` (None: no rows were added). Keys whose states are written have
    their last query at or after their latest row. Out-of-order rows and queries
    move a key's frame back first; a key whose frame cannot resume (no state, a min
    or max leaving, a frame reaching before the earlier ``clip_ns``) is computed from
    its rows. The outputs equal `rolling_at`'s up to the rounding of the compensated
    sums' other order of additions.

    ``in_place``: the caller owns ``frames`` and needs them no more (every other key's
    state in them stays resumable: no row they hold left the runs). The kernel then
    writes the queried keys' states into ``frames``' array (`FrameStates.placed`), and
    the states returned hold every key of ``frames`` as well. Otherwise they hold the
    queried keys only.

    Returns:
        (`rolling_at`'s table, the frame states or None: the numpy backend keeps none,
        and none are kept without ``clip_ns``, for first/last/count_distinct or when
        values hold ±inf).
    """
    parsed = [_run(k, t, v, i) for i, (k, t, v) in enumerate(runs)]
    types = {run.values.type for run in parsed}
    if len(types) > 1:
        msg = f"runs: every run's values must have one type, got {sorted(map(str, types))}"
        raise TypeError(msg)
    qkeys = np.asarray(_inputs.to_array(_arrayish(at_keys), "at_keys").cast(pa.int64()).to_numpy())
    qts = np.asarray(_inputs.to_array(_arrayish(at_ts), "at_ts").cast(pa.int64()).to_numpy())
    if len(qkeys) != len(qts):
        msg = f"at_keys: length {len(qkeys)} does not match at_ts length {len(qts)}"
        raise ValueError(msg)
    wins = _inputs.windows(windows)
    names = parse_aggs(aggs)
    hop_ns = None if hop is None else duration_ns(hop, "hop")
    value_type = parsed[0].values.type if parsed else pa.float64()
    columns = _tables.allocate(
        [(f"{agg}_{label}", agg) for label, _ in wins for agg in names], value_type, len(qts)
    )
    if not parsed:  # no rows: empty frames
        parsed = [
            _query.Run(np.zeros(0, np.int64), np.zeros(0, np.int64), pa.array([], value_type))
        ]
    impl = _backend.current().backend
    plan = _query.plan(parsed, qkeys, qts, impl.run_segments, impl.merge_runs)
    window_ns = [ns for _, ns in wins]
    signature = (tuple(window_ns), hop_ns, tuple(names), str(value_type))
    keep = clip_ns is not None and set(names) <= _query.RESUMABLE_AGGS
    shape = (len(plan.group_keys), len(window_ns), getattr(impl, "frame_words", 0))
    resume = frames if frames is not None and frames.signature == signature else None
    placed: _query.FrameStates | None = None
    frames_in: tuple[np.ndarray, np.ndarray] | None = None
    frames_out: tuple[np.ndarray, np.ndarray | None] | None = None
    if keep and shape[2] and resume is not None and in_place:
        placed, held_rows, out_rows = resume.placed(plan.group_keys)
        frames_in, frames_out = (placed.words, held_rows), (placed.words, out_rows)
    else:
        if keep and resume is not None:
            frames_in = (np.ascontiguousarray(resume.words), resume.rows_for(plan.group_keys))
        if keep and shape[2]:
            frames_out = (np.zeros(shape, dtype=np.int64), None)
    values = [r.values for r in parsed]
    kept: list[bool] = []

    def kernel(vals: list[pa.Array], aggs: list[str], cols: list[_tables.OutputColumn]) -> int:
        rows = [_query.Run(r.keys, r.ts, v) for r, v in zip(parsed, vals, strict=True)]
        whole = vals is values  # one call over the values as given (no ±inf split)
        resume_in, resume_out = (frames_in, frames_out) if whole else (None, None)
        clip = 0 if clip_ns is None else clip_ns
        kept.append(
            impl.rolling_at(
                rows, plan, window_ns, hop_ns, aggs, cols, resume_in, resume_out, clip, added_run
            )
        )
        return plan.nq

    _nonfinite.aggregate_values(values, names, columns, kernel)
    table = plan.in_query_order(columns)
    if frames_out is None or kept != [True]:
        return table, None
    if placed is not None:
        return table, placed
    return table, _query.FrameStates(plan.group_keys.copy(), frames_out[0], signature)


def merge_runs(runs: list[tuple[object, object]], cut_ns: int) -> np.ndarray:
    """The rows of runs sorted by (key, ts) (see `rolling_at`) in merged order, as int64
    indices into the runs' concatenation, ties to the earlier run (a stable merge),
    rows with ts < ``cut_ns`` left out. One linear pass on the Mojo backend."""
    parsed = [_run(k, t, pa.nulls(len(k), pa.float64()), i) for i, (k, t) in enumerate(runs)]  # type: ignore[arg-type]
    return _backend.current().backend.merge_runs(parsed, int(cut_ns))


def run_segments(run_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Where each key's rows lie in one run's keys.

    Args:
        run_keys: int64, sorted ascending (a run's keys, see `rolling_at`).
        keys: int64, any order; ascending is fastest (one pass over the run on the
            Mojo backend, each key galloping from the previous one's end).
    Returns:
        int64 of shape (len(keys), 2): per key, ``[left, right)`` of its rows in
        ``run_keys`` (``np.searchsorted``'s left and right sides; equal where it has none).
    """
    return _backend.current().backend.run_segments(np.asarray(run_keys), np.asarray(keys))


def crc64_rows(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Redis's CRC-64 (CRC-64/Jones, reflected, initial 0, no final xor) of many byte
    strings: what a ``RESTORE`` payload's footer must carry.

    Args:
        data: uint8, the rows' bytes back to back.
        offsets: int64, one more than the rows, ascending (Arrow's binary layout): row
            ``i`` is ``data[offsets[i]:offsets[i + 1]]``.
    Returns:
        uint64, one per row. One pass per row on the Mojo backend (the GIL released),
        the rows of each length as one byte matrix on numpy's.
    """
    data, offsets = np.asarray(data), np.asarray(offsets)
    if len(offsets) > 1:  # both backends read only rows inside the bytes
        if int(offsets[0]) < 0 or int(offsets[-1]) > len(data):
            msg = f"offsets span [{int(offsets[0])}, {int(offsets[-1])}) of {len(data)} bytes"
            raise ValueError(msg)
        falling = np.flatnonzero(np.diff(offsets) < 0)
        if len(falling):
            raise ValueError(f"offsets decrease at row {int(falling[0])}")
    return _backend.current().backend.crc64_rows(data, offsets)


def stamp_micros(stamps: pa.Array, max_millis: int) -> tuple[np.ndarray, np.ndarray]:
    """Epoch microseconds of the timestamp texts :mod:`featureflow.events.timestamps` reads.

    Args:
        stamps: ``string`` texts (nulls allowed).
        max_millis: the largest absolute epoch-milliseconds value read.
    Returns:
        (micros, known): int64 epoch µs (0 where not read) and bool, per text. Texts read:
        ``-?[0-9]{1,15}`` (epoch ms, within ``max_millis``) and RFC 3339 with a zone
        (``_stamps.RFC3339_ZONED``, fields range-checked). One pass over the bytes on the
        Mojo backend (the GIL released), two RE2 matches and numpy on numpy's.
    """
    if stamps.type != pa.string():
        msg = f"timestamp texts must be Arrow string, not {stamps.type}"
        raise TypeError(msg)
    return _backend.current().backend.stamp_micros(stamps, int(max_millis))


def gather_chunks(chunks: list[pa.Array], rows: np.ndarray) -> pa.Array | None:
    """Rows ``rows`` of the chunks' concatenation, as ``pa.concat_arrays(chunks).take(rows)``
    gives them, without the concatenation: one pass over the chunks' buffers.

    Args:
        chunks: arrays of one fixed-width type (nulls and offsets allowed), at least one.
        rows: int indices into their concatenation (each in range; repeats allowed).
    Returns:
        The gathered array, or None on the numpy backend, and on the Mojo one for a type
        that is not a 1, 2, 4 or 8 byte primitive: the caller takes with Arrow.
    Raises:
        ValueError: an index is outside the chunks.
    """
    if not chunks or any(chunk.type != chunks[0].type for chunk in chunks):
        msg = f"chunks: expected arrays of one type, got {[str(c.type) for c in chunks]}"
        raise ValueError(msg)
    order = np.ascontiguousarray(rows, dtype=np.int64)
    return _backend.current().backend.gather_chunks(list(chunks), order)


def ascii_decimal(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative integers as ASCII decimal digits (``12`` is ``b"12"``; 0 is ``b"0"``).

    Args:
        values: integers, each 0 <= v < 2**63 (read as int64).
    Returns:
        (matrix, lengths): uint8 ``(n, width)`` with row ``i``'s digits left-aligned, and
        the int64 digit count of each row (``width`` is the longest). One pass on the Mojo
        backend (the GIL released), one numpy pass per digit on numpy's.
    Raises:
        ValueError: a value is negative.
    """
    v = np.ascontiguousarray(values, dtype=np.int64)
    return _backend.current().backend.ascii_decimal(v)


def varint(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integers as protobuf base-128 varints (low 7-bit groups first, the high bit set on
    every byte but the last); a negative value is its 64-bit two's complement, 10 bytes.

    Args:
        values: integers (read as int64).
    Returns:
        (matrix, lengths): uint8 ``(n, 10)`` with row ``i``'s bytes left-aligned, and the
        int64 byte count of each row. One pass on the Mojo backend (the GIL released),
        one numpy pass per 7 bits on numpy's.
    """
    v = np.ascontiguousarray(values, dtype=np.int64)
    return _backend.current().backend.varint(v)


def join_rows(parts: list[ByteRows], n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Byte strings joined row by row: row ``i`` is row ``i`` of every part, in order.

    Args:
        parts: ``n`` rows each (``_byte_rows.ByteRows``: Arrow's layout or a matrix).
        n: the rows.
    Returns:
        (bytes, offsets): uint8 and int64 (n + 1, from 0), Arrow's binary layout. One
        pass on the Mojo backend (the GIL released); None on numpy's, which has no such
        pass (the caller joins with Arrow).
    """
    return _backend.current().backend.join_rows(list(parts), int(n))


def hash_payloads(
    names: list[bytes], views_of: list[int], values: list[list[ByteRows]],
    rows: np.ndarray, version: bytes,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Whole Redis hashes as ``RESTORE`` payloads (what ``DUMP`` gives), one per entity.

    Entity ``i``'s hash holds, in order, each field ``k`` whose view has a row for it
    (``r = rows[i, views_of[k]] >= 0``): the name ``names[k]`` and the value ``values[k]``
    at row ``r`` (its parts joined, as :func:`join_rows` joins them).

    Args:
        names: the field names, in the order the hashes hold them.
        views_of: the view of each field.
        values: per field, its value's parts, rows as the view's.
        rows: int64 (entities, views): each entity's row in each view, -1 where none;
            a view's row belongs to one entity at most.
        version: the two RDB version bytes of the server's ``DUMP`` footer.
    Returns:
        (bytes, offsets, ok): Arrow's binary layout, one row per entity, and per entity
        whether the row holds its payload: the server keeps such a hash as a listpack
        (every name and value under 64 bytes, none reading as a decimal integer, at most
        128 fields). Rows where ``ok`` is false are empty. None on the numpy backend,
        which has no such pass (``featureflow.online.redis_dump`` builds them).
    """
    if len(names) != len(views_of) or len(names) != len(values) or len(version) != 2:
        msg = (f"{len(names)} names, {len(views_of)} views and {len(values)} values of "
               f"fields, {len(version)} version bytes: one each per field and two")
        raise ValueError(msg)
    rows = np.asarray(rows)
    if rows.ndim != 2 or any(not 0 <= v < rows.shape[1] for v in views_of):
        msg = f"rows of shape {rows.shape} do not cover the fields' views {sorted(set(views_of))}"
        raise ValueError(msg)
    last = rows.max(axis=0, initial=-1)
    for k, (view, parts) in enumerate(zip(views_of, values, strict=True)):
        short = [p.rows for p in parts if p.rows <= last[view]]
        if short:
            msg = f"field {k}'s value has {min(short)} rows; its view's rows reach {last[view]}"
            raise ValueError(msg)
    return _backend.current().backend.hash_payloads(
        list(names), list(views_of), [list(parts) for parts in values], rows, bytes(version)
    )


def read_flat_json(values: pa.Array, fields: list[FlatField]) -> FlatRead | None:
    """Kafka message values that are flat JSON objects, read into declared fields' columns.

    Args:
        values: ``binary`` message values (nulls allowed: left).
        fields: the declared fields, each with what it takes (``_flat_json.FlatField``).
    Returns:
        Which rows were left, and per field its values, null, valid and present flags
        (``_flat_json``). A row is read only when the reading is certain to be the
        per-record parser's (``mojo_ops/featureflow_kernels/json_flat.mojo`` lists the
        rules); every other row is left. None on the numpy backend, which has no such
        pass, and for arrays that are not ``binary``.
    """
    return _backend.current().backend.read_flat_json(values, list(fields))


def sort_run(keys: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch's rows as one run (see `rolling_at`): sorted by key, then ts, ties in
    input order (arrival order, for a batch as it came).

    Args:
        keys, ts: int64 numpy arrays of one length (ts in ns).
    Returns:
        (order, keys, offsets): the input row at each sorted position (int64); the
        distinct keys in ascending order; where each key's rows start in that order
        (int64, one more than the keys: key g's are ``[offsets[g], offsets[g + 1])``).
        A counting sort on the Mojo backend (keys within a range of 4 rows a key).
    """
    return _backend.current().backend.sort_run(np.asarray(keys), np.asarray(ts))


def gather_runs(
    runs: list[RunColumns], keys: np.ndarray, from_ns: np.ndarray, capacity: int | None = None
) -> KeyedRows:
    """Some keys' rows read back from runs sorted by (key, ts) (see `rolling_at`).

    Args:
        runs: (keys, ts, value columns) per run, keys and ts int64 numpy, the runs in
            arrival order.
        keys: the keys wanted (int64, sorted, distinct); from_ns: per key, the first
            time wanted (ns, inclusive).
        capacity: how many rows the caller expects (a hint: room for that many is
            allocated first, for all of the runs' rows when they are more).
    Returns:
        Per key, its rows with ts >= its ``from_ns`` from every run, in ts order, ties
        to the earlier run (arrival order), values as float64 with NaN for null, and
        each row's index in the runs' concatenation (``rows``).
    """
    return _backend.current().backend.gather_runs(
        runs, np.asarray(keys), np.asarray(from_ns), capacity
    )


def resume_sessions(
    init: InitialRecords, keys: np.ndarray, kept: KeyedRows, new: KeyedRows, gap_ns: int,
    max_length_ns: int | None, every: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Session states continued over more rows (`featureflow.ops._resume` has the layout).

    Per work key k (``keys[k]``; its initial record, ``init``, is a session's state over
    the key's rows before some time X, or none), the key's rows at or after X in time
    order — its ``kept`` rows merged with its ``new`` rows, the kept first on equal
    times — go through `sessions`' rule with the length cap: a row joins the open
    session when ts <= last row's ts + ``gap_ns`` and ts - start <= ``max_length_ns``
    (None or 0: no cap), else it opens the next. A session record's ``R_AT`` word
    counts the rows since the key's last checkpoint: give a record back as it came
    (a checkpoint's with that word 0).

    Returns:
        (sessions, checkpoints, latest): int64 record arrays. Every session from the
        initial one on, in key then start order, with the work key's index as key word;
        a checkpoint before the first row of each new time once ``every`` rows went by
        since the last (0: none): the open session over exactly the rows with time <
        its ``R_AT`` word; and each key's last session, with ``keys[k]`` as key word
        (rows 0 when it has none). Count, min and max, the finite values' compensated
        sum and the order of its additions are the session kernel's, so records answer
        the aggregates bit for bit as `sessions` over the same rows (Mojo backend).
    """
    impl = _backend.current().backend
    return impl.resume_sessions(
        init, np.asarray(keys), kept, new, int(gap_ns), int(max_length_ns or 0), every
    )


def record_segments(own: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which session records each key owns: ``own`` is the records' keys (sorted), ``keys``
    the wanted ones (sorted, distinct); returns (lo, hi), int64 per wanted key: its
    records are ``[lo, hi)`` (lo == hi where it has none, at the position they would
    take). One merge of the two sequences on the Mojo backend."""
    return _backend.current().backend.record_segments(np.asarray(own), np.asarray(keys))


def splice_records(
    old: np.ndarray, cut: np.ndarray, end: np.ndarray, new: np.ndarray, keys: np.ndarray,
    gap_ns: int, max_length_ns: int, watermark_ns: int | None,
) -> Spliced:  # fmt: skip
    """Session records after a batch, split by the watermark.

    ``old`` records are sorted by key; for each touched key k (``keys``, sorted), its
    records ``old[cut[k]:end[k]]`` are replaced by the ``new`` records whose key word is
    k (the index; nondecreasing), which get ``keys[k]`` as their key. Every record of
    the result goes to the closed records when last + ``gap_ns`` < ``watermark_ns`` or
    start + ``max_length_ns`` < ``watermark_ns`` (None: none closes), else to the open
    ones (:class:`~featureflow.ops._resume.Spliced` has them, each sorted by key as
    ``old`` was, and the open ones' keys, first starts and rows). One pass on the Mojo
    backend."""
    mark = np.iinfo(np.int64).min if watermark_ns is None else int(watermark_ns)
    return _backend.current().backend.splice_records(
        old, cut, end, new, np.asarray(keys), int(gap_ns), int(max_length_ns), mark
    )


def hopping(
    ts: object, values: object, size: object, step: object, aggs: object, keys: object = None
) -> pa.Table:
    """Hopping (sliding) windows with Spark's ``window(ts, size, step)`` semantics.

    Windows are ``[start, start + size)`` (ns, end exclusive) with ``start``
    a multiple of ``step`` since the epoch; a row belongs to every window
    that contains its ts. One output row per (key, window) holding at least
    one row, sorted by key then ``window_start``.

    Returns:
        Columns ``key`` (only with keys), ``window_start``, ``window_end``
        (timestamp[ns, UTC]), then one column per agg, named after the agg.
    """
    s = _inputs.keys_in_order(_inputs.series(ts, values, keys, _key_encoder()))
    size_ns = duration_ns(size, "size")
    step_ns = duration_ns(step, "step")
    names = parse_aggs(aggs)
    impl = _backend.current().backend
    per_row = -(-size_ns // step_ns)  # windows a row can fall in
    if per_row <= 2:
        capacity = s.n * per_row
    else:  # too loose a bound to allocate: count the windows first
        capacity = impl.hopping(
            s, size_ns, step_ns, names, True, _tables.WindowBounds.allocate(0), []
        )
    bounds = _tables.WindowBounds.allocate(capacity)
    columns = _tables.allocate([(a, a) for a in names], s.values.type, capacity)
    m = _nonfinite.aggregate(
        s,
        names,
        columns,
        lambda rows, aggs, cols: impl.hopping(rows, size_ns, step_ns, aggs, False, bounds, cols),
    )
    leading = bounds.leading(m, s.key_values, ("window_start", "window_end"))
    return _tables.table(columns, m, leading)


def sessions(
    ts: object,
    values: object,
    gap: object,
    aggs: object,
    keys: object = None,
    max_length: object = None,
) -> pa.Table:
    """Session windows with Spark's ``session_window(ts, gap)`` semantics, optionally capped.

    A key's rows are taken in ts order; a row joins the open session when
    its ts is <= the session's end, the max of ``ts + gap`` over the
    session's rows (so the end is inclusive); otherwise it opens a new one.
    ``gap`` is a duration or a per-row array (int64 ns or Arrow duration):
    rows whose gap is null or <= 0 are dropped, as in Spark.

    ``max_length`` (a duration; None: no cap, Spark's semantics) bounds how long a
    session lasts: a row with ``ts - session_start > max_length`` (strictly, ns)
    does not join even within the gap; it opens the next session. So every
    session's last row is at most ``max_length`` after its first (a row exactly
    ``max_length`` after the start still joins), and a key whose rows never
    pause for a gap gets sessions of at most that length, back to back.

    Returns:
        Columns ``key`` (only with keys), ``session_start`` (first ts),
        ``session_end`` (max ts + gap over its rows, also when the cap closed it)
        as timestamp[ns, UTC], then one column per agg, named after the agg;
        sorted by key, session_start.
    """
    s = _inputs.keys_in_order(_inputs.series(ts, values, keys, _key_encoder()))
    names = parse_aggs(aggs)
    max_ns = None if max_length is None else duration_ns(max_length, "max_length")
    gaps: np.ndarray | None = None
    gap_ns = 0
    if isinstance(gap, pa.Array | pa.ChunkedArray | np.ndarray):
        gaps = _inputs.gap_array(gap, s.n)
        drop = gaps <= 0
        if drop.any():
            s = _inputs.without_rows(s, drop)
            gaps = np.ascontiguousarray(gaps[~drop])
    else:
        gap_ns = duration_ns(gap, "gap")
    bounds = _tables.WindowBounds.allocate(s.n)
    columns = _tables.allocate([(a, a) for a in names], s.values.type, s.n)
    impl = _backend.current().backend
    m = _nonfinite.aggregate(
        s,
        names,
        columns,
        lambda rows, aggs, cols: impl.sessions(rows, gap_ns, gaps, max_ns, aggs, bounds, cols),
    )
    leading = bounds.leading(m, s.key_values, ("session_start", "session_end"))
    return _tables.table(columns, m, leading)
