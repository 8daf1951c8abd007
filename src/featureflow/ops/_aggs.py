"""The aggregate functions: names, native codes and result types."""

from __future__ import annotations

import pyarrow as pa

# Order fixes the native codes (mirrored in mojo_ops/kernels.mojo).
AGGS: tuple[str, ...] = (
    "count",
    "sum",
    "mean",
    "min",
    "max",
    "std",
    "var",
    "first",
    "last",
    "count_distinct",
)
CODES: dict[str, int] = {name: code for code, name in enumerate(AGGS)}

_KEEPS_INPUT_TYPE = frozenset({"min", "max", "first", "last"})
_COUNTS = frozenset({"count", "count_distinct"})


def result_type(agg: str, value_type: pa.DataType) -> pa.DataType:
    """count/count_distinct: int64; min/max/first/last: the value type; else float64."""
    if agg in _COUNTS:
        return pa.int64()
    if agg in _KEEPS_INPUT_TYPE:
        return value_type
    return pa.float64()


def is_nullable(agg: str) -> bool:
    """Counts are never null; every other aggregate is null on an empty frame."""
    return agg not in _COUNTS


def parse_aggs(aggs: object) -> list[str]:
    """Validate ``aggs`` (a name or a sequence of names) and return the names."""
    names = [aggs] if isinstance(aggs, str) else aggs
    if not isinstance(names, list | tuple) or not names:
        msg = f"aggs: expected a non-empty list of aggregate names from {list(AGGS)}"
        raise TypeError(msg)
    out: list[str] = []
    for name in names:
        if not isinstance(name, str):
            msg = f"aggs: expected aggregate names (str), got {type(name).__name__}"
            raise TypeError(msg)
        if name not in CODES:
            msg = f"aggs: unknown aggregate {name!r}; choose from {list(AGGS)}"
            raise ValueError(msg)
        if name in out:
            msg = f"aggs: {name!r} is listed twice"
            raise ValueError(msg)
        out.append(name)
    return out
