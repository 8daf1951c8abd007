"""Real-time features: Kafka -> Spark Structured Streaming -> Mojo kernels -> Feast online store.

    spark-submit jobs/realtime.py --repo feature_repo --checkpoint /tmp/ff-ckpt [--available-now]

No --jars/--packages needed: the job puts Spark's Kafka connector on the
classpath itself. Options: ``--help``.
"""

import sys

from featureflow.spark.job import main

if __name__ == "__main__":
    sys.exit(main())
