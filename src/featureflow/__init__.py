"""featureflow: real-time feature engineering on Kafka, Spark, Mojo and Feast.

Layers, bottom up (each depends only on the ones above it in this list):

- ``featureflow.ops``     window math: Mojo kernels and the numpy reference
- ``featureflow.events``  event formats: generation and parsing to Arrow
- ``featureflow.infra``   local services: Maven jars, the Kafka broker
- ``featureflow.spark``   Spark glue: sessions, the streaming pipeline
- ``featureflow.repo``    the Feast repo as featureflow sees it
- ``featureflow.cli``     the ``featureflow`` command
"""

__version__ = "0.1.0"
