"""Outage recovery: a query that failed for a transient service reason restarts from its checkpoint.

The stream job runs one Structured Streaming query per topic. When a query
terminates with an exception, :func:`classify` reads the exception's text (all
Spark gives the driver: the JVM's stack trace with the Python worker's
traceback inside) and decides whether a service was briefly unavailable:

============  ==============================================================
service       failures counted as transient
============  ==============================================================
Kafka         client timeouts and disconnects on the driver (offset planning)
              or the executors (fetches), and the dead-letter producer's
Redis         ``OnlineStoreUnavailableError`` naming Redis: timeout,
              connection refused or reset
SQLite        ``OnlineStoreUnavailableError`` naming SQLite: the database
              stayed locked past the lock wait
============  ==============================================================

Everything else (the schema gate, :class:`~featureflow.errors.StateError`,
a bad setting, an unknown error) is not retried: the job stops with exit 1
as before.

A transient failure starts an *outage* (or continues the current one). The
query is started again after an exponential backoff (:class:`RetryPolicy`:
1 s, 2 s, 4 s ... capped at 30 s by default) as long as the outage has lasted
less than the retry budget (``--retry-budget``, default 5 min); the outage ends
when the restarted query completes a micro-batch, or terminates cleanly.

Why a restart keeps exactly-once: Spark writes a micro-batch's offsets before
running it and commits it only after it succeeded, so the restarted query
first re-runs the failed batch with the same offsets; that re-run reads the
window state *before* the batch (:mod:`featureflow.spark.state`), so it
computes the same rows; online writes are ordered by event time with an equal
time replacing (:func:`featureflow.online.write`), and the offline log and the
state version of the batch are overwritten whole. A batch therefore counts
once however often it runs.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from featureflow.spark.pipeline import TopicBatchProcessor

log = logging.getLogger("featureflow.job")

DEFAULT_RETRY_BUDGET_S = 300.0
"""How long one outage may last before the job gives up (``--retry-budget``), s."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff within a budget; pure (times are given, never read).

    The ``k``-th restart of an outage (``k`` from 0) waits
    ``min(initial_s * factor**k, max_delay_s)`` seconds. A failure at ``now``
    of an outage that began at ``start`` is retried only if the restart would
    happen within the budget: ``now - start + delay <= budget_s``.
    """

    budget_s: float = DEFAULT_RETRY_BUDGET_S
    initial_s: float = 1.0
    factor: float = 2.0
    max_delay_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.budget_s >= 0:
            msg = f"retry budget must be >= 0 s, got {self.budget_s}"
            raise ValueError(msg)
        if not (self.initial_s > 0 and self.factor >= 1 and self.max_delay_s >= self.initial_s):
            msg = (f"backoff needs initial_s > 0, factor >= 1, max_delay_s >= initial_s; got "
                   f"{self.initial_s}, {self.factor}, {self.max_delay_s}")
            raise ValueError(msg)

    def delay_s(self, restarts: int) -> float:
        """Seconds to wait before restart number ``restarts`` (0-based) of one outage."""
        if restarts < 0:
            msg = f"restarts must be >= 0, got {restarts}"
            raise ValueError(msg)
        # factor ** restarts overflows floats long after it passed max_delay_s
        if restarts > 64:
            return self.max_delay_s
        return float(min(self.initial_s * self.factor**restarts, self.max_delay_s))

    def next_restart(self, outage_start: float, now: float, restarts: int) -> float | None:
        """When (same clock as the arguments) to restart, or None when the budget is spent."""
        delay = self.delay_s(restarts)
        if now - outage_start + delay > self.budget_s:
            return None
        return now + delay


@dataclass(frozen=True)
class Outage:
    """A failure :func:`classify` found transient: which service, what happened, what to check."""

    service: str
    what: str
    check: str


# Markers of a deliberate, non-transient stop: these are never retried even when
# the text also mentions a service (a schema gate report names Kafka topics).
_PERMANENT = re.compile(
    r"SchemaMismatchError|SchemaError|StateError|EventError|RepoError|"
    r"AnalysisException|ConfigException|SaslAuthenticationException|"
    r"AuthorizationException|AuthenticationException|SslAuthenticationException|"
    # librdkafka's (the driver's dead-letter producer): local and broker-side codes
    r"_AUTHENTICATION|AUTHENTICATION_FAILED|AUTHORIZATION_FAILED"
)
_UNAVAILABLE = re.compile(r"OnlineStoreUnavailableError: (\w+) unavailable: ([^\n]*)")
_KAFKA = re.compile(
    r"org\.apache\.kafka\.common\.errors\.(?:TimeoutException|NetworkException|"
    r"DisconnectException|NotLeaderOrFollowerException|LeaderNotAvailableException|"
    r"CoordinatorNotAvailableException|BrokerNotAvailableException)[^\n]*|"
    r"Failed to get records for [^\n]* after polling for [^\n]*|"
    r"Timed out waiting for a node assignment[^\n]*|"
    r"Timeout of \d+ms expired[^\n]*|"
    r"Topic [^\n]* not present in metadata after [^\n]*|"
    r"DeadLetterError: [^\n]*"
)
_CHECKS = {
    "Kafka": "check that the brokers in --bootstrap run and are reachable "
    "(--kafka-timeout bounds each wait)",
    "Redis": "check that redis-server runs and answers (socket_timeout and "
    "socket_connect_timeout in the connection_string bound each wait)",
    "SQLite": "check which process holds the online store's write lock "
    "(FEATUREFLOW_SQLITE_LOCK_TIMEOUT_S bounds the wait)",
}


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def classify(error_text: str, kafka_was_down: bool = False) -> Outage | None:
    """The transient outage ``error_text`` (a failed query's exception) shows, or None.

    None means: not transient (or not recognised), the job must stop. The
    online store's own typed error wins over Kafka markers (a batch failing
    in the online write also fails its Spark job, whose trace may name
    Kafka's consumer). ``kafka_was_down``: a :class:`ReachabilityWatch` found
    the brokers unreachable shortly before; then an error without a marker
    counts as a Kafka outage too, because an executor's Kafka error often
    reaches the driver as ``UnknownReason`` (Spark cannot deserialise the
    exception when the connector was added to a running session).
    """
    if _PERMANENT.search(error_text):
        return None
    match = _UNAVAILABLE.search(error_text)
    if match is not None:
        service, what = match.group(1), match.group(2)
        check = _CHECKS.get(service, f"check that {service} runs and answers")
        return Outage(service, _short(what), check)
    match = _KAFKA.search(error_text)
    if match is not None:
        return Outage("Kafka", _short(match.group(0)), _CHECKS["Kafka"])
    if kafka_was_down:
        first = next((line for line in error_text.splitlines() if line.strip()), "")
        what = f"the query failed while the brokers were unreachable ({_short(first, 200)})"
        return Outage("Kafka", what, _CHECKS["Kafka"])
    return None


class ReachabilityWatch:
    """Probes TCP addresses (the Kafka bootstrap servers) every ``interval_s`` seconds on a
    daemon thread and remembers when none of them accepted a connection."""

    def __init__(
        self, addresses: list[tuple[str, int]], interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.addresses = addresses
        self.interval_s = interval_s
        self.clock = clock
        self.last_unreachable: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafka-watch", daemon=True)

    @classmethod
    def of_bootstrap(cls, servers: list[str], interval_s: float = 1.0) -> ReachabilityWatch:
        """A watch of ``host:port[,host:port...]`` strings."""
        addresses = []
        for entry in servers:
            for server in entry.split(","):
                host, _, port = server.strip().rpartition(":")
                if host and port.isdigit():
                    addresses.append((host.strip("[]"), int(port)))
        return cls(addresses, interval_s)

    def start(self) -> ReachabilityWatch:
        if self.addresses:
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()

    def probe(self) -> bool:
        """Whether any address accepts a TCP connection now (within ``interval_s``)."""
        for host, port in self.addresses:
            try:
                with socket.create_connection((host, port), timeout=self.interval_s):
                    return True
            except OSError:
                continue
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.probe():
                self.last_unreachable = self.clock()
            self._stop.wait(self.interval_s)

    def down_within(self, seconds: float) -> bool:
        """Whether the addresses were all unreachable at some probe in the last ``seconds``."""
        last = self.last_unreachable
        return last is not None and self.clock() - last <= seconds


@dataclass
class SupervisedQuery:
    """One topic's query, restarted from its checkpoint after transient outages.

    ``start`` starts the query (again) and returns it with its processor; the
    driver loop calls :meth:`poll` every ~0.5 s. Counters carry over restarts.
    ``clock`` is monotonic seconds (injectable for tests).
    """

    start: Callable[[], tuple[StreamingQuery, TopicBatchProcessor]]
    policy: RetryPolicy
    clock: Callable[[], float] = time.monotonic
    kafka_was_down: Callable[[], bool] = lambda: False
    """Whether the brokers were unreachable lately (:meth:`ReachabilityWatch.down_within`)."""
    query: StreamingQuery = field(init=False)
    processor: TopicBatchProcessor = field(init=False)
    failure: str | None = field(default=None, init=False)
    """Why the query stopped for good (a non-transient error, or the budget spent)."""
    outage: Outage | None = field(default=None, init=False)
    outage_start: float = field(default=0.0, init=False)
    restarts: int = field(default=0, init=False)
    restart_at: float | None = field(default=None, init=False)
    recoveries: list[tuple[str, float, int]] = field(default_factory=list, init=False)
    """(service, seconds from the first failure to the next completed batch, restarts)."""

    def __post_init__(self) -> None:
        self.query, self.processor = self.start()

    @property
    def name(self) -> str:
        return str(self.query.name)

    def poll(self) -> bool:
        """Look after the query; False once it has terminated for good (cleanly or not)."""
        if self.restart_at is not None:
            if self.clock() < self.restart_at:
                return True
            return self._restart()
        if self.query.isActive:
            if self.outage is not None and self.processor.last_batch_id is not None:
                self._recovered()
            return True
        error = self.query.exception()
        if error is None:
            if self.outage is not None:
                self._recovered()
            return False
        text = str(error)
        if self.outage is not None and self.processor.last_batch_id is not None:
            self._recovered()  # it ran a batch, then failed again: a new outage
        return self._failed(text)

    def _failed(self, text: str) -> bool:
        now = self.clock()
        outage = classify(text, self.kafka_was_down())
        if outage is None:
            self.failure = text
            return False
        if self.outage is None:
            self.outage_start, self.restarts = now, 0
        self.outage = outage
        restart_at = self.policy.next_restart(self.outage_start, now, self.restarts)
        if restart_at is None:
            self.failure = (
                f"{outage.service} still unavailable after {now - self.outage_start:.1f} s "
                f"({self.restarts} restarts), beyond the {self.policy.budget_s:.0f} s retry "
                f"budget (--retry-budget): {outage.what}; {outage.check}"
            )
            return False
        log.warning(
            "outage: %s unavailable, query %s failed: %s; restarting it from its checkpoint "
            "in %.1f s (restart %d, %.0f s of the %.0f s retry budget left; %s)",
            outage.service, self.name, outage.what, restart_at - now, self.restarts + 1,
            self.policy.budget_s - (now - self.outage_start), self.policy.budget_s,
            outage.check,
        )  # fmt: skip
        self.restart_at = restart_at
        return True

    def _restart(self) -> bool:
        self.restart_at = None
        self.restarts += 1
        old = self.processor
        try:
            self.query, self.processor = self.start()
        except Exception as error:  # a start that fails is one more failed attempt
            log.warning("restart of query %s failed at start: %s", self.name, _short(str(error)))
            return self._failed(str(error))
        for before, after in zip(old.views, self.processor.views, strict=True):
            after.counters = before.counters
        return True

    def _recovered(self) -> None:
        assert self.outage is not None
        took = self.clock() - self.outage_start
        log.info(
            "recovered: query %s carries on after the %s outage, %.1f s after its first "
            "failure, %d restart(s) from the checkpoint",
            self.name, self.outage.service, took, self.restarts,
        )  # fmt: skip
        self.recoveries.append((self.outage.service, took, self.restarts))
        self.outage, self.restarts = None, 0

    def stop(self) -> None:
        """Stop the query now and cancel a pending restart."""
        self.restart_at = None
        if self.query.isActive:
            self.query.stop()
