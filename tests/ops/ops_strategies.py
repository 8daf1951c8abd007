"""Hypothesis strategies for window-function inputs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st


@dataclass
class Rows:
    ts: np.ndarray
    values: pa.Array
    keys: pa.Array | None


SPECIALS = {1: np.nan, 2: np.inf, 3: -np.inf}
"""Float values drawn as code 0..7: these codes become NaN, +inf, -inf."""


@st.composite
def rows(
    draw: st.DrawFn,
    max_rows: int = 60,
    dtypes: tuple[str, ...] = ("float64", "float32", "int64", "int32"),
) -> Rows:
    """Unsorted rows with ties, nulls, NaN, +inf and -inf (float types: each about
    one value in eight, so frames hold none, one or both infinities), one or many
    (int or string) keys, and sometimes a non-zero Arrow offset."""
    n = draw(st.integers(0, max_rows))
    span = draw(st.sampled_from([1, 5, 100, 10**6]))  # 1: every ts ties
    ts = np.array(draw(st.lists(st.integers(0, span), min_size=n, max_size=n)), dtype=np.int64)
    dtype = draw(st.sampled_from(dtypes))
    small = st.integers(-5, 5)  # few distinct values: count_distinct and min/max ties matter
    wide = st.integers(-(10**6), 10**6)
    raw = draw(st.lists(st.one_of(small, wide), min_size=n, max_size=n))
    vals = np.array(raw, dtype=np.float64)
    if dtype.startswith("float"):
        vals = vals / draw(st.sampled_from([1.0, 8.0, 1000.0]))
        special = np.array(draw(st.lists(st.integers(0, 7), min_size=n, max_size=n)))
        for code, value in SPECIALS.items():
            vals[special == code] = value
    nulls = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    values = pa.array(vals.astype(dtype), mask=nulls)
    nkeys = draw(st.sampled_from([0, 1, 3, 50]))
    keys: pa.Array | None = None
    if nkeys:
        ids = draw(st.lists(st.integers(0, nkeys - 1), min_size=n, max_size=n))
        keys = (
            pa.array([f"k{i}" for i in ids], pa.string())
            if draw(st.booleans())
            else pa.array(ids, pa.int64())
        )
    offset = draw(st.integers(0, 3))
    if offset:  # prepend junk rows and slice them away: Arrow offset != 0
        pad = pa.array(np.zeros(offset), type=values.type)
        values = pa.concat_arrays([pad, values]).slice(offset)
        if keys is not None:
            keys = pa.concat_arrays([keys.slice(0, 0), keys])
    return Rows(ts, values, keys)
