"""Spark glue: sessions with the Kafka connector, event parsing, the streaming pipeline.

Nothing here computes windows: the math is :mod:`featureflow.ops`, called on
executors inside Arrow UDFs (``mapInArrow``).
"""
