"""Per-Kafka-partition watermarks: no on-time event is late, however partitions are read."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from featureflow.spark.watermarks import PartitionWatermarks

DELAY = 300
NEVER_IDLE = 10**18


@st.composite
def partitions_and_reads(draw: st.DrawFn) -> tuple[list[list[int]], list[list[int]]]:
    """Per partition, event times in order but for displacements within the delay, and
    per micro-batch how many records each partition delivers. As Spark's Kafka source
    (``maxOffsetsPerTrigger`` prorated by lag, rounding small shares up) does, every
    partition with records left delivers at least one, but by a share of offsets: the
    partitions' event times drift apart."""
    count = draw(st.integers(1, 4))
    partitions = []
    for _ in range(count):
        start = draw(st.integers(0, 5_000))
        steps = draw(st.lists(st.integers(0, 400), min_size=1, max_size=40))
        times, now = [], start
        for step in steps:
            now += step
            times.append(now - draw(st.integers(0, DELAY)))  # out of order by <= the delay
        partitions.append(times)
    left = [len(times) for times in partitions]
    reads = []
    while any(left):
        take = [draw(st.integers(1, n)) if n else 0 for n in left]
        reads.append(take)
        left = [n - t for n, t in zip(left, take, strict=True)]
    return partitions, reads


@settings(max_examples=300, deadline=None)
@given(partitions_and_reads())
def test_no_on_time_event_is_late_however_unevenly_partitions_are_read(
    case: tuple[list[list[int]], list[list[int]]],
) -> None:
    partitions, reads = case
    marks = PartitionWatermarks(DELAY)
    offsets = [0] * len(partitions)
    for clock, take in enumerate(reads):
        batch_max = {}
        for p, n in enumerate(take):
            events = partitions[p][offsets[p] : offsets[p] + n]
            offsets[p] += n
            if events:
                if marks.watermark_ns is not None:
                    assert min(events) >= marks.watermark_ns, (p, events, marks)
                batch_max[p] = max(events)
        before = marks.watermark_ns
        marks = marks.advance(batch_max, clock_ns=clock, idle_timeout_ns=NEVER_IDLE)
        assert before is None or marks.watermark_ns >= before  # never goes back


def test_the_view_watermark_is_the_minimum_over_partitions() -> None:
    marks = PartitionWatermarks(DELAY).advance({0: 10_000, 1: 2_000}, 0, NEVER_IDLE)
    assert marks.watermark_ns == 2_000 - DELAY
    # Spark's global watermark would be 10_000 - DELAY: partition 1's next events late
    marks = marks.advance({1: 2_500}, 1, NEVER_IDLE)
    assert marks.watermark_ns == 2_500 - DELAY
    assert marks.lag_s(clock_ns=20_000) == {
        "0": (20_000 - 10_000 + DELAY) / 1e9,
        "1": (20_000 - 2_500 + DELAY) / 1e9,
    }


def test_an_idle_partition_stops_holding_the_watermark_back_and_rejoins() -> None:
    timeout = 60
    marks = PartitionWatermarks(DELAY).advance({0: 1_000, 1: 500}, 0, idle_timeout_ns=timeout)
    marks = marks.advance({0: 5_000}, clock_ns=60, idle_timeout_ns=timeout)
    assert (marks.watermark_ns, marks.idle) == (500 - DELAY, ())  # quiet for exactly the timeout
    marks = marks.advance({0: 6_000}, clock_ns=61, idle_timeout_ns=timeout)
    assert (marks.watermark_ns, marks.idle) == (6_000 - DELAY, (1,))
    # partition 1 rejoins: it holds the watermark again, which never goes back
    marks = marks.advance({1: 5_800}, clock_ns=62, idle_timeout_ns=timeout)
    assert (marks.watermark_ns, marks.idle) == (6_000 - DELAY, ())
    marks = marks.advance({0: 9_000, 1: 6_100}, clock_ns=63, idle_timeout_ns=timeout)
    assert marks.watermark_ns == 6_100 - DELAY
    # every partition idle: the watermark stays where it was
    marks = marks.advance({}, clock_ns=10_000, idle_timeout_ns=timeout)
    assert (marks.watermark_ns, marks.idle) == (6_100 - DELAY, (0, 1))


def test_json_round_trip() -> None:
    marks = PartitionWatermarks(DELAY).advance({3: 7, 0: 9}, 5, 1).advance({}, 10, 1)
    assert PartitionWatermarks.from_json(marks.to_json()) == marks
