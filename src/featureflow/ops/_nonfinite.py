"""Infinite values: IEEE (DuckDB) results from kernels whose sums stay finite.

A frame's aggregates follow IEEE arithmetic, as DuckDB computes them: sum and
mean are +inf when the frame holds +inf, -inf when it holds -inf and NaN when
it holds both; var and std of two or more values are NaN when any of them is
infinite (one value: null, as always); count, min, max, first, last and
count_distinct take an infinity as an ordinary value. NaN stays what it is
everywhere: a missing value, skipped like null.

The backends cannot hold an infinity in a running sum: taking it out again when
it leaves the frame gives inf - inf = NaN (the Mojo kernels' compensated sums
stayed NaN from then on), and the numpy reference's prefix sums run over all
keys, so one key's infinity turned the next keys' sums into NaN. So when the
values hold an infinity, `aggregate` calls the backend twice over the same
frames (the frames depend on times, keys and gaps only, never on values):

1. sum/mean/std/var over the values with every infinity made null: finite
   and exact, for the frames that hold no infinity;
2. every other requested agg, plus count, min and max, over the values as
   given: ``max == +inf`` says a frame holds +inf, ``min == -inf`` that it
   holds -inf, and count how many values it holds, infinities included;

then overwrites sum/mean/std/var of the frames that hold an infinity. Input
without one (one pass over the value buffer, no copy) or without
sum/mean/std/var takes a single call, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow.ops import _tables
from featureflow.ops._inputs import Series
from featureflow.ops._tables import OutputColumn

Kernel = Callable[[Series, list[str], list[OutputColumn]], int]
"""A backend call over fixed frames: computes ``aggs`` into ``columns`` (one group
of ``len(aggs)`` columns per window, in ``aggs`` order) and returns the number of
output rows."""

SUMS = ("sum", "mean", "std", "var")
"""The aggregates a frame's infinity turns into ±inf or NaN."""
_PROBES = ("count", "min", "max")
_CHUNK = 1 << 16  # values checked at a time: no temporary as large as the input


def has_infinity(values: pa.Array) -> bool:
    """Whether a float array's data buffer holds ±inf. Slots under nulls are read
    too: a stale infinity there only costs the two-call path, never a wrong result."""
    if not pa.types.is_floating(values.type) or len(values) == values.null_count:
        return False
    width = values.type.byte_width
    data = np.frombuffer(
        values.buffers()[1],
        dtype=values.type.to_pandas_dtype(),
        count=len(values),
        offset=values.offset * width,
    )
    return any(np.isinf(data[i : i + _CHUNK]).any() for i in range(0, len(data), _CHUNK))


def aggregate(s: Series, aggs: list[str], columns: list[OutputColumn], kernel: Kernel) -> int:
    """``kernel(s, aggs, columns)`` with IEEE results for frames holding ±inf (above)."""

    def over(values: list[pa.Array], names: list[str], cols: list[OutputColumn]) -> int:
        rows = s if values[0] is s.values else Series(s.ts, values[0], s.codes, s.key_values)
        return kernel(rows, names, cols)

    return aggregate_values([s.values], aggs, columns, over)


ValuesKernel = Callable[[list[pa.Array], list[str], list[OutputColumn]], int]
"""A backend call over fixed frames of rows whose values come in several arrays
(the runs of `featureflow.ops.rolling_at`), like `Kernel`."""


def aggregate_values(
    values: list[pa.Array], aggs: list[str], columns: list[OutputColumn], kernel: ValuesKernel
) -> int:
    """``kernel(values, aggs, columns)`` with IEEE results for frames holding ±inf (above)."""
    sums = [a for a in aggs if a in SUMS]
    if not sums or not any(has_infinity(v) for v in values):
        return kernel(values, aggs, columns)
    groups = len(columns) // len(aggs)
    col = {(g, a): columns[g * len(aggs) + i] for g in range(groups) for i, a in enumerate(aggs)}
    probes = [a for a in _PROBES if a not in aggs]
    spare = _tables.allocate(
        [(a, a) for _ in range(groups) for a in probes], values[0].type, columns[0].capacity
    )
    col.update(zip([(g, a) for g in range(groups) for a in probes], spare, strict=True))
    rest = [a for a in aggs if a not in SUMS] + probes
    kernel(values, rest, [col[g, a] for g in range(groups) for a in rest])
    finite = [pc.if_else(pc.is_inf(v), pa.scalar(None, v.type), v) for v in values]
    m = kernel(finite, sums, [col[g, a] for g in range(groups) for a in sums])
    for g in range(groups):
        _overwrite(m, col[g, "count"], col[g, "min"], col[g, "max"], [col[g, a] for a in sums])
    return m


def _overwrite(
    m: int,
    count: OutputColumn,
    lowest: OutputColumn,
    highest: OutputColumn,
    targets: list[OutputColumn],
) -> None:
    """Set sum/mean (``targets``) of the first ``m`` frames holding +inf to +inf,
    -inf to -inf, both to NaN; std/var of those holding two or more values to NaN."""
    n, lo, hi = (c.numpy()[:m] for c in (count, lowest, highest))
    rows = np.flatnonzero((n > 0) & ((hi == np.inf) | (lo == -np.inf)))  # min/max null: n == 0
    pos, neg = hi[rows] == np.inf, lo[rows] == -np.inf
    signed = np.where(pos & neg, np.nan, np.where(pos, np.inf, -np.inf))
    several = rows[n[rows] >= 2]
    for c in targets:
        spread = c.agg in ("std", "var")
        at = several if spread else rows
        c.numpy()[at] = np.nan if spread else signed
        if c.validity is not None:
            bits = np.frombuffer(c.validity, dtype=np.uint8)
            np.bitwise_or.at(bits, at >> 3, (1 << (at & 7)).astype(np.uint8))
