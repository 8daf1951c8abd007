"""Rows for Feast's SQLite online table as a ready SQLite database image.

SQLite spends most of an upsert's extra cost building rows: cutting each
(entity, feature) row's cells out of bound blobs with ``substr`` costs ~1.8 µs a
row on a 2-core VM, against ~0.2 µs to read the same row from a table. So the
writer builds the rows as a database file in memory instead (numpy and the row
join, no Python per row), hands it to SQLite with ``sqlite3_deserialize`` into an
attached schema, and upserts from it with ``INSERT … SELECT``: SQLite then copies
records it reads as they are, as from any table.

The image holds one table, ``rows`` (:data:`TABLE_SQL`), rowid ``1..n`` in the
order given, in the SQLite file format (https://www.sqlite.org/fileformat2.html):
64 KiB pages, page 1 the schema, page 2 the table's root, leaf pages filled in
order, interior pages above them. Every record fits on its page (a record larger
than a page's local payload limit would need overflow pages: ``table_image``
returns ``None`` and the caller writes those rows the other way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from featureflow.online import _bytes as B

PAGE = 65_536
"""Page size of the images, bytes (the largest SQLite has: fewest pages and page
headers; tests build smaller ones to reach deeper trees)."""

TABLE = "rows"
TABLE_SQL = (f"CREATE TABLE {TABLE}(entity_key BLOB, feature_name TEXT, value BLOB, "
             "value_text TEXT, event_ts INTEGER, created_ts INTEGER)")
"""The image's one table; its columns are those of Feast's online table."""

_LEAF, _INTERIOR = 0x0D, 0x05
_LEAF_HEADER, _INTERIOR_HEADER = 8, 12
_INT64 = 6
"""Serial type of an 8-byte big-endian integer."""


@dataclass(frozen=True)
class OnlineRows:
    """Rows of Feast's online table for ``n`` entities and their features, row
    ``i * features + j`` being entity ``i``'s feature ``j``.

    ``keys``: per entity, the serialised entity key; ``names``: the feature names
    (UTF-8); ``values``: per row, the serialised ``ValueProto``; ``texts``: per row,
    the ``value_text`` (UTF-8; ``None`` in ``text_null`` rows); ``event_s`` and
    ``created_s``: per entity, integer seconds (``created_s`` ``None``: NULL).
    """

    keys: B.Packed
    names: Sequence[str]
    values: B.Packed
    texts: B.Packed
    text_null: npt.NDArray[np.bool_]
    event_s: npt.NDArray[np.int64]
    created_s: npt.NDArray[np.int64] | None


def sqlite_varint(values: npt.NDArray[np.integer]) -> B.Cells:
    """SQLite's varints of non-negative integers below 2**56: 7 bits a byte, most
    significant group first, the high bit set on every byte but the last."""
    v = np.ascontiguousarray(values, dtype=np.int64)
    if v.size and (int(v.min()) < 0 or int(v.max()) >= 1 << 56):
        msg = "sqlite_varint takes integers in [0, 2**56)"
        raise ValueError(msg)
    if not v.size or int(v.max()) < 0x80:  # one byte each: the usual serial types, sizes
        return B.Cells(v.astype(np.uint8).reshape(-1, 1))
    groups = np.ones(v.shape[0], dtype=np.int64)
    for k in range(1, 8):
        groups += v >= (1 << (7 * k))
    width = int(groups.max()) if v.size else 1
    matrix = np.zeros((v.shape[0], width), dtype=np.uint8)
    for col in range(width):
        shift = 7 * (groups - 1 - col)  # this byte's group, counted from the last
        inside = col < groups
        byte = (v >> np.where(inside, shift, 0)) & 0x7F
        byte |= np.where(col < groups - 1, 0x80, 0)
        matrix[:, col] = np.where(inside, byte, 0)
    return B.Cells(matrix, groups)


def _cells(rows: OnlineRows, page: int) -> B.Packed | None:
    """Each row's leaf cell (payload size, rowid, record), or ``None`` when a record
    would not fit its page."""
    f = len(rows.names)
    n_rows = rows.keys.n * f
    entity = np.repeat(np.arange(rows.keys.n, dtype=np.int64), f)
    keys = B.take(rows.keys, entity)
    distinct_names = pa.array([name.encode() for name in rows.names], pa.large_binary())
    names = B.take(B.from_arrow(distinct_names), np.tile(np.arange(f, dtype=np.int64), rows.keys.n))
    key_len, name_len = keys.lengths(), names.lengths()
    value_len = rows.values.lengths()
    text_len = np.where(rows.text_null, 0, rows.texts.lengths())
    types = [12 + 2 * key_len, 13 + 2 * name_len, 12 + 2 * value_len,
             np.where(rows.text_null, 0, 13 + 2 * text_len)]
    type_cells = [sqlite_varint(t) for t in types]
    header_len = np.full(n_rows, 3, dtype=np.int64)  # its own byte, the two integers' types
    for c in type_cells:
        header_len += c.row_lengths()
    body_len = key_len + name_len + value_len + text_len + 8
    created: list[B.Cells | B.Packed] = []
    last_type = B.const(bytes([_INT64 if rows.created_s is not None else 0]), n_rows)
    if rows.created_s is not None:
        body_len = body_len + 8
        created = [B.fixed(np.repeat(rows.created_s, f), ">i8")]
    payload = header_len + body_len
    if n_rows and int(payload.max()) > page - 35:  # the most a leaf holds without overflow
        return None
    texts = rows.texts.where(~rows.text_null)
    parts = [
        sqlite_varint(payload), sqlite_varint(np.arange(1, n_rows + 1, dtype=np.int64)),
        B.fixed(header_len, "u1"), *type_cells, B.const(bytes([_INT64]), n_rows), last_type,
        keys, names, rows.values, texts, B.fixed(np.repeat(rows.event_s, f), ">i8"), *created,
    ]
    return B.concat(parts)


def _groups(sizes: npt.NDArray[np.int64], room: int) -> list[tuple[int, int]]:
    """(start, stop) of consecutive items filling pages in order: each item takes its
    size plus a 2-byte cell pointer, a page holds ``room`` bytes of them."""
    ends = np.cumsum(sizes + 2)
    out, start, used = [], 0, 0
    while start < len(sizes):
        stop = int(np.searchsorted(ends, used + room, side="right"))
        stop = max(stop, start + 1)
        out.append((start, stop))
        used, start = int(ends[stop - 1]), stop
    return out


def _write_page(image: npt.NDArray[np.uint8], size: int, page: int, kind: int,
                cells: B.Packed, start: int, stop: int, right_child: int = 0,
                header_at: int = 0) -> None:
    """Page ``page`` (1-based, ``size`` bytes): a B-tree page of ``kind`` holding cells
    ``start:stop`` packed against its end, pointers in order; ``header_at``: 100 on
    page 1."""
    base = (page - 1) * size
    lo, hi = int(cells.offsets[start]), int(cells.offsets[stop])
    content = size - (hi - lo)
    image[base + content : base + size] = cells.data[lo:hi]
    header = base + header_at
    image[header] = kind
    image[header + 3 : header + 5] = np.array([stop - start], ">u2").view(np.uint8)
    image[header + 5 : header + 7] = np.array([content % 65_536], ">u2").view(np.uint8)
    if kind == _INTERIOR:
        image[header + 8 : header + 12] = np.array([right_child], ">u4").view(np.uint8)
    pointers = (content + cells.offsets[start:stop] - lo).astype(">u2")
    at = header + (_INTERIOR_HEADER if kind == _INTERIOR else _LEAF_HEADER)
    image[at : at + 2 * (stop - start)] = pointers.view(np.uint8)


def _schema_cell() -> B.Packed:
    """The one row of ``sqlite_schema``: the table ``rows`` rooted at page 2."""
    texts = [b"table", TABLE.encode(), TABLE.encode()]
    sql = TABLE_SQL.encode()
    types = [13 + 2 * len(t) for t in texts] + [1, 13 + 2 * len(sql)]
    header = b"".join(_varint_bytes(t) for t in types)
    record = bytes([len(header) + 1]) + header + b"".join(texts) + bytes([2]) + sql
    cell = _varint_bytes(len(record)) + _varint_bytes(1) + record
    return B.Packed(np.frombuffer(cell, dtype=np.uint8), np.array([0, len(cell)], np.int64))


def _varint_bytes(value: int) -> bytes:
    cells = sqlite_varint(np.array([value]))
    return cells.matrix[0, : int(cells.row_lengths()[0])].tobytes()


def table_image(rows: OnlineRows, page_size: int = PAGE) -> npt.NDArray[np.uint8] | None:
    """A database file holding ``rows`` as table ``rows`` (rowid order = row order),
    or ``None`` when some record needs overflow pages. ``page_size``: a power of two
    from 512 to 65,536."""
    if page_size & (page_size - 1) or not 512 <= page_size <= 65_536:
        msg = f"page_size must be a power of two from 512 to 65536, got {page_size}"
        raise ValueError(msg)
    cells = _cells(rows, page_size)
    if cells is None:
        return None
    leaves = _groups(cells.lengths(), page_size - _LEAF_HEADER)
    levels: list[list[tuple[int, int]]] = [leaves]
    last_rowid = [stop for _, stop in leaves]  # rowids are 1-based: stop is the last one
    keys_per_level = [last_rowid]
    while len(levels[-1]) > 1:
        # children of an interior page: all but its last are cells (4-byte page + key)
        child_keys = np.array(keys_per_level[-1], dtype=np.int64)
        sizes = 4 + sqlite_varint(child_keys).row_lengths()
        groups = _groups(sizes, page_size - _INTERIOR_HEADER)
        if len(groups) > 1 and groups[-1][1] - groups[-1][0] == 1:
            # an interior page needs a cell besides its right pointer: take one child
            # from the page before (it had room for it, so this one has too)
            (a, b), (_, d) = groups[-2], groups[-1]
            groups[-2:] = [(a, b - 1), (b - 1, d)]
        # a group's last child becomes the right pointer: it takes no cell, which only
        # leaves more room, so the greedy groups still fit
        levels.append(groups)
        keys_per_level.append([int(child_keys[stop - 1]) for _, stop in groups])
    # number the pages: 1 schema, 2 the top level's one page, then the rest in order
    numbers: list[list[int]] = []
    next_page = 3
    for depth, level in enumerate(levels):
        if depth == len(levels) - 1:
            numbers.append([2])
        else:
            numbers.append(list(range(next_page, next_page + len(level))))
            next_page += len(level)
    n_pages = next_page - 1 if len(levels) > 1 else 2
    image = np.zeros(n_pages * page_size, dtype=np.uint8)
    for page, (start, stop) in zip(numbers[0], leaves, strict=True):
        _write_page(image, page_size, page, _LEAF, cells, start, stop)
    for depth in range(1, len(levels)):
        children, keys = numbers[depth - 1], keys_per_level[depth - 1]
        for page, (start, stop) in zip(numbers[depth], levels[depth], strict=True):
            pointers = B.fixed(np.array(children[start : stop - 1], dtype=np.int64), ">u4")
            key_cells = sqlite_varint(np.array(keys[start : stop - 1], dtype=np.int64))
            interior = B.concat([pointers, key_cells]) if stop - start > 1 else B.Packed(
                np.zeros(0, np.uint8), np.zeros(1, np.int64))
            _write_page(image, page_size, page, _INTERIOR, interior, 0, stop - start - 1,
                        right_child=children[stop - 1])
    _write_page(image, page_size, 1, _LEAF, _schema_cell(), 0, 1, header_at=100)
    image[:100] = np.frombuffer(_file_header(n_pages, page_size), dtype=np.uint8)
    return image


def _file_header(n_pages: int, page_size: int) -> bytes:
    """The 100-byte database header: UTF-8, schema format 4, no free pages."""
    header = bytearray(100)
    header[0:16] = b"SQLite format 3\x00"
    header[16:18] = (page_size if page_size < 65_536 else 1).to_bytes(2, "big")
    header[18], header[19], header[20] = 1, 1, 0
    header[21], header[22], header[23] = 64, 32, 32
    header[24:28] = (1).to_bytes(4, "big")  # change counter
    header[28:32] = n_pages.to_bytes(4, "big")
    header[40:44] = (1).to_bytes(4, "big")  # schema cookie
    header[44:48] = (4).to_bytes(4, "big")  # schema format
    header[56:60] = (1).to_bytes(4, "big")  # UTF-8
    header[92:96] = (1).to_bytes(4, "big")  # valid for change counter 1
    header[96:100] = (3_040_001).to_bytes(4, "big")
    return bytes(header)
