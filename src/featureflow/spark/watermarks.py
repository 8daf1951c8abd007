"""Event-time watermarks per Kafka partition, as Flink's Kafka source keeps them.

Each Kafka partition ``p`` has its own watermark: the largest event time
accepted from it minus the source's ``watermark_delay_threshold``. The view's
watermark is the minimum over its *active* partitions, and never goes back:

    watermark(b + 1) = max(watermark(b), min over active p of (max_event_ns[p] - delay))

A partition is active until it has delivered no record for longer than the
idle timeout (measured on the driver's clock at each micro-batch); an idle
partition stops holding the watermark back and rejoins as soon as it
delivers records again. Only partitions that have delivered at least one
accepted event are known.

Why not Spark's single global watermark (largest event time seen across all
partitions minus the delay): Spark's Kafka source advances every partition
by a share of *offsets* per trigger (``maxOffsetsPerTrigger``), not of event
time, and partitions differ in size and rate, so one partition's events can
lag another's by more than the delay although each partition is in order.
A global watermark then drops them as late. The minimum over partitions only
calls an event late when its own partition (and every other active one) has
moved past it. The price: a partition that is slow, but not idle, holds the
watermark (and so state retention and session closing) back.

Rejoining after idleness: events of a partition that was idle are judged
against the watermark the others moved on, so a partition that comes back
with old events has them dead-lettered as late, as in Flink.

Everything here is pure: the stream job (:mod:`featureflow.spark.pipeline`)
saves :meth:`PartitionWatermarks.to_json` with each micro-batch's state
(:mod:`featureflow.spark.state`), so a restart resumes it exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_IDLE_TIMEOUT_NS = 180 * 10**9
"""``--idle-partition-timeout``: 3 minutes without records makes a partition idle."""
DEFAULT_FUTURE_SKEW_NS = 3_600 * 10**9
"""``--max-future-skew``: events up to 1 hour ahead of the driver's clock are accepted."""


@dataclass(frozen=True)
class PartitionProgress:
    """What the watermark needs of one Kafka partition."""

    max_event_ns: int
    """The largest event time (epoch ns) accepted from the partition."""
    last_records_clock_ns: int
    """The driver's clock (epoch ns) at the last micro-batch that had records from it."""


@dataclass(frozen=True)
class PartitionWatermarks:
    """The per-partition event-time progress of one view after a micro-batch.

    ``watermark_ns`` is the watermark the *next* micro-batch judges its events
    against (events strictly older are late); None until an event was accepted.
    """

    delay_ns: int
    partitions: Mapping[int, PartitionProgress] = field(default_factory=dict)
    watermark_ns: int | None = None
    idle: tuple[int, ...] = ()
    """Partitions that were idle (did not hold the watermark back) at the last advance."""

    def advance(
        self, batch_max_ns: Mapping[int, int], clock_ns: int, idle_timeout_ns: int
    ) -> PartitionWatermarks:
        """The progress after a micro-batch.

        Args:
            batch_max_ns: per Kafka partition, the largest event time (ns) accepted
                in the batch (partitions without accepted events are left out).
            clock_ns: the driver's clock at the batch (epoch ns).
            idle_timeout_ns: a partition whose last records are older than this
                (``clock_ns - last_records_clock_ns > idle_timeout_ns``) is idle.
        """
        partitions = dict(self.partitions)
        for partition, max_ns in batch_max_ns.items():
            before = partitions.get(partition)
            partitions[partition] = PartitionProgress(
                max_ns if before is None else max(before.max_event_ns, max_ns), clock_ns
            )
        idle = tuple(
            sorted(
                p
                for p, progress in partitions.items()
                if clock_ns - progress.last_records_clock_ns > idle_timeout_ns
            )
        )
        active = [progress for p, progress in partitions.items() if p not in idle]
        watermark = self.watermark_ns
        if active:
            candidate = min(progress.max_event_ns for progress in active) - self.delay_ns
            watermark = candidate if watermark is None else max(watermark, candidate)
        return PartitionWatermarks(self.delay_ns, partitions, watermark, idle)

    def lag_s(self, clock_ns: int) -> dict[str, float]:
        """Per partition (its number as text): ``clock_ns`` minus the partition's own
        watermark (largest event time minus the delay), in seconds."""
        return {
            str(p): (clock_ns - (progress.max_event_ns - self.delay_ns)) / 1e9
            for p, progress in sorted(self.partitions.items())
        }

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable form (what the state store saves)."""
        return {
            "delay_ns": self.delay_ns,
            "watermark_ns": self.watermark_ns,
            "idle": list(self.idle),
            "partitions": {
                str(p): [progress.max_event_ns, progress.last_records_clock_ns]
                for p, progress in sorted(self.partitions.items())
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionWatermarks:
        """The inverse of :meth:`to_json`."""
        partitions = {
            int(p): PartitionProgress(int(values[0]), int(values[1]))
            for p, values in data["partitions"].items()
        }
        watermark = data["watermark_ns"]
        return cls(
            int(data["delay_ns"]),
            partitions,
            None if watermark is None else int(watermark),
            tuple(int(p) for p in data.get("idle", ())),
        )
