"""The batch JSON parser against the per-record parser (the oracle), row for row."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from json_messages import KEYS, VALUE_TEXTS, batches, event, good_events

from featureflow.events.json_batch import BatchJsonParser
from featureflow.events.json_records import JsonRecordParser

SCHEMAS = {
    # the example view's: a timestamp read as text (RFC 3339 or epoch milliseconds)
    "example": ((("user_id", "bigint"), ("amount", "double"), ("merchant", "string"),
                 ("event_timestamp", "timestamp")), "user_id", "event_timestamp"),
    # every supported type, the timestamp declared a string
    "all types": ((("k", "bigint"), ("i", "int"), ("s", "smallint"), ("t", "tinyint"),
                   ("d", "double"), ("f", "float"), ("b", "boolean"), ("txt", "string"),
                   ("ts", "string")), "k", "ts"),
    # timestamps declared as numbers: the integer and string reads are typed afterwards
    "millis": ((("k", "int"), ("f", "float"), ("ts", "bigint")), "k", "ts"),
    "double stamp": ((("k", "bigint"), ("ts", "double")), "k", "ts"),
    "tiny stamp": ((("k", "bigint"), ("ts", "tinyint")), "k", "ts"),
    "boolean stamp": ((("k", "bigint"), ("ts", "boolean")), "k", "ts"),
}  # fmt: skip
PARSERS = {
    name: BatchJsonParser(JsonRecordParser(fields, key, stamp))  # type: ignore[arg-type]
    for name, (fields, key, stamp) in SCHEMAS.items()
}


def _same(got: object, expected: object) -> bool:
    if isinstance(got, float) and isinstance(expected, float):
        return got == expected or (math.isnan(got) and math.isnan(expected))
    return got == expected


def assert_same_as_per_record(parser: BatchJsonParser, values: list[bytes | None]) -> None:
    got = parser(pa.array(values, pa.binary()))
    expected = parser.records(pa.array(values, pa.binary()))
    assert got.schema == expected.schema
    assert got.num_rows == expected.num_rows == len(values)
    for value, row, oracle in zip(values, got.to_pylist(), expected.to_pylist(), strict=True):
        for name, wanted in oracle.items():
            assert _same(row[name], wanted), (value, name, row[name], wanted)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(PARSERS)), values=batches)
def test_every_row_is_the_per_record_parsers(name: str, values: list[bytes | None]) -> None:
    assert_same_as_per_record(PARSERS[name], values)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(good_events, min_size=1, max_size=200))
def test_a_batch_of_good_records_takes_no_per_value_step(values: list[bytes]) -> None:
    table, stats = PARSERS["example"].decode(values)
    assert stats.refused == 0
    assert stats.converted == ()  # epoch milliseconds in the text-typed stamp included
    assert table.equals(PARSERS["example"].records(values))


def test_a_bad_record_costs_only_its_own_column_or_decode() -> None:
    good = [event(user, 1.5, "2026-11-30T00:00:00Z") for user in range(500)]
    _, stats = PARSERS["example"].decode(good)
    assert stats == type(stats)(500, 0, ())
    for bad, refused, converted in [
        (b'{"user_id":1.5,"event_timestamp":1}', 0, ("user_id",)),
        (b'{"user_id":2,"merchant":7.5}', 0, ("merchant",)),
        (b'{"user_id":9223372036854775808}', 0, ("user_id",)),  # beyond int64
        (b"not json", 1, ()),
        (None, 1, ()),
        (b"[1]", 0, ()),
        (b'{"user_id":1,"amount":1e400}', 1, ()),
    ]:
        values = [*good[:250], bad, *good[250:]]
        _, stats = PARSERS["example"].decode(values)
        assert (stats.refused, stats.converted) == (refused, converted), bad
        assert_same_as_per_record(PARSERS["example"], values)


def test_an_integer_beyond_a_double_reads_as_infinity_in_both_paths() -> None:
    values = [
        b'{"user_id":1,"amount":1' + b"0" * 400 + b"}",
        b'{"user_id":1,"amount":-1' + b"0" * 400 + b"}",
    ]
    rows = PARSERS["example"](values).to_pylist()
    assert [row["amount"] for row in rows] == [math.inf, -math.inf]
    assert_same_as_per_record(PARSERS["example"], values)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_value_text_in_every_field(name: str) -> None:
    """Each member text as each field's value, in one batch and alone (deterministic)."""
    values: list[bytes | None] = [
        f'{{"{key}":{value}}}'.encode() for key in KEYS for value in VALUE_TEXTS
    ]
    values += [b'{"merchant":"\xff"}', b'{"txt":"caf\xc3"}', b'{"txt":"\xed\xa0\x80"}']
    assert_same_as_per_record(PARSERS[name], values)  # mostly per record: too many refusals
    good = b'{"user_id":1,"k":1,"ts":"2026-11-30T00:00:00Z","event_timestamp":1}'
    for value in values:  # so that each one meets Arrow
        assert_same_as_per_record(PARSERS[name], [good, value, good])


def test_records_that_are_json_only_together_stay_apart() -> None:
    """``{"a":"}`` and ``{","user_id":1}`` are one object when joined (a decoder of the
    joined batch must not read them so)."""
    values: list[bytes | None] = [
        b'{"user_id":0}', b'{"a":"}', b'{","user_id":1}', b'{"user_id":2}{"user_id":3}',
        b'{"a":"\\"}', b'{","user_id":4}', b'{"user_id":5}',
    ]  # fmt: skip
    assert_same_as_per_record(PARSERS["example"], values)


def _numbers() -> st.SearchStrategy[str]:
    """Numbers as producers write them: repr, fixed and scientific at every precision,
    integers of every size; each a member text of the example's double and key fields."""
    floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
    formatted = st.tuples(floats, st.sampled_from(["r", "e", "f", "g", "E"]),
                          st.integers(0, 20)).map(
        lambda t: repr(t[0]) if t[1] == "r" else f"{t[0]:.{t[2]}{t[1]}}")  # fmt: skip
    # significands around 2^53 and exponents around +-22: where one IEEE operation stops
    # being exact (1e23 is not 10.0 ** 23)
    scientific = st.builds("{}{}e{}".format, st.sampled_from(["", "-"]),
                           st.integers(0, 2**54) | st.integers(2**53 - 3, 2**53 + 3),
                           st.integers(-30, 30))  # fmt: skip
    return (formatted | scientific | st.integers(-(10**20), 10**20).map(str)
            | st.sampled_from(VALUE_TEXTS))  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(numbers=st.lists(_numbers(), min_size=1, max_size=20))
def test_numbers_read_by_the_kernel_are_the_per_record_parsers(numbers: list[str]) -> None:
    """Every number text as each type's value, a batch of them (Arrow input: the flat-JSON
    kernel's path where the Mojo kernels are loaded)."""
    # one field at a time: a value the kernel leaves (a float in a string field) sends
    # its whole record to Python
    example = [text for n in numbers for text in (
        f'{{"user_id":1,"amount":{n},"event_timestamp":"x"}}', f'{{"user_id":{n}}}',
        f'{{"merchant":{n}}}')]  # fmt: skip
    every_type = [f'{{"{key}":{n}}}' for n in numbers for key in ("k", "i", "s", "t", "d", "f",
                                                                  "b", "txt", "ts")]  # fmt: skip
    assert_same_as_per_record(PARSERS["example"], [text.encode() for text in example])
    assert_same_as_per_record(PARSERS["all types"], [text.encode() for text in every_type])


@pytest.fixture
def mojo_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The kernels' backend, chosen anew for the test and after it; fails if they are
    missing (as the ops tests' fixture)."""
    from featureflow.ops import _backend

    monkeypatch.setenv(_backend.ENV_VAR, "mojo")
    _backend.reset()
    yield
    _backend.reset()


@pytest.mark.usefixtures("mojo_backend")
def test_good_records_are_read_by_the_kernel() -> None:
    # amounts of a few decimals, as the sample producer writes (a double of 17 significant
    # digits, such as 1/7, is beyond the kernel's exact conversion: Python reads it)
    values = [event(user, round(user * 1.37, 2), "2026-11-30T00:00:00.250Z")
              for user in range(300)]  # fmt: skip
    values += [event(7, None, 1795996800250)]
    table, stats = PARSERS["example"].decode(pa.array(values, pa.binary()))
    assert stats == type(stats)(301, 0, (), read_natively=301)
    assert table.equals(PARSERS["example"].records(values))
    table, stats = PARSERS["example"].decode(pa.array(values, pa.large_binary()))
    assert stats.read_natively == 301
    assert table.equals(PARSERS["example"].records(values))
    mixed = [*values[:100], b"not json", b'{"user_id":"\\u0031"}', None, *values[100:]]
    table, stats = PARSERS["example"].decode(pa.array(mixed, pa.binary()))
    assert (stats.read_natively, stats.refused) == (301, 2)
    assert table.equals(PARSERS["example"].records(mixed))


@pytest.mark.usefixtures("mojo_backend")
def test_strings_read_by_the_kernel_hold_only_their_own_bytes() -> None:
    """A string column from the kernel owns its values' bytes, not a buffer sized for every
    record's: such a buffer went whole into every pickle of the column (the keyed pass
    sends its records to the state host)."""
    values = [event(user, 1.5, "2026-11-30T00:00:00Z") for user in range(400)]
    table, stats = PARSERS["example"].decode(pa.array(values, pa.binary()))
    assert stats.read_natively == len(values)
    (merchant,) = table.column("merchant").chunks
    used = sum(len(text.encode()) for text in merchant.to_pylist() if text is not None)
    assert used
    assert merchant.buffers()[2].size == used
