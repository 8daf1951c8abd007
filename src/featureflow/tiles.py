"""Bounded window state of tiled rolling views: per-entity tile partial aggregates.

A tiled view's frame at event time t is the sawtooth ``[floor((t - W) / hop) *
hop, t]`` (ns): whole tiles ``[s, s + hop)`` with ``s`` a multiple of ``hop``
since the epoch, then the current tile up to t. Once the watermark has passed a
tile's end, no event the stream job still accepts can land in it, so its events
can be folded into one partial aggregate per (entity, tile) — state per entity is
then bounded by ``W / hop`` tiles plus the raw events of tiles still open.

The state of a view is split at the *compaction bound* ``C = floor(watermark /
hop) * hop``:

- tiles: partials of the events before ``C`` (each ``[s, s + hop)`` with ``s < C``);
- raw events: every event at or after ``C`` (all on-time events are, because an
  accepted event's time is >= the watermark >= ``C``).

The frame of an event at ``t >= C`` is then the disjoint union of the tiles
starting at or after its frame start and the raw events in ``[frame start, t]``;
the kernels compute the raw part (:func:`featureflow.ops.rolling` with ``hop``),
this module merges it with the tiles. Results equal a one-pass
:func:`featureflow.features.event_features` over all events up to float rounding
(std/var merge partial moments with Chan's formula).

Only aggregates that merge from partials can be tiled; ``count_distinct`` cannot,
and a view using it keeps raw events (see :func:`compactable`). Pure functions of
Arrow tables: no I/O here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from featureflow import ops
from featureflow.ops._aggs import result_type
from featureflow.repo import StreamViewSpec
from featureflow.state_delta import APPEND, StateDelta

TILE_START = "tile_start_ns"
"""Column of a tile table: the tile's start, int64 epoch ns (a multiple of the hop)."""

# What each aggregation needs of a tile (its partial moments). count/sum/min/max
# come from the kernels over the values. The spread (std/var) is kept as moments
# about a reference value of the entity: "ref" (one of its values), "s1" = sum of
# (x - ref) and "m2" = sum of squared deviations from the mean (the kernels' sample
# variance times count - 1). Deviations from a nearby reference are small and
# exact, so merging them does not cancel the way sums of x and x^2 would.
_MOMENTS_OF = {
    "count": ("count",),
    "sum": ("count", "sum"),
    "mean": ("count", "sum"),
    "min": ("count", "min"),
    "max": ("count", "max"),
    "std": ("count", "ref", "s1", "m2"),
    "var": ("count", "ref", "s1", "m2"),
}
_PLAIN_MOMENTS = ("count", "sum", "min", "max")
_SPREAD_MOMENTS = ("ref", "s1", "m2")


def compactable(spec: StreamViewSpec) -> bool:
    """Whether the view's state can be folded into tiles.

    It needs a tiling hop, a positive watermark delay (without one any old event
    is accepted, so no tile is ever final) and aggregates that merge from partials.
    """
    return (
        spec.tile_hop_ns is not None
        and spec.watermark_ns > 0
        and all(agg.function in _MOMENTS_OF for agg in spec.aggregations)
    )


def compaction_bound_ns(spec: StreamViewSpec, watermark_ns: int) -> int:
    """``C``: events before it live in tiles, events at or after it stay raw (ns)."""
    assert spec.tile_hop_ns is not None
    return (watermark_ns // spec.tile_hop_ns) * spec.tile_hop_ns


def _moments(spec: StreamViewSpec, column: str) -> tuple[str, ...]:
    """The partial moments the aggregations of ``column`` need, in a fixed order."""
    functions = {agg.function for agg in spec.aggregations if agg.column == column}
    wanted = {moment for function in functions for moment in _MOMENTS_OF[function]}
    return tuple(m for m in (*_PLAIN_MOMENTS, *_SPREAD_MOMENTS) if m in wanted)


def _moment_column(column: str, moment: str) -> str:
    return f"{column}.{moment}"


def empty_tiles(spec: StreamViewSpec, key_type: pa.DataType) -> pa.Table:
    """A tile table without rows: join key, :data:`TILE_START`, one column per moment."""
    fields = [pa.field(spec.join_key, key_type), pa.field(TILE_START, pa.int64())]
    for column in spec.value_columns:
        for moment in _moments(spec, column):
            kind = pa.int64() if moment == "count" else pa.float64()
            fields.append(pa.field(_moment_column(column, moment), kind))
    return pa.schema(fields).empty_table()


def _as_float(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """float64 numpy of an Arrow column, NaN where null."""
    return np.asarray(pc.fill_null(pc.cast(values, pa.float64()), np.nan).to_numpy(), float)


def _m2_from(var: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Sum of squared deviations from the sample variance: 0 below two values."""
    return np.where(count >= 2, np.nan_to_num(var) * (count - 1), 0.0)


class _EntityReference:
    """One reference value per entity (its first non-null value; 0 if it has none),
    the shift of the spread moments."""

    def __init__(self, keys: pa.ChunkedArray | pa.Array, values: np.ndarray) -> None:
        self.key_values = pc.unique(keys)
        codes = pc.index_in(keys, self.key_values).to_numpy()
        present = np.flatnonzero(~np.isnan(values))
        self.by_code = np.zeros(len(self.key_values))
        found, first = np.unique(codes[present], return_index=True)
        self.by_code[found] = values[present[first]]
        self.per_row = self.by_code[codes]

    def of(self, keys: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """The reference of each key (all known)."""
        return self.by_code[pc.index_in(keys, self.key_values).to_numpy()]

    def shifted(self, values: np.ndarray) -> pa.Array:
        """``values - reference`` row by row, null where the value is null."""
        return pa.array(values - self.per_row, from_pandas=True)


def partials(events: pa.Table, spec: StreamViewSpec, event_ns_column: str = "event_ns") -> pa.Table:
    """One tile row per (entity, tile) holding events: their partial moments.

    Computed by the hopping kernel with ``size = step = hop`` (tumbling tiles).
    """
    assert spec.tile_hop_ns is not None
    hop = spec.tile_hop_ns
    key_type = events.schema.field(spec.join_key).type
    schema = empty_tiles(spec, key_type).schema
    if events.num_rows == 0:
        return schema.empty_table()
    keys, ts = events.column(spec.join_key), events.column(event_ns_column)
    columns: dict[str, pa.Array | pa.ChunkedArray | np.ndarray] = {}
    for column in spec.value_columns:
        moments = _moments(spec, column)
        plain = [m for m in moments if m in _PLAIN_MOMENTS]
        computed = ops.hopping(ts, events.column(column), hop, hop, plain, keys=keys)
        if not columns:  # tiles depend on keys and times only: the same for every column
            columns[spec.join_key] = computed.column("key")
            columns[TILE_START] = computed.column("window_start").cast(pa.int64())
        for moment in plain:
            columns[_moment_column(column, moment)] = computed.column(moment)
        if "m2" in moments:
            values = _as_float(events.column(column))
            reference = _EntityReference(keys, values)
            spread = ops.hopping(
                ts, reference.shifted(values), hop, hop, ["count", "mean", "var"], keys=keys
            )
            count = spread.column("count").to_numpy()
            columns[_moment_column(column, "ref")] = reference.of(spread.column("key"))
            columns[_moment_column(column, "s1")] = count * np.nan_to_num(
                _as_float(spread.column("mean"))
            )
            columns[_moment_column(column, "m2")] = _m2_from(_as_float(spread.column("var")), count)
    return pa.table(columns).cast(schema)


def compact(
    events: pa.Table,
    tiles: pa.Table | None,
    spec: StreamViewSpec,
    watermark_ns: int,
    event_ns_column: str = "event_ns",
) -> tuple[pa.Table, pa.Table]:
    """The state a future on-time event (time >= ``watermark_ns``) needs: (raw events, tiles).

    Events before the compaction bound are folded into tiles; tiles that end
    before every future frame (start < ``floor((watermark - W) / hop) * hop``
    for the largest W) are dropped.
    """
    bound, tiles_delta = compaction(events, spec, watermark_ns, event_ns_column)
    kept = events.filter(pc.greater_equal(events.column(event_ns_column), bound))
    return kept, tiles_delta.apply(tiles if tiles is not None and tiles.num_rows else None)


def compaction(
    events: pa.Table, spec: StreamViewSpec, watermark_ns: int, event_ns_column: str = "event_ns"
) -> tuple[int, StateDelta]:
    """:func:`compact` as a change: (the compaction bound, the tiles' delta).

    The raw events before the bound (ns) leave the state; the tile table gains the
    partials of ``events`` between the oldest tile any future frame reaches and
    the bound, and loses the tiles starting before that oldest one. The new
    partials all start at or after it (it is a multiple of the hop), so
    appending then cutting equals cutting then appending.
    """
    assert spec.tile_hop_ns is not None
    hop = spec.tile_hop_ns
    bound = compaction_bound_ns(spec, watermark_ns)
    oldest = ((watermark_ns - max(spec.windows_ns)) // hop) * hop
    ts = events.column(event_ns_column)
    folding = events.filter(pc.and_(pc.greater_equal(ts, oldest), pc.less(ts, bound)))
    closed = partials(folding, spec, event_ns_column)
    return bound, StateDelta(closed, APPEND, cut=oldest, cut_column=TILE_START)


class _TileSuffixes:
    """Per entity, the merged moments of its tiles from each tile to its last one.

    Tiles are sorted by (entity, start); :meth:`at` finds, per query, the
    entity's first tile starting at or after a frame start: the tiles of that
    frame (all tiles end before the compaction bound, so none is partly in it).
    """

    def __init__(self, tiles: pa.Table, spec: StreamViewSpec) -> None:
        assert spec.tile_hop_ns is not None
        self.hop = spec.tile_hop_ns
        order = pc.sort_indices(tiles, [(spec.join_key, "ascending"), (TILE_START, "ascending")])
        tiles = tiles.take(order)
        self.key_values = pc.unique(tiles.column(spec.join_key))
        self.codes = pc.index_in(tiles.column(spec.join_key), self.key_values).to_numpy()
        index = tiles.column(TILE_START).to_numpy() // self.hop
        self.first_index = int(index.min()) if len(index) else 0
        self.span = (int(index.max()) - self.first_index + 2) if len(index) else 1
        self.position = self.codes.astype(np.int64) * self.span + (index - self.first_index)
        self.moments = self._suffix_moments(tiles, spec)

    def _suffix_moments(self, tiles: pa.Table, spec: StreamViewSpec) -> dict[str, np.ndarray]:
        """Per tile, the moments of it and the entity's later tiles, keyed "column.moment".

        Spread moments are re-expressed about one reference per entity (its
        last tile's) so they add up: "shift" (that reference), "s1" = sum of
        (x - shift), "s2" = sum of (x - shift)^2 of the tiles' values.
        """
        last = np.append(self.codes[1:] != self.codes[:-1], True)[: len(self.codes)]
        frame: dict[str, np.ndarray] = {}
        for column in spec.value_columns:
            moments = _moments(spec, column)

            def moment(name: str, column: str = column) -> np.ndarray:
                return _as_float(tiles.column(_moment_column(column, name)))

            count = moment("count")
            frame[_moment_column(column, "count")] = count
            if "sum" in moments:
                frame[_moment_column(column, "sum")] = np.nan_to_num(moment("sum"))
            for name, fill in (("min", np.inf), ("max", -np.inf)):
                if name in moments:  # no value: neutral (the merge turns it back into null)
                    frame[_moment_column(column, name)] = np.nan_to_num(moment(name), nan=fill)
            if "m2" in moments:
                ref = moment("ref")
                shift = ref[np.flatnonzero(last)][self.codes]
                safe = np.where(count > 0, count, 1.0)
                mean = np.where(count > 0, (ref - shift) + moment("s1") / safe, 0.0)
                frame[_moment_column(column, "shift")] = shift
                frame[_moment_column(column, "s1")] = count * mean
                frame[_moment_column(column, "s2")] = moment("m2") + count * mean**2
        table = pd.DataFrame(frame)
        reverse = table.iloc[::-1]
        groups = reverse.groupby(self.codes[::-1], sort=False)
        suffix: dict[str, np.ndarray] = {}
        for name in table.columns:
            if name.endswith(".min"):
                values = groups[name].cummin()
            elif name.endswith(".max"):
                values = groups[name].cummax()
            elif name.endswith(".shift"):
                values = reverse[name]
            else:
                values = groups[name].cumsum()
            suffix[name] = values.to_numpy()[::-1]
        return suffix

    def at(self, keys: pa.ChunkedArray | pa.Array, frame_start_ns: np.ndarray) -> np.ndarray:
        """Index of the first tile in each query's frame; -1 where the frame has none."""
        if not len(self.position):
            return np.full(len(frame_start_ns), -1)
        codes = pc.index_in(keys, self.key_values)
        known = pc.is_valid(codes).to_numpy(zero_copy_only=False)
        code = pc.fill_null(codes, 0).to_numpy().astype(np.int64)
        index = -(-frame_start_ns // self.hop)  # first tile starting at or after the start
        offset = np.clip(index - self.first_index, 0, self.span - 1)
        found = np.searchsorted(self.position, code * self.span + offset, side="left")
        inside = found < len(self.position)
        found = np.where(inside, found, 0)
        hit = known & inside & (self.codes[found] == code)
        return np.where(hit, found, -1)


def _merge(
    function: str, raw: dict[str, np.ndarray], tile: dict[str, np.ndarray], has_tile: np.ndarray
) -> np.ndarray:
    """``function`` over frames from the moments of their raw part and of their tiles.

    NaN marks a null result (no value, or below two values for std/var).
    """
    n_tile = np.where(has_tile, tile["count"], 0.0)
    count = raw["count"] + n_tile
    empty = count == 0
    if function == "count":
        return count
    if function in ("sum", "mean"):
        total = np.nan_to_num(raw["sum"]) + np.where(has_tile, tile["sum"], 0.0)
        result = total if function == "sum" else total / np.where(empty, 1, count)
        return np.where(empty, np.nan, result)
    if function in ("min", "max"):
        tiles = np.where(n_tile > 0, tile[function], np.nan)
        return (np.fmin if function == "min" else np.fmax)(raw[function], tiles)
    # std / var: Chan's merge of (count, mean, m2) of both parts; each mean is
    # relative to its own reference, so the difference of means stays exact.
    safe_tile = np.where(n_tile > 0, n_tile, 1.0)
    tile_mean = np.where(n_tile > 0, tile["s1"] / safe_tile, 0.0)
    tile_m2 = np.where(n_tile > 0, tile["s2"] - tile["s1"] * tile_mean, 0.0)
    both = (n_tile > 0) & (raw["count"] > 0)
    delta = np.where(
        both, (np.nan_to_num(raw["mean"]) - tile_mean) + (raw["ref"] - tile["shift"]), 0.0
    )
    m2 = raw["m2"] + tile_m2 + delta**2 * n_tile * raw["count"] / np.where(empty, 1, count)
    var = np.where(count >= 2, np.maximum(m2, 0.0) / np.where(count >= 2, count - 1, 1), np.nan)
    return var if function == "var" else np.sqrt(var)


def _raw_moments(
    events: pa.Table,
    spec: StreamViewSpec,
    column: str,
    windows: list[int],
    event_ns_column: str,
) -> dict[int, dict[str, np.ndarray]]:
    """Per window, the moments of each event's frame over ``events`` (the kernels)."""
    keys, ts = events.column(spec.join_key), events.column(event_ns_column)
    labels = [f"{window}ns" for window in windows]
    moments = _moments(spec, column)
    plain = [m for m in moments if m in _PLAIN_MOMENTS]
    computed = ops.rolling(
        ts, events.column(column), labels, plain, keys=keys, hop=spec.tile_hop_ns
    )
    spread = None
    if "m2" in moments:
        values = _as_float(events.column(column))
        reference = _EntityReference(keys, values)
        spread = ops.rolling(
            ts, reference.shifted(values), labels, ["mean", "var"], keys=keys, hop=spec.tile_hop_ns
        )
    per_window: dict[int, dict[str, np.ndarray]] = {}
    for window, label in zip(windows, labels, strict=True):
        raw = {m: _as_float(computed.column(f"{m}_{label}")) for m in plain}
        if spread is not None:
            raw["ref"] = reference.per_row
            raw["mean"] = _as_float(spread.column(f"mean_{label}"))
            raw["m2"] = _m2_from(_as_float(spread.column(f"var_{label}")), raw["count"])
        per_window[window] = raw
    return per_window


def event_features(
    events: pa.Table, tiles: pa.Table, spec: StreamViewSpec, event_ns_column: str = "event_ns"
) -> pa.Table:
    """:func:`featureflow.features.event_features` of a tiled view whose state is split.

    Args:
        events: the raw events, all at or after the compaction bound of ``tiles``.
        tiles: :func:`partials` of the earlier events (before that bound).
    Returns:
        The columns and values ``event_features`` over all events (earlier and
        raw) would give for these events.
    """
    assert spec.tile_hop_ns is not None
    keys = events.column(spec.join_key)
    ts = events.column(event_ns_column).to_numpy()
    suffixes = _TileSuffixes(tiles, spec)
    outputs: dict[str, pa.Array] = {}
    for column in spec.value_columns:
        wanted = [agg for agg in spec.aggregations if agg.column == column]
        windows = sorted({agg.window_ns for agg in wanted})
        raw_of = _raw_moments(events, spec, column, windows, event_ns_column)
        for window in windows:
            frame_start = ((ts - window) // spec.tile_hop_ns) * spec.tile_hop_ns
            first = suffixes.at(keys, frame_start)
            has_tile = first >= 0
            at = np.where(has_tile, first, 0)
            tile = {
                name.split(".", 1)[1]: values[at] if len(values) else np.zeros(len(at))
                for name, values in suffixes.moments.items()
                if name.startswith(f"{column}.")
            }
            for agg in (a for a in wanted if a.window_ns == window):
                merged = _merge(agg.function, raw_of[window], tile, has_tile)
                kind = result_type(agg.function, events.schema.field(column).type)
                outputs[agg.output_name] = pa.array(merged, from_pandas=True).cast(kind)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        spec.join_key: keys,
        event_ns_column: events.column(event_ns_column),
    }
    columns.update({agg.output_name: outputs[agg.output_name] for agg in spec.aggregations})
    return pa.table(columns)
