"""featureflow.tiles: a tiled view's features from tile partials plus raw events."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from duckdb_oracle import END_NS, EXAMPLE_SPEC, events_table

from featureflow import features, tiles
from featureflow.events import sample

HOP_NS = 300 * 10**9
TILED = dataclasses.replace(EXAMPLE_SPEC, tile_hop_ns=HOP_NS, watermark_ns=HOP_NS)


@pytest.mark.parametrize("key_type", [pa.int64(), pa.string()])
def test_tiles_plus_raw_events_equal_one_pass(key_type: pa.DataType) -> None:
    events = events_table(sample.generate(3000, users=20, seed=3, end_ns=END_NS, span_s=6 * 3600))
    events = events.set_column(0, "user_id", pc.cast(events.column("user_id"), key_type))
    events = events.take(pc.sort_indices(events, [("event_ns", "ascending")]))
    cut = 2000
    watermark = events.column("event_ns")[cut].as_py()
    raw, partials = tiles.compact(events.slice(0, cut), None, TILED, watermark)
    assert partials.num_rows > 0 and partials.schema.field("user_id").type == key_type
    assert pc.min(raw.column("event_ns")).as_py() >= tiles.compaction_bound_ns(TILED, watermark)
    pending = pa.concat_tables([raw, events.slice(cut)])
    got = tiles.event_features(pending, partials, TILED).slice(raw.num_rows)
    want = features.event_features(events, TILED).slice(cut)
    for name in TILED.feature_names:
        np.testing.assert_allclose(
            np.array(got.column(name).to_pylist(), float),
            np.array(want.column(name).to_pylist(), float),
            rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name,
        )  # fmt: skip


def test_only_mergeable_views_with_a_watermark_are_compacted() -> None:
    assert tiles.compactable(TILED)
    assert not tiles.compactable(EXAMPLE_SPEC)  # no hop
    assert not tiles.compactable(dataclasses.replace(TILED, watermark_ns=0))
    distinct = dataclasses.replace(
        TILED,
        aggregations=(dataclasses.replace(TILED.aggregations[0], function="count_distinct"),),
    )
    assert not tiles.compactable(distinct)
