"""featureflow.ops: rolling, hopping and session window aggregates.

Times are int64 nanoseconds (or any Arrow timestamp type); durations are
strings (``"500ns"``, ``"250ms"``, ``"10s"``, ``"5m"``, ``"1h"``, ``"1d"``),
ints (ns) or ``timedelta``. Rows may come in any order; ``keys`` (integers
or strings) split them into entities. Nulls and NaN values are skipped
(SQL semantics). The work is done by compiled Mojo kernels reading the Arrow
buffers in place, or by the numpy reference when those are not available
(see `backend`).
"""

from __future__ import annotations

import importlib.metadata
from typing import Literal

import numpy as np
import pyarrow as pa

from featureflow.ops import _backend, _inputs, _nonfinite, _tables
from featureflow.ops._aggs import AGGS, parse_aggs
from featureflow.ops._durations import duration_ns

__all__ = ["AGGS", "backend", "backend_reason", "describe", "hopping", "rolling", "sessions"]


def backend() -> Literal["mojo", "numpy"]:
    """``"mojo"`` when the compiled kernels are in use, ``"numpy"`` for the reference."""
    return _backend.current().backend.name


def backend_reason() -> str:
    """Where the kernels were loaded from, or why the numpy fallback is used."""
    return _backend.current().reason


def describe() -> dict[str, str]:
    """Facts for ``featureflow doctor``: backend, reason, Mojo version, kernel library."""
    from featureflow.ops import _mojo

    choice = _backend.current()
    info = _mojo.build_info()
    try:
        installed = importlib.metadata.version("mojo")
    except importlib.metadata.PackageNotFoundError:
        installed = "not installed"
    return {
        "backend": choice.backend.name,
        "reason": choice.reason,
        "mojo_version": info.get("mojo_version", installed),
        "library": choice.library or "",
    }


def _key_encoder() -> _inputs.IntKeyEncoder | None:
    """The backend's fast integer-key encoder, if it has one."""
    return getattr(_backend.current().backend, "int_key_codes", None)


def rolling(
    ts: object,
    values: object,
    windows: object,
    aggs: object,
    keys: object = None,
    hop: object = None,
) -> pa.Table:
    """Rolling aggregates: one output row per input row, in input order.

    The frame of row i is every row j of the same key with
    ``ts[i] - W <= ts[j] <= ts[i]`` (SQL ``RANGE BETWEEN W PRECEDING AND
    CURRENT ROW``: rows with an equal ts are in each other's frame). With
    ``hop`` the frame is the sawtooth ``floor((ts[i] - W) / hop) * hop <=
    ts[j] <= ts[i]`` used by tiled feature stores. All bounds are in ns.

    Args:
        ts: event times, int64 ns or an Arrow timestamp array; no nulls.
        values: float64, float32, int64 or int32; nulls and NaN are skipped.
        windows: one duration W or a list of them, all computed in one call.
        aggs: names from `AGGS`.
        keys: optional entity per row (integers or strings).
        hop: optional duration; switches to the sawtooth frame.

    Returns:
        A table with column ``f"{agg}_{window}"`` (window as written by the
        caller) for every window and agg, window-major. count and
        count_distinct are int64; min/max/first/last keep the value type;
        the others are float64. A frame without a non-null value gives null
        (std/var: fewer than two values). With ±inf in the frame: sum/mean
        +inf, -inf, or NaN when it holds both; std/var NaN (module docstring).

    Raises:
        TypeError, ValueError: naming the argument that is wrong.
    """
    s = _inputs.series(ts, values, keys, _key_encoder())
    wins = _inputs.windows(windows)
    names = parse_aggs(aggs)
    hop_ns = None if hop is None else duration_ns(hop, "hop")
    columns = _tables.allocate(
        [(f"{agg}_{label}", agg) for label, _ in wins for agg in names], s.values.type, s.n
    )
    impl = _backend.current().backend

    def kernel(rows: _inputs.Series, aggs: list[str], cols: list[_tables.OutputColumn]) -> int:
        impl.rolling(rows, [ns for _, ns in wins], hop_ns, aggs, cols)
        return rows.n

    _nonfinite.aggregate(s, names, columns, kernel)
    return _tables.table(columns, s.n)


def hopping(
    ts: object, values: object, size: object, step: object, aggs: object, keys: object = None
) -> pa.Table:
    """Hopping (sliding) windows with Spark's ``window(ts, size, step)`` semantics.

    Windows are ``[start, start + size)`` (ns, end exclusive) with ``start``
    a multiple of ``step`` since the epoch; a row belongs to every window
    that contains its ts. One output row per (key, window) holding at least
    one row, sorted by key then ``window_start``.

    Returns:
        Columns ``key`` (only with keys), ``window_start``, ``window_end``
        (timestamp[ns, UTC]), then one column per agg, named after the agg.
    """
    s = _inputs.keys_in_order(_inputs.series(ts, values, keys, _key_encoder()))
    size_ns = duration_ns(size, "size")
    step_ns = duration_ns(step, "step")
    names = parse_aggs(aggs)
    impl = _backend.current().backend
    per_row = -(-size_ns // step_ns)  # windows a row can fall in
    if per_row <= 2:
        capacity = s.n * per_row
    else:  # too loose a bound to allocate: count the windows first
        capacity = impl.hopping(
            s, size_ns, step_ns, names, True, _tables.WindowBounds.allocate(0), []
        )
    bounds = _tables.WindowBounds.allocate(capacity)
    columns = _tables.allocate([(a, a) for a in names], s.values.type, capacity)
    m = _nonfinite.aggregate(
        s,
        names,
        columns,
        lambda rows, aggs, cols: impl.hopping(rows, size_ns, step_ns, aggs, False, bounds, cols),
    )
    leading = bounds.leading(m, s.key_values, ("window_start", "window_end"))
    return _tables.table(columns, m, leading)


def sessions(
    ts: object,
    values: object,
    gap: object,
    aggs: object,
    keys: object = None,
    max_length: object = None,
) -> pa.Table:
    """Session windows with Spark's ``session_window(ts, gap)`` semantics, optionally capped.

    A key's rows are taken in ts order; a row joins the open session when
    its ts is <= the session's end, the max of ``ts + gap`` over the
    session's rows (so the end is inclusive); otherwise it opens a new one.
    ``gap`` is a duration or a per-row array (int64 ns or Arrow duration):
    rows whose gap is null or <= 0 are dropped, as in Spark.

    ``max_length`` (a duration; None: no cap, Spark's semantics) bounds how long a
    session lasts: a row with ``ts - session_start > max_length`` (strictly, ns)
    does not join even within the gap; it opens the next session. So every
    session's last row is at most ``max_length`` after its first (a row exactly
    ``max_length`` after the start still joins), and a key whose rows never
    pause for a gap gets sessions of at most that length, back to back.

    Returns:
        Columns ``key`` (only with keys), ``session_start`` (first ts),
        ``session_end`` (max ts + gap over its rows, also when the cap closed it)
        as timestamp[ns, UTC], then one column per agg, named after the agg;
        sorted by key, session_start.
    """
    s = _inputs.keys_in_order(_inputs.series(ts, values, keys, _key_encoder()))
    names = parse_aggs(aggs)
    max_ns = None if max_length is None else duration_ns(max_length, "max_length")
    gaps: np.ndarray | None = None
    gap_ns = 0
    if isinstance(gap, pa.Array | pa.ChunkedArray | np.ndarray):
        gaps = _inputs.gap_array(gap, s.n)
        drop = gaps <= 0
        if drop.any():
            s = _inputs.without_rows(s, drop)
            gaps = np.ascontiguousarray(gaps[~drop])
    else:
        gap_ns = duration_ns(gap, "gap")
    bounds = _tables.WindowBounds.allocate(s.n)
    columns = _tables.allocate([(a, a) for a in names], s.values.type, s.n)
    impl = _backend.current().backend
    m = _nonfinite.aggregate(
        s,
        names,
        columns,
        lambda rows, aggs, cols: impl.sessions(rows, gap_ns, gaps, max_ns, aggs, bounds, cols),
    )
    leading = bounds.leading(m, s.key_values, ("session_start", "session_end"))
    return _tables.table(columns, m, leading)
