"""Backfill: historical events -> the stream job's kernels -> Feast offline (and online) store.

    spark-submit jobs/backfill.py --repo feature_repo --start 2026-11-29 --end 2026-11-30 \
        [--source PATH | --from-kafka] [--offline-path DIR] [--materialize] [--master URL]

No --jars/--packages needed (``--from-kafka`` gets Spark's Kafka connector
itself). Options: ``--help``.
"""

import sys

from featureflow.backfill.job import main

if __name__ == "__main__":
    sys.exit(main())
