"""The SQLite database images of the online writer, read back by SQLite itself.

SQLite is the oracle: an image is handed to ``sqlite3_deserialize`` as the writer
hands it, ``PRAGMA integrity_check`` must pass, and ``SELECT`` must return exactly
the rows it was built from (rowids in order, types as Feast's table holds them).
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from featureflow.online import _bytes as B
from featureflow.online.sqlite_image import OnlineRows, sqlite_varint, table_image

_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def _packed(items: list[bytes]) -> B.Packed:
    return B.from_arrow(pa.array(items, pa.large_binary()))


def _reference_varint(value: int) -> bytes:
    """SQLite's varint, from its file format description (values below 2**56)."""
    groups = []
    while True:
        groups.append(value & 0x7F)
        value >>= 7
        if not value:
            break
    groups.reverse()
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


@given(st.lists(st.integers(min_value=0, max_value=2**56 - 1), max_size=40))
def test_varints_are_sqlites(values: list[int]) -> None:
    cells = sqlite_varint(np.array(values, dtype=np.int64))
    lengths = cells.row_lengths()
    got = [cells.matrix[i, : int(lengths[i])].tobytes() for i in range(len(values))]
    assert got == [_reference_varint(v) for v in values]


def test_varints_refuse_what_sqlite_stores_in_nine_bytes() -> None:
    with pytest.raises(ValueError, match="2\\*\\*56"):
        sqlite_varint(np.array([2**56], dtype=np.int64))


@st.composite
def online_rows(draw: st.DrawFn, max_entities: int = 60) -> tuple[OnlineRows, list[tuple]]:
    """Rows with keys, names and cells of every length class (a byte, a multi-byte
    varint's worth), null texts, and any integer seconds; with the rows SQLite must read."""
    n = draw(st.integers(min_value=1, max_value=max_entities))
    names = draw(st.lists(st.text(min_size=1, max_size=80), min_size=1, max_size=6,
                          unique=True))
    f = len(names)
    keys = draw(st.lists(st.binary(min_size=1, max_size=120), min_size=n, max_size=n))
    values = draw(st.lists(st.binary(max_size=200), min_size=n * f, max_size=n * f))
    texts = draw(st.lists(st.none() | st.text(max_size=90), min_size=n * f, max_size=n * f))
    event_s = draw(st.lists(_INT64, min_size=n, max_size=n))
    created_s = draw(st.none() | st.lists(_INT64, min_size=n, max_size=n))
    rows = OnlineRows(
        _packed(keys), names, _packed(values),
        _packed([b"" if t is None else t.encode() for t in texts]),
        np.array([t is None for t in texts], dtype=bool),
        np.array(event_s, dtype=np.int64),
        None if created_s is None else np.array(created_s, dtype=np.int64),
    )
    expected = [
        (i * f + j + 1, keys[i], names[j], values[i * f + j], texts[i * f + j], event_s[i],
         None if created_s is None else created_s[i])
        for i in range(n) for j in range(f)
    ]
    return rows, expected


def _read(image: np.ndarray) -> tuple[list[tuple], list[tuple]]:
    conn = sqlite3.connect(":memory:")
    conn.execute("ATTACH ':memory:' AS staged")
    conn.deserialize(image, name="staged")
    check = conn.execute("PRAGMA staged.integrity_check").fetchall()
    rows = conn.execute("SELECT rowid, * FROM staged.rows ORDER BY rowid").fetchall()
    return check, rows


@settings(max_examples=60, deadline=None)
@given(online_rows(), st.sampled_from([512, 1024, 4096, 65_536]))
def test_sqlite_reads_back_exactly_the_rows_of_an_image(
    case: tuple[OnlineRows, list[tuple]], page_size: int
) -> None:
    """Small pages give trees of several leaf and interior levels; 64 KiB pages are
    what the writer builds."""
    rows, expected = case
    image = table_image(rows, page_size)
    if image is None:  # some record does not fit a page: never for 64 KiB pages here
        assert page_size < 65_536
        return
    check, got = _read(image)
    assert check == [("ok",)]
    assert got == expected


def test_a_three_level_tree_reads_back() -> None:
    """Enough rows on 512-byte pages for interior pages above interior pages."""
    n, f = 3_000, 4
    rng = np.random.default_rng(7)
    keys = [rng.bytes(int(rng.integers(1, 30))) for _ in range(n)]
    rows = OnlineRows(_packed(keys), ["a", "b", "c", "d"], _packed([b"v"] * n * f),
                      _packed([b"1.5"] * n * f), np.zeros(n * f, dtype=bool),
                      np.arange(n, dtype=np.int64), None)
    image = table_image(rows, 512)
    assert image is not None and len(image) // 512 > 600
    check, got = _read(image)
    assert check == [("ok",)]
    assert [r[1] for r in got[::f]] == keys
    assert len(got) == n * f


def test_a_record_larger_than_a_page_gives_no_image() -> None:
    """Overflow pages are not built: the writer takes its other path for that block."""
    rows = OnlineRows(_packed([b"k"]), ["big"], _packed([b"x" * 70_000]), _packed([b""]),
                      np.ones(1, dtype=bool), np.zeros(1, dtype=np.int64), None)
    assert table_image(rows) is None
    small = OnlineRows(_packed([b"k"]), ["big"], _packed([b"x" * 60_000]), _packed([b""]),
                       np.ones(1, dtype=bool), np.zeros(1, dtype=np.int64), None)
    image = table_image(small)
    assert image is not None
    assert _read(image)[1] == [(1, b"k", "big", b"x" * 60_000, None, 0, None)]


def test_page_sizes_sqlite_cannot_use_are_refused() -> None:
    rows = OnlineRows(_packed([b"k"]), ["a"], _packed([b"v"]), _packed([b"t"]),
                      np.zeros(1, dtype=bool), np.zeros(1, dtype=np.int64), None)
    with pytest.raises(ValueError, match="power of two"):
        table_image(rows, 1000)
