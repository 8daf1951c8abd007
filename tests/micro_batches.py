"""A stream cut into micro-batches as the job judges them, for tests without Spark."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc


def micro_batches(
    events: pa.Table, cuts: list[int], delay_ns: int
) -> Iterator[tuple[pa.Table, int | None, int | None]]:
    """(accepted new events, watermark before, watermark after) per micro-batch, in ns.

    ``events`` are cut at the row indexes ``cuts``; a batch drops the events before
    the watermark it is judged by (the job's dead letters). The watermark after a
    batch is the latest event time seen minus ``delay_ns``, never going back;
    None until an event was seen.
    """
    before: int | None = None
    bounds = [0, *sorted(set(cuts)), events.num_rows]
    for lo, hi in itertools.pairwise(bounds):
        batch = events.slice(lo, hi - lo)
        if before is not None:  # late events are dead letters
            batch = batch.filter(pc.greater_equal(batch.column("event_ns"), before))
        seen = [before + delay_ns] if before is not None else []
        if batch.num_rows:
            seen.append(pc.max(batch.column("event_ns")).as_py())
        after = max(seen) - delay_ns if seen else None
        yield batch, before, after
        before = after
