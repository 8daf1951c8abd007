"""featureflow: real-time feature engineering on Kafka, Spark, Mojo and Feast.

Layers, bottom up (each depends only on the ones above it in this list):

- ``featureflow.ops``     window math: Mojo kernels and the numpy reference
- ``featureflow.events``  event formats: generation and parsing to Arrow
- ``featureflow.infra``   local services: Maven jars, the Kafka broker
- ``featureflow.spark``   Spark glue: sessions, the streaming pipeline
- ``featureflow.repo``    the Feast repo as featureflow sees it
- ``featureflow.features`` a view's features from its events (the one code path)
- ``featureflow.backfill`` / ``featureflow.training``  backfills and point-in-time training sets
- ``featureflow.explore`` notebook exploration on the same kernels
- ``featureflow.cli``     the ``featureflow`` command

``featureflow.training_set`` is :func:`featureflow.training.training_set`.
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Lazy, so ``import featureflow`` stays light (no Feast, Spark or kernels).
    if name == "training_set":
        from featureflow.training import training_set

        return training_set
    msg = f"module 'featureflow' has no attribute {name!r}"
    raise AttributeError(msg)
