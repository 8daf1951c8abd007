"""Read a topic once through Spark's Kafka source and drop it: ``bench/stream.py``'s
untimed broker warm-up, run in a JVM of its own so that the timed runs' JVMs and memory
start as they would without it.

Usage: ``python bench/_warm_broker.py BOOTSTRAP TOPIC MAX_OFFSETS_PER_TRIGGER``; prints
the records read and the read's seconds.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stream_peers import run_read_floor

from featureflow.spark.session import build_session


def main(bootstrap: str, topic: str, max_offsets_per_trigger: int) -> None:
    spark = build_session("bench-warm-broker", master="local[2]")
    try:
        with tempfile.TemporaryDirectory(prefix="ff-warm-broker-") as checkpoint:
            run = run_read_floor(spark, bootstrap, topic, Path(checkpoint), max_offsets_per_trigger)
    finally:
        spark.stop()
    print(f"{run.events} records in {run.wall_s:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
