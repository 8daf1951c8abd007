"""The outage rule: which failures restart a query, the backoff, the budget, the restart loop."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from featureflow.errors import OnlineStoreUnavailableError
from featureflow.spark.supervisor import RetryPolicy, SupervisedQuery, classify

policies = st.builds(
    RetryPolicy,
    budget_s=st.floats(0, 3600),
    initial_s=st.floats(0.01, 10),
    factor=st.floats(1, 4),
    max_delay_s=st.floats(10, 120),
)


@given(policies, st.integers(0, 200))
def test_delays_grow_from_initial_to_the_cap(policy: RetryPolicy, restarts: int) -> None:
    delay = policy.delay_s(restarts)
    assert policy.initial_s <= delay <= policy.max_delay_s
    assert policy.delay_s(restarts + 1) >= delay
    if restarts == 0:
        assert delay == policy.initial_s


@given(policies, st.floats(0, 7200), st.integers(0, 50))
def test_a_restart_is_scheduled_only_within_the_budget(
    policy: RetryPolicy, elapsed: float, restarts: int
) -> None:
    start = 1000.0
    at = policy.next_restart(start, start + elapsed, restarts)
    delay = policy.delay_s(restarts)
    if elapsed + delay <= policy.budget_s:
        assert at == start + elapsed + delay
    else:
        assert at is None


@given(policies)
def test_an_outage_without_end_gives_up_after_the_budget(policy: RetryPolicy) -> None:
    """Failing at once after every restart: the restarts stop within the budget."""
    now, restarts = 0.0, 0
    while (at := policy.next_restart(0.0, now, restarts)) is not None:
        now, restarts = at, restarts + 1
        assert now <= policy.budget_s
    assert now + policy.delay_s(restarts) > policy.budget_s


def test_default_backoff_is_1_2_4_up_to_30_s() -> None:
    policy = RetryPolicy()
    assert [policy.delay_s(k) for k in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert policy.budget_s == 300


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"budget_s": -1}, "budget"), ({"initial_s": 0}, "backoff"), ({"factor": 0.5}, "backoff"),
     ({"initial_s": 5, "max_delay_s": 1}, "backoff")],
)  # fmt: skip
def test_bad_policies_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)


def _spark_trace(python_error: BaseException) -> str:
    """A failed query's text as Spark gives it: JVM frames around a Python traceback."""
    return (
        "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function\n"
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 3 in stage "
        "7.0 failed 1 times\norg.apache.spark.api.python.PythonException: Traceback (most "
        'recent call last):\n  File "online_sink.py", line 40, in write_online\n'
        f"{type(python_error).__module__}.{type(python_error).__name__}: {python_error}\n"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException"
    )


@pytest.mark.parametrize(
    ("text", "service"),
    [
        (_spark_trace(OnlineStoreUnavailableError(
            "Redis", "Redis write to 127.0.0.1:6379 failed after 0 entities: timed out")),
         "Redis"),
        (_spark_trace(OnlineStoreUnavailableError(
            "SQLite", "SQLite write to 'p_v' in /x.db failed: database is locked")), "SQLite"),
        ("org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node "
         "assignment. Call: listOffsets on broker 1", "Kafka"),
        ("java.lang.IllegalStateException: Failed to get records for spark-kafka-source-1 "
         "t-0 1200 after polling for 5000", "Kafka"),
        ("org.apache.kafka.common.errors.TimeoutException: Timeout of 5000ms expired before "
         "the position for partition t-1 could be determined", "Kafka"),
        ("featureflow.errors.DeadLetterError: 3 of 3 dead letters to 't.dlq' were not "
         "acknowledged by 127.0.0.1:9092 within 61 s; first error: KafkaError{code="
         "_MSG_TIMED_OUT,val=-192,str=\"Local: Message timed out\"}", "Kafka"),
    ],
)  # fmt: skip
def test_transient_failures_name_their_service(text: str, service: str) -> None:
    outage = classify(text)
    assert outage is not None
    assert outage.service == service
    assert outage.what and outage.check
    assert len(outage.what) <= 300


@pytest.mark.parametrize(
    "text",
    [
        _spark_trace(ValueError("boom")),
        "featureflow.errors.StateError: the window state file /c/part-0/batch-3.arrow is "
        "truncated or unreadable (Timeout of 5000ms expired)",
        "featureflow.errors.SchemaMismatchError: the gate refused user_txn_stats",
        "featureflow.errors.OnlineStoreError: table 'p_v' is missing: run `feast apply`",
        "org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed "
        "(org.apache.kafka.common.errors.TimeoutException later)",
        "featureflow.errors.DeadLetterError: 0 of 2 dead letters to 't.dlq' were not "
        "acknowledged by b:9093 within 61 s; first error: KafkaError{code="
        "SASL_AUTHENTICATION_FAILED,val=58,str=\"SASL authentication error\"}",
        "",
    ],
)
def test_other_failures_stop_the_job(text: str) -> None:
    assert classify(text) is None


@given(st.text(max_size=400))
def test_classify_never_raises(text: str) -> None:
    outage = classify(text)
    assert outage is None or outage.service in {"Kafka", "Redis", "SQLite"} or outage.what


# A fake query and processor: SupervisedQuery's loop with a fake clock, no Spark.


@dataclass
class FakeView:
    counters: list[int] = field(default_factory=list)


@dataclass
class FakeProcessor:
    views: list[FakeView] = field(default_factory=lambda: [FakeView()])
    last_batch_id: int | None = None
    idle: threading.Event = field(default_factory=threading.Event)


@dataclass
class FakeQuery:
    name: str = "featureflow_v"
    isActive: bool = True
    error: str | None = None
    stopped: bool = False

    def exception(self) -> str | None:
        return self.error

    def stop(self) -> None:
        self.stopped = True
        self.isActive = False


KAFKA_DOWN = "org.apache.kafka.common.errors.TimeoutException: Call: listOffsets"


class Runs:
    """Starts hand out fresh fake queries; the test decides how each one ends."""

    def __init__(self) -> None:
        self.started: list[tuple[FakeQuery, FakeProcessor]] = []

    def __call__(self) -> tuple[FakeQuery, FakeProcessor]:
        run = (FakeQuery(), FakeProcessor())
        self.started.append(run)
        return run  # type: ignore[return-value]

    def fail(self, text: str = KAFKA_DOWN) -> None:
        query = self.started[-1][0]
        query.isActive, query.error = False, text


def test_restarts_with_backoff_then_recovers_and_keeps_counters() -> None:
    now = [0.0]
    runs = Runs()
    supervised = SupervisedQuery(runs, RetryPolicy(budget_s=60), clock=lambda: now[0])  # type: ignore[arg-type]
    runs.started[0][1].views[0].counters.append(7)
    runs.fail()
    assert supervised.poll()  # restart scheduled in 1 s
    assert len(runs.started) == 1
    now[0] = 0.5
    assert supervised.poll() and len(runs.started) == 1
    now[0] = 1.0
    assert supervised.poll() and len(runs.started) == 2
    assert runs.started[1][1].views[0].counters == [7]  # carried over
    runs.fail()
    now[0] = 1.1
    assert supervised.poll()
    now[0] = 3.1  # the second restart waits 2 s
    assert supervised.poll() and len(runs.started) == 3
    runs.started[2][1].last_batch_id = 12  # a batch completed: the outage is over
    now[0] = 9.0
    assert supervised.poll()
    assert supervised.recoveries == [("Kafka", 9.0, 2)]
    assert supervised.outage is None
    runs.fail()  # a new outage starts over at 1 s
    now[0] = 100.0
    assert supervised.poll()
    assert supervised.restart_at == 101.0


def test_gives_up_when_the_budget_is_spent() -> None:
    now = [0.0]
    runs = Runs()
    supervised = SupervisedQuery(runs, RetryPolicy(budget_s=5), clock=lambda: now[0])  # type: ignore[arg-type]
    while True:
        runs.fail()
        if not supervised.poll():
            break
        assert supervised.restart_at is not None
        now[0] = supervised.restart_at
        assert supervised.poll()
    assert len(runs.started) == 3  # restarts at 1 s and 3 s; the next (7 s) is past 5 s
    assert supervised.failure is not None
    assert "Kafka still unavailable after 3.0 s" in supervised.failure
    assert "--retry-budget" in supervised.failure


def test_a_permanent_failure_stops_at_once() -> None:
    runs = Runs()
    supervised = SupervisedQuery(runs, RetryPolicy())  # type: ignore[arg-type]
    runs.fail("featureflow.errors.StateError: unreadable")
    assert not supervised.poll()
    assert supervised.failure == "featureflow.errors.StateError: unreadable"
    assert len(runs.started) == 1


def test_a_clean_end_after_a_restart_ends_the_outage() -> None:
    now = [0.0]
    runs = Runs()
    supervised = SupervisedQuery(runs, RetryPolicy(), clock=lambda: now[0])  # type: ignore[arg-type]
    runs.fail()
    supervised.poll()
    now[0] = 1.0
    supervised.poll()
    runs.started[-1][0].isActive = False  # availableNow: drained, no error
    now[0] = 4.0
    assert not supervised.poll()
    assert supervised.failure is None
    assert supervised.recoveries == [("Kafka", 4.0, 1)]


UNKNOWN_REASON = (
    "org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 20.0 "
    "failed 1 times, most recent failure: Lost task 1.0 (TID 51): UnknownReason"
)


def test_an_unrecognised_failure_while_the_brokers_were_down_is_a_kafka_outage() -> None:
    outage = classify(UNKNOWN_REASON, kafka_was_down=True)
    assert outage is not None and outage.service == "Kafka"
    assert "while the brokers were unreachable" in outage.what
    assert classify(UNKNOWN_REASON) is None
    assert classify("featureflow.errors.StateError: unreadable", kafka_was_down=True) is None


def test_the_watch_sees_an_address_that_refuses_connections() -> None:
    import socket

    from local_processes import free_port

    from featureflow.spark.supervisor import ReachabilityWatch

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        up = ReachabilityWatch.of_bootstrap([f"127.0.0.1:{free_port()},127.0.0.1:{port}"])
        assert up.addresses[1] == ("127.0.0.1", port)
        assert up.probe()  # one of the two answers
    now = [50.0]
    down = ReachabilityWatch([("127.0.0.1", free_port())], interval_s=0.2, clock=lambda: now[0])
    assert not down.probe()
    assert not down.down_within(10)
    down.start()
    deadline = time.monotonic() + 10
    while down.last_unreachable is None and time.monotonic() < deadline:
        time.sleep(0.05)
    down.close()
    assert down.down_within(10)
    now[0] = 61.0
    assert not down.down_within(10)
