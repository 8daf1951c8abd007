"""featureflow.explore: features in a notebook, computed by the stream job's own code path.

- :mod:`~featureflow.explore.load` (IO): events from Kafka, Parquet or the
  sample generator; a view's spec from the Feast repo; the job's history.
- :mod:`~featureflow.explore.compute`: a view's features
  (:func:`featureflow.features.event_features`, as in the job), ad-hoc
  rolling windows and sessions (:mod:`featureflow.ops`), windows compared.
- :mod:`~featureflow.explore.arrival`: out-of-order and late events.
- :mod:`~featureflow.explore.plots`: matplotlib figures.
- :mod:`~featureflow.explore.skew`: the no-skew check against the job's history.
"""

from featureflow.explore.arrival import arrival_flags, late_share
from featureflow.explore.compute import (
    compare_windows,
    entity_events,
    entity_sessions,
    most_active,
    view_features,
    window_features,
)
from featureflow.explore.load import (
    EventSample,
    from_generator,
    from_kafka,
    from_parquet,
    has_history,
    history,
    history_root,
    kafka_has_records,
    view_spec,
)
from featureflow.explore.skew import SkewError, SkewReport, check_no_skew

__all__ = [
    "EventSample",
    "SkewError",
    "SkewReport",
    "arrival_flags",
    "check_no_skew",
    "compare_windows",
    "entity_events",
    "entity_sessions",
    "from_generator",
    "from_kafka",
    "from_parquet",
    "has_history",
    "history",
    "history_root",
    "kafka_has_records",
    "late_share",
    "most_active",
    "view_features",
    "view_spec",
    "window_features",
]
