"""Hypothesis strategies of Kafka message values for the JSON parsers' tests: records good
and bad in every way the parsers must agree on (types, overflow, non-finite words, grammar
that only looks right, escapes, unicode, duplicated and escaped keys, nesting, bytes that are
not UTF-8 or not JSON, records that are JSON only when joined)."""

from __future__ import annotations

import json

from hypothesis import strategies as st

MAX_DEPTH = 1024
"""orjson's nesting limit (the outer object counts as 1)."""

# Member texts: values right and wrong for every type, and JSON that only looks right.
VALUE_TEXTS = [
    "1", "-1", "0", "-0", "7", "127", "128", "-129", "32768", "2147483648", "-2147483649",
    "9223372036854775807", "9223372036854775808", "-9223372036854775809",
    "123456789012345678901234567890", "1" + "0" * 400, "1.0", "2.5", "-0.0", "1e2", "1E-7",
    "1e400", "-1e400", "1.7976931348623157e308", "1.7976931348623157e309",
    "3.4028235677973366e38", "1e-400", "9007199254740993", "0.1",
    "1.000000059604644775390625001", "1795996800250", "-9223372036854", "1.5e12",
    "01", "1.", ".5", "+1", "-", "0x10", "NaN", "-Infinity", "Infinity", "Inf", "-Inf",
    "true", "false", "null", "tru", "nul", '"NaN"', '"Infinity"', '"-INF"', '"+INF"',
    '"2026-11-30T00:00:00.250Z"', '"1795996800250"', '"x"', '""', '"\\u00e9t\\u00e9"',
    '"caf\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"', '"a\\"b"', '"a\\\\"', '"\\\\\\""',
    '"}{"', '"{"', '"\\/"', '"\\x"', '"tab\there"', '"new\nline"', "[]", "[1,2]", "{}",
    '{"a":1}', '{"a":[1,{"b":null}]}', "[1,]", '"unterminated', "[" * 3 + "]" * 3,
]  # fmt: skip
KEYS = [
    "user_id", "amount", "merchant", "event_timestamp", "k", "i", "s", "t", "d", "f", "b",
    "txt", "ts", "extra", "User_id", "user\\u005fid", "t\\u0073", "",
]  # fmt: skip
_SPACES = st.sampled_from(["", "", "", " ", "\n", "\t", "\r\n"])


@st.composite
def _object_texts(draw: st.DrawFn) -> bytes:
    members = draw(
        st.lists(
            st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUE_TEXTS), _SPACES), max_size=6
        )
    )
    body = ",".join(f'{space}"{key}"{space}:{space}{value}' for key, value, space in members)
    return f"{draw(_SPACES)}{{{body}}}{draw(_SPACES)}".encode()


def event(user: int, amount: float | None, stamp: int | str) -> bytes:
    record = {"user_id": user, "amount": amount, "merchant": "m", "event_timestamp": stamp}
    return json.dumps(record, separators=(",", ":")).encode()


good_events = st.builds(
    event,
    st.integers(-(2**63), 2**63 - 1),
    st.none() | st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**62), 2**62) | st.just("2026-11-30T00:00:00.250Z"),
)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_dumped = st.tuples(
    st.dictionaries(st.sampled_from(KEYS[:14]) | st.text(max_size=4), _json_values, max_size=5),
    st.booleans(),
).map(lambda pair: json.dumps(pair[0], ensure_ascii=pair[1]).encode())
_other_values = st.sampled_from(
    [b"", b"null", b"[1]", b'"s"', b"1", b"not json", b"{", b"}", b"{}", b"\xef\xbb\xbf{}",
     b'{"k":1}{"k":2}', b'{"k":1} {"k":2}', b'{"a":"}', b'{","k":1}', b'{"k":"\xff"}',
     b'{"k":"\xed\xa0\x80"}', b'{"x":' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}",
     b'{"x":' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}", b'{"k":1,"k":2}',
     b'{"ts":1,"ts":"2026-11-30T00:00:00Z"}', b'{"k":1,"k\\u0000":2}']
) | st.binary(max_size=12)  # fmt: skip
values = st.one_of(good_events, _object_texts(), _dumped, _other_values, st.none())
batches = st.lists(values, min_size=1, max_size=40) | st.lists(good_events, min_size=1, max_size=40)
