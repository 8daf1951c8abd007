"""featureflow's exceptions survive pickling: an executor's state host raises a task's
exception again in the worker that sent the task (:mod:`featureflow.spark.state_host`)."""

from __future__ import annotations

import pickle

import pytest

from featureflow import errors
from featureflow.schema.report import Report, Row, Status

BUILT = [
    errors.OnlineStoreUnavailableError("Redis", "timed out after 10 s"),
    errors.EventError("event_timestamp", "not an ISO-8601 time"),
    errors.SchemaParseError("schemas/user_txn_stats.mojo", 12, "a field type"),
    errors.SchemaMismatchError(
        "the schema gate refused user_txn_stats",
        Report((Row(Status.FAIL, "user_txn_stats", "dtype", "amount", "Float64", "Int64"),)),
    ),
    errors.CheckpointLockedError("held by pid 12", {"host": "h", "pid": 12}),
    errors.StateError("state unreadable"),
]


@pytest.mark.parametrize("error", BUILT, ids=lambda e: type(e).__name__)
def test_an_exception_comes_back_whole_from_a_pickle(error: Exception) -> None:
    error.add_note("in the executor's state host: ...")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)  # its own attributes and its notes


def test_every_exception_with_its_own_arguments_is_covered() -> None:
    own_init = {
        cls for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.FeatureflowError)
        and "__init__" in vars(cls)
    }  # fmt: skip
    assert own_init <= {type(error) for error in BUILT}
