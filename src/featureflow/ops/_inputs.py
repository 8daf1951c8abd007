"""Argument validation and normalisation shared by both backends.

Everything here turns caller input into a `Series`: int64 nanosecond times,
a value array of a supported type and dense int32 key codes. Arrow data is
not copied when it is already in that form (int64 or timestamp[ns] times,
single-chunk arrays); other timestamp units, multi-chunk arrays and key
encoding produce new arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow.ops._durations import duration_label, duration_ns

VALUE_TYPES: dict[pa.DataType, int] = {
    pa.float64(): 0,
    pa.float32(): 1,
    pa.int64(): 2,
    pa.int32(): 3,
}
"""Supported value types and their native dtype codes."""

_EXACT_INT = 2**53  # int64 values are aggregated as float64: exact below this


@dataclass(frozen=True)
class Series:
    """Normalised input rows.

    ``ts``: int64 ns without nulls; ``values``: one of `VALUE_TYPES`, nulls
    allowed; ``codes``: int32 key id per row (``None`` when unkeyed) and
    ``key_values[code]`` the key it stands for.
    """

    ts: pa.Array
    values: pa.Array
    codes: np.ndarray | None
    key_values: pa.Array | None

    @property
    def n(self) -> int:
        return len(self.ts)

    @property
    def ngroups(self) -> int:
        return 1 if self.key_values is None else len(self.key_values)


def to_array(obj: object, argument: str) -> pa.Array:
    """A single contiguous pyarrow Array from a pyarrow (chunked) array or numpy array."""
    if isinstance(obj, pa.ChunkedArray):
        if obj.num_chunks == 1:
            return obj.chunk(0)
        return pa.concat_arrays(obj.chunks) if obj.num_chunks else pa.array([], obj.type)
    if isinstance(obj, pa.Array):
        return obj
    if isinstance(obj, np.ndarray):
        if obj.ndim != 1:
            msg = f"{argument}: expected a 1-d array, got {obj.ndim} dimensions"
            raise ValueError(msg)
        try:
            return pa.array(obj)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            msg = f"{argument}: cannot convert numpy dtype {obj.dtype} to Arrow: {exc}"
            raise TypeError(msg) from exc
    kind = type(obj).__name__
    msg = f"{argument}: expected a pyarrow Array, ChunkedArray or numpy array, got {kind}"
    raise TypeError(msg)


def timestamps(obj: object, argument: str = "ts") -> pa.Array:
    """Times as int64 ns: int64 (taken as ns) or any Arrow timestamp unit/time zone."""
    arr = to_array(obj, argument)
    if arr.null_count:
        msg = f"{argument}: must not contain nulls ({arr.null_count} found)"
        raise ValueError(msg)
    if pa.types.is_timestamp(arr.type):
        factor = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}[arr.type.unit]
        arr = arr.view(pa.int64())
        if factor != 1:
            try:
                arr = pc.multiply_checked(arr, pa.scalar(factor, pa.int64()))
            except pa.ArrowInvalid as exc:
                msg = f"{argument}: timestamps overflow int64 nanoseconds"
                raise ValueError(msg) from exc
        return arr
    if arr.type != pa.int64():
        msg = f"{argument}: expected int64 nanoseconds or an Arrow timestamp type, got {arr.type}"
        raise TypeError(msg)
    return arr


def value_array(obj: object, n: int, argument: str = "values") -> pa.Array:
    """Values of a supported type, ``n`` long; int64 values must stay within ±2**53."""
    arr = to_array(obj, argument)
    if arr.type not in VALUE_TYPES:
        msg = f"{argument}: unsupported type {arr.type}; use float64, float32, int64 or int32"
        raise TypeError(msg)
    if len(arr) != n:
        msg = f"{argument}: length {len(arr)} does not match ts length {n}"
        raise ValueError(msg)
    if arr.type == pa.int64() and len(arr) > arr.null_count:
        bounds = pc.min_max(arr)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if max(-lo, hi) > _EXACT_INT:
            msg = f"{argument}: int64 values beyond ±2**53 cannot be aggregated exactly"
            raise ValueError(msg)
    return arr


IntKeyEncoder = Callable[[pa.Array], "tuple[np.ndarray, pa.Array] | None"]
"""A backend's fast path for integer keys: the same codes as ``dictionary_encode``
(first-occurrence order), or ``None`` to fall back to it."""


def key_codes(
    obj: object, n: int, argument: str = "keys", encoder: IntKeyEncoder | None = None
) -> tuple[np.ndarray, pa.Array]:
    """Dense int32 codes (a hash pass, no sort) and the key value of each code.

    Integer and string keys are accepted; null keys form one group of their own.
    """
    arr = to_array(obj, argument)
    t = arr.type
    if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)):
        msg = f"{argument}: unsupported key type {t}; use integers or strings"
        raise TypeError(msg)
    if len(arr) != n:
        msg = f"{argument}: length {len(arr)} does not match ts length {n}"
        raise ValueError(msg)
    if encoder is not None:
        fast = encoder(arr)
        if fast is not None:
            return fast
    encoded = pc.dictionary_encode(arr, null_encoding="encode")
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    return np.ascontiguousarray(codes), encoded.dictionary


def series(
    ts: object, values: object, keys: object = None, encoder: IntKeyEncoder | None = None
) -> Series:
    """Validate and normalise the row arguments every function shares."""
    ts_arr = timestamps(ts)
    vals = value_array(values, len(ts_arr))
    if keys is None:
        return Series(ts_arr, vals, None, None)
    codes, key_values = key_codes(keys, len(ts_arr), encoder=encoder)
    return Series(ts_arr, vals, codes, key_values)


def keys_in_order(s: Series) -> Series:
    """The same rows with codes renumbered so that code order is key order
    (nulls last): outputs sorted by key then come out of the kernels directly."""
    if s.key_values is None or s.codes is None:
        return s
    order = pc.array_sort_indices(s.key_values, null_placement="at_end").to_numpy()
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return Series(s.ts, s.values, rank[s.codes], s.key_values.take(order))


def without_rows(s: Series, drop: np.ndarray) -> Series:
    """The rows where ``drop`` is False (copies the kept rows)."""
    keep = pa.array(~drop)
    codes = None if s.codes is None else s.codes[~drop]
    return Series(s.ts.filter(keep), s.values.filter(keep), codes, s.key_values)


def gap_array(obj: object, n: int, argument: str = "gap") -> np.ndarray:
    """Per-row session gaps as int64 ns; null and non-positive gaps stay <= 0
    (their rows are dropped, as Spark does). Accepts int64 (ns) or duration arrays."""
    arr = to_array(obj, argument)
    if len(arr) != n:
        msg = f"{argument}: length {len(arr)} does not match ts length {n}"
        raise ValueError(msg)
    if pa.types.is_duration(arr.type):
        factor = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}[arr.type.unit]
        arr = pc.multiply_checked(arr.view(pa.int64()), pa.scalar(factor, pa.int64()))
    elif arr.type != pa.int64():
        msg = f"{argument}: expected int64 nanoseconds or an Arrow duration type, got {arr.type}"
        raise TypeError(msg)
    return np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def windows(obj: object, argument: str = "windows") -> list[tuple[str, int]]:
    """``(label, ns)`` for one duration or a non-empty sequence of them."""
    items: Sequence[object]
    items = list(obj) if isinstance(obj, list | tuple) else [obj]
    if not items:
        msg = f"{argument}: expected at least one window"
        raise ValueError(msg)
    out: list[tuple[str, int]] = []
    for item in items:
        ns = duration_ns(item, argument)
        label = duration_label(item)  # type: ignore[arg-type]
        if any(label == seen for seen, _ in out):
            msg = f"{argument}: window {label!r} is listed twice"
            raise ValueError(msg)
        out.append((label, ns))
    return out
