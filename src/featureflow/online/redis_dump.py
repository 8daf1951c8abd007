"""Whole Redis hashes as ``RESTORE`` payloads, built for a batch of entities at once.

A new entity's hash can be created by ``RESTORE key ttl payload`` (no ``REPLACE``)
instead of ``HSET``: the server copies the payload's listpack as it is, where an
``HSET`` of 19 fields inserts them one by one (measured on Redis 7.0, 100 k hashes
of 19 fields: 0.16-0.22 s of server CPU against 0.40-0.47 s). Without ``REPLACE``,
``RESTORE`` fails with ``BUSYKEY`` when the key exists, so it is also an atomic
"create only if absent": it can never overwrite a newer row.

The payload is what ``DUMP`` of that hash gives, uncompressed:

- ``0x10`` (``RDB_TYPE_HASH_LISTPACK``), the listpack's length as an RDB length
  (1, 2 or 5 bytes), the listpack;
- the listpack: total bytes (u32 LE), element count (u16 LE), one entry per
  field and per value (header ``0b10LLLLLL`` for a string under 64 bytes, the
  bytes, a one-byte back length ``L + 1``), ``0xFF``;
- the RDB version (u16 LE, the server's own, from its ``DUMP`` of a probe) and the
  CRC-64/Jones of everything before it (u64 LE), as Redis's ``crc64``.

Only hashes the server itself would keep as such a listpack are built: every
field and value under 64 bytes, none that looks like a decimal integer (the
server stores those as integer entries), at most 128 fields (Redis's default
``hash-max-listpack-entries``). :func:`eligible` marks them; other entities go
through ``HSET``. The writer checks the format on each server before using it
(:func:`featureflow.online.redis.restore_version`): a probe hash restored from
this module's payload must ``DUMP`` exactly as the same hash made by ``HSET``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from featureflow import ops
from featureflow.online import _bytes as B

RDB_TYPE_HASH_LISTPACK = 16
MAX_STRING = 63
"""Longest field or value a payload holds (the one-byte listpack string header)."""
MAX_FIELDS = 128
"""Most fields per hash (Redis's default ``hash-max-listpack-entries``)."""
MAX_INTEGER_DIGITS = 20
"""A string longer than this is never stored as a listpack integer."""


class ViewFields:
    """One view's fields in its entities' hashes: their names (the same in every hash) and
    values (parts to join per row, rows as the view's batch), the view's event time
    field first (the payloads' numpy build groups entities by its length)."""

    def __init__(self, names: Sequence[bytes], values: Sequence[Sequence[B.Cells | B.Packed]]
                 ) -> None:
        if len(names) != len(values) or not names:
            msg = f"{len(names)} field names for {len(values)} values: one each, at least one"
            raise ValueError(msg)
        self.names = list(names)
        self.values = [list(parts) for parts in values]
        self._joined: list[B.Packed] | None = None

    def joined(self) -> list[B.Packed]:
        """Each value's parts joined (once): what the numpy build takes rows from."""
        if self._joined is None:
            self._joined = [parts[0] if len(parts) == 1 and isinstance(parts[0], B.Packed)
                            else B.concat(parts) for parts in self.values]
        return self._joined


def hash_payloads(views: Sequence[ViewFields], rows: npt.NDArray[np.int64], version: bytes
                  ) -> tuple[npt.NDArray[np.int64], B.Packed]:
    """The ``DUMP`` payloads of the entities whose hashes a listpack can hold.

    Entity ``i``'s hash holds, view after view, the fields of each view with a row for it
    (``rows[i, v] >= 0``), their values read at that row. Returns (positions, payloads):
    the entities (rows of ``rows``) that have one, and their payloads in that order;
    the others (see :func:`eligible`, at most :data:`MAX_FIELDS` fields) go by ``HSET``.
    ``version``: the server's RDB version (2 bytes). One kernel pass over the entities
    (:func:`featureflow.ops.hash_payloads`); where the kernels are missing, numpy builds
    the entities in groups of one shape (:func:`_grouped_payloads`)."""
    built = ops.hash_payloads(
        [name for view in views for name in view.names],
        [v for v, view in enumerate(views) for _ in view.names],
        [[B.byte_rows(part) for part in parts] for view in views for parts in view.values],
        rows, version)
    if built is None:
        return _grouped_payloads(views, rows, version)
    data, offsets, ok = built
    positions = np.flatnonzero(ok)
    # the rows of entities without a payload are empty: their offsets can go
    return positions, B.Packed(data, offsets[np.concatenate([[0], positions + 1])])


def _grouped_payloads(views: Sequence[ViewFields], rows: npt.NDArray[np.int64], version: bytes
                      ) -> tuple[npt.NDArray[np.int64], B.Packed]:
    """:func:`hash_payloads` in numpy. Entities are taken in groups of one shape (the views
    they have, the length of each view's first value: its event time), so every part of a
    group's payloads has one width and rows are stacked, not joined."""
    present = rows >= 0
    joined = [view.joined() for view in views]
    stamp_lengths = [np.where(present[:, v], values[0].lengths()[np.maximum(rows[:, v], 0)], 0)
                     if values[0].n else np.zeros(len(rows), dtype=np.int64)
                     for v, values in enumerate(joined)]
    shape = np.concatenate([present, np.stack(stamp_lengths, axis=1)], axis=1)
    order = np.lexsort(shape.T[::-1])
    shape = shape[order]
    bounds = [0, *(np.flatnonzero((np.diff(shape, axis=0) != 0).any(axis=1)) + 1).tolist(),
              len(order)]
    chosen: list[npt.NDArray[np.int64]] = []
    made: list[B.Packed] = []
    for lo, hi in itertools.pairwise(bounds):
        entities = order[lo:hi]
        names: list[bytes] = []
        values: list[B.Packed] = []
        for v, view in enumerate(views):
            if shape[lo, v]:
                names += view.names
                values += [B.take(value, rows[entities, v]) for value in joined[v]]
        if not names or len(names) > MAX_FIELDS:  # no view, or more than a listpack holds
            continue
        block = fixed_entries(names, values)
        if block is None:  # values of several lengths: cell by cell
            cells = [cell for name, value in zip(names, values, strict=True)
                     for cell in (B.const(name, hi - lo), value)]
            ok, body = eligible(cells), entry_parts(cells)
        else:
            body, ok = [block[0]], block[1]
        if not ok.any():
            continue
        built = payloads(body, np.full(hi - lo, 2 * len(names)), version)
        chosen.append(entities[ok])
        made.append(built if ok.all() else B.take(built, np.flatnonzero(ok)))
    if not made:
        return np.zeros(0, dtype=np.int64), B.Packed(np.zeros(0, np.uint8), np.zeros(1, np.int64))
    return np.concatenate(chosen), B.stack(made)


def crc64(rows: B.Packed) -> npt.NDArray[np.uint64]:
    """Redis's CRC-64 (Jones polynomial, reflected, initial 0, no final xor) of each row
    (:func:`featureflow.ops.crc64_rows`: the Mojo kernel, or numpy)."""
    return ops.crc64_rows(rows.data, rows.offsets)


def integer_like(cells: B.Packed) -> npt.NDArray[np.bool_]:
    """Per row: whether the bytes could be stored by Redis as a listpack integer (up to 20
    bytes of decimal digits, at least one, after an optional ``-``). Conservative: some
    of them (``007``, ``-0``, past int64) the server keeps as strings, which only sends
    them the ``HSET`` way."""
    lengths = cells.lengths()
    out = np.zeros(cells.n, dtype=bool)
    short = (lengths >= 1) & (lengths <= MAX_INTEGER_DIGITS)
    if not short.any():
        return out
    first = cells.data[np.minimum(cells.offsets[:-1], max(len(cells.data) - 1, 0))]
    maybe = short & (((first >= ord("0")) & (first <= ord("9")))
                     | ((first == ord("-")) & (lengths >= 2)))
    if not maybe.any():
        return out
    index = np.flatnonzero(maybe)
    matrix = B.pad(B.take(cells, index))
    inside = np.arange(matrix.width)[None, :] < matrix.row_lengths()[:, None]
    digit = (matrix.matrix >= ord("0")) & (matrix.matrix <= ord("9"))
    digit[:, 0] |= matrix.matrix[:, 0] == ord("-")
    out[index] = (digit | ~inside).all(axis=1)
    return out


def eligible(cells: Sequence[B.Cells | B.Packed]) -> npt.NDArray[np.bool_]:
    """Per row: whether every one of ``cells`` (a hash's fields and values, row-aligned)
    fits a one-byte listpack string header and cannot read as an integer. A constant
    cell (``B.const``, e.g. a field name) is checked once."""
    ok = np.ones(cells[0].n, dtype=bool) if cells else np.zeros(0, dtype=bool)
    for cell in cells:
        if isinstance(cell, B.Cells) and cell.is_const:
            ok &= bool(eligible([B.concat([cell.rows(0, min(1, cell.n))])]).all())
            continue
        packed = cell if isinstance(cell, B.Packed) else B.concat([cell])
        ok &= (packed.lengths() <= MAX_STRING) & ~integer_like(packed)
    return ok


def fixed_entries(names: Sequence[bytes], values: Sequence[B.Packed]
                  ) -> tuple[B.Cells, npt.NDArray[np.bool_]] | None:
    """The listpack entries of the pairs (``names[k]``, ``values[k]``) per row, in that
    order, as one fixed-width block: the bytes :func:`entry_parts` of those cells joins
    to, and per row whether :func:`eligible` holds for all of them. ``None`` (use
    :func:`entry_parts`) unless there are values, each has one length in every row, and
    every name and value fits :data:`MAX_STRING` and no name reads as an integer.

    One template row holds the names and every entry's header and back length, and
    each value is one copy into its place: a group of a view's 18 doubles costs ~40
    numpy calls instead of ~600 (the per-cell passes of :func:`eligible`,
    :func:`entry_parts` and their joining), which a live stream's micro-batches of a
    few hundred to a few thousand entities paid mostly as fixed cost."""
    if not values:
        return None
    n = values[0].n
    widths = []
    for value in values:
        lengths = value.lengths()
        if int(lengths.min()) != int(lengths.max()):
            return None
        widths.append(int(lengths[0]))
    name_rows = B.Packed(np.frombuffer(b"".join(names), dtype=np.uint8),
                         np.cumsum([0, *map(len, names)], dtype=np.int64))
    if any(w > MAX_STRING for w in widths) or not eligible([name_rows]).all():
        return None
    template = bytearray()
    starts = []
    for name, width in zip(names, widths, strict=True):
        template += bytes([0x80 | len(name)]) + name + bytes([len(name) + 1, 0x80 | width])
        starts.append(len(template))
        template += bytes(width) + bytes([width + 1])
    out = np.empty((n, len(template)), dtype=np.uint8)
    out[:] = np.frombuffer(bytes(template), dtype=np.uint8)
    ok = np.ones(n, dtype=bool)
    for start, width, value in zip(starts, widths, values, strict=True):
        if width:
            out[:, start : start + width] = B.pad(value).matrix  # zero-copy: one width
            ok &= ~integer_like(value)
    return B.Cells(out), ok


def entry_parts(cells: Sequence[B.Cells | B.Packed]) -> list[B.Cells | B.Packed]:
    """The listpack entries of ``cells`` per row (each under 64 bytes: see :func:`eligible`),
    as parts to concatenate: header ``0x80 | L``, the bytes, back length ``L + 1``, cell
    after cell. A cell of one length in every row stays fixed-width, so rows of one shape
    are joined by stacking (``_bytes.concat``)."""
    parts: list[B.Cells | B.Packed] = []
    for cell in cells:
        if isinstance(cell, B.Packed) and cell.n and int(cell.lengths().min()) == int(
                cell.lengths().max()):
            cell = B.pad(cell)  # zero-copy
        if isinstance(cell, B.Cells) and cell.lengths is None:
            width = cell.width
            parts += [B.const(bytes([0x80 | width]), cell.n), cell,
                      B.const(bytes([width + 1]), cell.n)]
            continue
        lengths = cell.row_lengths() if isinstance(cell, B.Cells) else cell.lengths()
        head = B.Cells((0x80 | lengths).astype(np.uint8)[:, None])
        back = B.Cells((lengths + 1).astype(np.uint8)[:, None])
        parts += [head, cell, back]
    return parts


def payloads(body: Sequence[B.Cells | B.Packed], elements: npt.NDArray[np.int64],
             version: bytes) -> B.Packed:
    """``DUMP`` payloads of hashes whose listpack entries are the parts ``body`` (from
    :func:`entry_parts`; one row per hash) with ``elements`` entries each (twice the
    fields), for a server whose ``DUMP`` footer carries RDB ``version`` (2 bytes)."""
    n = body[0].n
    size = 7 + sum((p.row_lengths() if isinstance(p, B.Cells) else p.lengths()
                    for p in body), np.zeros(n, dtype=np.int64))  # + u32, u16, 0xFF
    head = B.concat([B.const(bytes([RDB_TYPE_HASH_LISTPACK]), n), _rdb_length(size),
                     B.fixed(size, "<u4"), B.fixed(elements, "<u2"), *body,
                     B.const(b"\xff" + version, n)])
    lengths = head.lengths()
    fixed = n > 0 and int(lengths.min()) == int(lengths.max())
    # one width: stacked as a matrix (pad is a view); several: joined as they are
    return B.concat([B.pad(head) if fixed else head, B.fixed(crc64(head), "<u8")])


def _rdb_length(values: npt.NDArray[np.int64]) -> B.Cells:
    """RDB length encoding: 6 bits (``00``), 14 bits (``01``, big-endian) or ``0x80`` and
    a 32-bit big-endian length."""
    v = np.asarray(values, dtype=np.int64)
    matrix = np.zeros((len(v), 5), dtype=np.uint8)
    small, medium = v < 64, (v >= 64) & (v < 16384)
    large = ~(small | medium)
    matrix[small, 0] = v[small]
    matrix[medium, 0] = 0x40 | (v[medium] >> 8)
    matrix[medium, 1] = v[medium] & 0xFF
    matrix[large, 0] = 0x80
    matrix[large, 1:] = v[large].astype(">u4").view(np.uint8).reshape(-1, 4)
    widths = np.where(small, 1, np.where(medium, 2, 5)).astype(np.int64)
    if len(v) and int(widths.min()) == int(widths.max()):
        return B.Cells(matrix[:, : int(widths[0])])  # fixed width: stacked, not joined
    return B.Cells(matrix, widths)
