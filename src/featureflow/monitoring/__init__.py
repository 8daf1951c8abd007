"""Watching a running job: its consumer lag, and the ``featureflow status`` view of its metrics.

- :mod:`featureflow.monitoring.lag`     consumer lag per Kafka partition, from Spark's progress
- :mod:`featureflow.monitoring.scrape`  the job's Prometheus text as per-view snapshots
- :mod:`featureflow.monitoring.screen`  a snapshot as an 80-column terminal screen
"""
