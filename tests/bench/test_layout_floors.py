"""The layout benchmark's report (bench/layout_floors.py): the warm round's table, each
layout set against the job's own (the shuffle floor) of that round."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"

# bench/ first on sys.path while loading (the benchmark imports its helpers from there),
# then put back, as in test_stream_report
_PATH = list(sys.path)
sys.path.insert(0, str(BENCH))
try:
    _spec = importlib.util.spec_from_file_location("layout_floors", BENCH / "layout_floors.py")
    assert _spec is not None and _spec.loader is not None
    layout_floors = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = layout_floors
    _spec.loader.exec_module(layout_floors)
finally:
    sys.path[:] = _PATH


def _row(round_index: int, key: str, wall_s: float) -> dict[str, object]:
    return {"round": round_index, "key": key, "system": f"{key} system", "events": 1_000,
            "wall_s": wall_s, "events_per_s": round(1_000 / wall_s), "cpu_s": 2 * wall_s,
            "cpu": {"jit": 0.5, "jvm": wall_s, "python_workers": 0.25}}  # fmt: skip


def _record() -> dict[str, object]:
    return {
        "machine": "x86_64, 2 cores", "recorded": "2026-12-07T08:45:08+00:00",
        "load_average": [[0.5, 1.0, 1.0], [1.0, 1.0, 1.0]],
        "scale": {"events": 1_000, "users": 10, "entities": 9,
                  "max_offsets_per_trigger": 100, "rounds": 2},
        "keys": {"entities": 9, "in_several_partitions": 1},
        "rows": [_row(0, "shuffle", 30.0), _row(0, "per_partition", 20.0),
                 _row(1, "shuffle", 20.0), _row(1, "per_partition", 10.0)],
    }  # fmt: skip


def test_the_table_is_the_warm_round_against_that_rounds_shuffle_floor() -> None:
    text = layout_floors.render(_record())
    table = text.split("Every round:")[0]

    assert "| per_partition system | 10.00 | 100 | 20.0 | 0.5 | 10.0 | 0.2 | 0.50x |" in table
    assert "| shuffle system | 20.00 | 50 | 40.0 | 0.5 | 20.0 | 0.2 | 1.00x |" in table
    assert "30.00" not in table  # the cold round is listed below, not in the table
    assert "| 0 | shuffle system | 30.00 | 60.0 |" in text
    assert "1 of 9 keys in more than one partition" in text
