"""hash_payloads(): the Mojo pass against the numpy build and against a real redis-server.

Entities of up to three views, each view with its own rows (some entities lack a
view), fields whose names and values may be too long for a listpack or read as
integers, and values joined from parts of every layout the writer passes (Arrow's,
fixed-width, constant, padded). The kernel must pick the same entities as the numpy
build and give them the same bytes; a payload restored on the server must ``DUMP``
exactly as the hash ``HSET`` makes from the same fields.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from featureflow import ops
from featureflow.online import _bytes as B
from featureflow.online import redis_dump as D
from featureflow.ops import _backend


@pytest.fixture
def mojo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The Mojo backend, failing (not falling back) when the kernels are missing."""
    monkeypatch.setenv(_backend.ENV_VAR, "mojo")
    _backend.reset()
    yield
    _backend.reset()


_TEXT = st.one_of(
    st.binary(max_size=10),
    st.from_regex(rb"\A-?[0-9]{1,21}\Z"),
    st.sampled_from([b"-", b"-0", b"0", b"--1", b"1-", b"", b"9" * 20, b"-" + b"9" * 19]),
    st.binary(min_size=60, max_size=66),
)
"""Short bytes, integer-like texts (up to past the 20-digit limit) and their edges, and
lengths around the one-byte listpack string header's 63."""


def _packed(values: list[bytes]) -> B.Packed:
    return B.Packed(np.frombuffer(b"".join(values), dtype=np.uint8),
                    np.cumsum([0, *map(len, values)], dtype=np.int64))


@st.composite
def _value_parts(draw: st.DrawFn, rows: int) -> tuple[list[B.Cells | B.Packed], list[bytes]]:
    """One field's value over ``rows`` rows as parts of mixed layouts, and each row's
    joined bytes (the oracle)."""
    parts: list[B.Cells | B.Packed] = []
    joined = [b""] * rows
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["packed", "fixed", "const", "padded"]))
        if kind == "const":
            value = draw(_TEXT)
            part: B.Cells | B.Packed = B.const(value, rows)
            cells = [value] * rows
        elif kind == "fixed":
            width = draw(st.integers(0, 12))
            cells = draw(st.lists(st.binary(min_size=width, max_size=width),
                                  min_size=rows, max_size=rows))
            part = B.Cells(np.frombuffer(b"".join(cells), dtype=np.uint8).reshape(rows, width))
        elif kind == "padded":
            cells = draw(st.lists(st.binary(max_size=9), min_size=rows, max_size=rows))
            part = B.pad(_packed(cells))
        else:
            cells = draw(st.lists(_TEXT, min_size=rows, max_size=rows))
            part = _packed(cells)
        parts.append(part)
        joined = [a + b for a, b in zip(joined, cells, strict=True)]
    return parts, joined


@st.composite
def _hashes(draw: st.DrawFn) -> tuple[list[D.ViewFields], np.ndarray, list[list[list[bytes]]],
                                      list[list[bytes]]]:
    """Views with fields over their own rows, and each entity's row per view (-1: none)."""
    n = draw(st.integers(1, 14))
    n_views = draw(st.integers(1, 3))
    rows = np.full((n, n_views), -1, dtype=np.int64)
    views, values, names = [], [], []
    for v in range(n_views):
        has = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        mine = np.flatnonzero(has)
        order = draw(st.permutations(range(len(mine))))
        rows[mine, v] = np.asarray(order, dtype=np.int64)
        field_names = draw(st.lists(st.one_of(st.binary(min_size=1, max_size=6), _TEXT),
                                    min_size=1, max_size=4))
        drawn = [draw(_value_parts(len(mine))) for _ in field_names]
        views.append(D.ViewFields(field_names, [parts for parts, _ in drawn]))
        values.append([cells for _, cells in drawn])
        names.append(field_names)
    return views, rows, values, names


def _fields_of(entity: int, rows: np.ndarray, values: list[list[list[bytes]]],
               names: list[list[bytes]]) -> list[tuple[bytes, bytes]]:
    return [(name, cells[int(rows[entity, v])])
            for v in range(rows.shape[1]) if rows[entity, v] >= 0
            for name, cells in zip(names[v], values[v], strict=True)]


_ONE_BACKEND = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
"""The backend fixture holds for every example (it only pins the backend)."""

VERSION = b"\x0b\x00"  # Redis 7.x's RDB version in a DUMP footer


@settings(max_examples=150, deadline=None, suppress_health_check=_ONE_BACKEND)
@given(_hashes())
def test_the_kernel_builds_what_numpy_builds(mojo: None, hashes: tuple) -> None:  # type: ignore[type-arg]
    """Same entities, same bytes; an entity has a payload exactly when every name and value
    of its fields is at most 63 bytes and none reads as an integer (numpy's rule here is
    the independent check), and then its payload ends with the CRC-64 of the rest."""
    views, rows, values, names = hashes
    assert ops.backend() == "mojo"
    positions, payloads = D.hash_payloads(views, rows, VERSION)
    expected_positions, expected = D._grouped_payloads(views, rows, VERSION)
    got = dict(zip(positions.tolist(), payloads.to_pylist(), strict=True))
    want = dict(zip(expected_positions.tolist(), expected.to_pylist(), strict=True))
    assert got == want
    for entity in range(rows.shape[0]):
        fields = _fields_of(entity, rows, values, names)
        plain = 0 < len(fields) <= D.MAX_FIELDS and all(
            _listpack_string(cell) for pair in fields for cell in pair)
        assert (entity in got) == plain, fields
        if entity in got:
            payload = got[entity]
            assert payload[-10:-8] == VERSION
            assert payload[-8:] == int(D.crc64(_packed([payload[:-8]]))[0]).to_bytes(8, "little")


def _listpack_string(cell: bytes) -> bool:
    """Whether Redis keeps ``cell`` as a listpack string under a one-byte header."""
    return len(cell) <= D.MAX_STRING and not (
        len(cell) <= 20 and re.fullmatch(rb"-?[0-9]+", cell) is not None)


@settings(max_examples=40, deadline=None, suppress_health_check=_ONE_BACKEND)
@given(_hashes())
def test_restored_payloads_dump_as_hset_makes_them(mojo: None, redis_url: str,
                                                   hashes: tuple) -> None:  # type: ignore[type-arg]
    """Every payload the kernel builds, restored on a real server, ``DUMP``s byte for byte
    as the hash ``HSET`` makes of the same fields in the same order."""
    views, rows, values, names = hashes
    host, port = redis_url.split(":")
    client = redis.Redis(host=host, port=int(port), db=14)
    client.delete("probe")
    client.hset("probe", b"f", b"v")
    version = client.dump("probe")[-10:-8]  # type: ignore[index]
    positions, payloads = D.hash_payloads(views, rows, version)
    for entity, payload in zip(positions.tolist(), payloads.to_pylist(), strict=True):
        fields = _fields_of(entity, rows, values, names)
        client.delete("made", "restored")
        for name, value in fields:  # one at a time: the listpack keeps HSET's order
            client.hset("made", name, value)
        if client.hlen("made") != len(fields):
            continue  # a repeated name: HSET keeps one field, the payload both
        client.restore("restored", 0, payload)
        assert client.dump("restored") == client.dump("made")


def test_rows_past_a_values_rows_are_refused_before_the_kernel_reads(mojo: None) -> None:
    """The kernel reads a value at each entity's row unchecked: the call checks first."""
    value = [ops.ByteRows(np.zeros(2, dtype=np.uint8), offsets=np.array([0, 1, 2]))]
    with pytest.raises(ValueError, match="field 0's value has 2 rows; its view's rows reach 2"):
        ops.hash_payloads([b"f"], [0], [value], np.array([[0], [2]]), VERSION)
    with pytest.raises(ValueError, match="do not cover the fields' views"):
        ops.hash_payloads([b"f"], [1], [value], np.array([[0], [1]]), VERSION)
    with pytest.raises(ValueError, match="one each per field and two"):
        ops.hash_payloads([b"f"], [0], [value], np.array([[0], [1]]), b"\x0b")
