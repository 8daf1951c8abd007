"""The exceptions featureflow raises: one root, one base per area.

Every message says what went wrong and what to do about it. Those built from
arguments of their own pickle with them, attributes and notes included: an
executor's state host (:mod:`featureflow.spark.state_host`) hands a task's
exception back to the worker that sent the task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from featureflow.schema.report import Report


class FeatureflowError(Exception):
    """Root of every error featureflow raises on purpose."""


class InfraError(FeatureflowError):
    """A local service (Maven, the Kafka broker, Java) could not be set up or reached."""


class MavenError(InfraError):
    """Maven could not fetch the jars featureflow needs."""


class KafkaBrokerError(InfraError):
    """The local Kafka broker failed to start, stop or answer."""


class RedisServerError(InfraError):
    """The local ``redis-server`` could not be found, started or stopped."""


class ServiceTimeoutError(InfraError):
    """A service (e.g. the Feast registry) did not answer within its bound; names the
    service and what to check."""


class KafkaSettingsError(FeatureflowError):
    """Kafka client settings (``--kafka-options-file``, ``FEATUREFLOW_KAFKA_*``,
    ``--kafka-option``) are malformed or can't be used by a client; never shows a secret."""


class OnlineStoreError(FeatureflowError):
    """Features could not be written to the Feast online store; says which column or setting."""


class OnlineStoreUnavailableError(OnlineStoreError):
    """The online store did not answer in time, refused the connection or stayed locked: a
    transient outage, after which the stream job restarts the batch from its checkpoint."""

    def __init__(self, service: str, detail: str) -> None:
        super().__init__(f"{service} unavailable: {detail}")
        self.service = service
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.service, self.detail), self.__dict__


class EventError(FeatureflowError):
    """An event could not be used; names the field and the reason."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"field {field!r}: {reason}")
        self.field = field
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.field, self.reason), self.__dict__


class RepoError(FeatureflowError):
    """The Feast repo is missing something featureflow needs."""


class JobError(FeatureflowError):
    """The streaming job was configured wrongly or failed."""


class DeadLetterError(JobError):
    """A micro-batch's dead letters were not acknowledged by the dead-letter topic's broker
    (the batch fails and runs again: dead letters are at least once, never dropped)."""


class StateError(JobError):
    """The stream job's window state can't be read (a truncated or corrupt file)."""

    @classmethod
    def unreadable(cls, path: str, cause: object) -> StateError:
        return cls(
            f"the window state file {path} is truncated or unreadable ({cause}); versions are "
            "written whole and moved into place, so its storage lost data: restore the file "
            "from a backup, or start the job on a new --checkpoint (state and offsets are "
            "rebuilt from the topic's retained records)"
        )


class SchemaError(FeatureflowError):
    """A feature schema (``schemas/<view>.mojo``) could not be read or used."""


class SchemaParseError(SchemaError):
    """A schema file is not a valid feature schema; names the file, line and what was expected."""

    def __init__(self, file: str, line: int, expected: str) -> None:
        super().__init__(f"{file}:{line}: expected {expected}")
        self.file = file
        self.line = line
        self.expected = expected

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.file, self.line, self.expected), self.__dict__


class SchemaMismatchError(SchemaError):
    """The schema gate refused: schemas and Feast disagree. ``report`` holds every check."""

    def __init__(self, message: str, report: Report) -> None:
        super().__init__(message)
        self.report = report

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (str(self), self.report), self.__dict__


class MetricsUnavailableError(JobError):
    """A running job's Prometheus endpoint could not be read; says where and what to check."""


class CheckpointLockedError(JobError):
    """Another live job holds the checkpoint; ``holder`` describes it (host, pid, start, command).

    ``exit_status`` (75, ``EX_TEMPFAIL``) lets a supervisor tell "already running"
    apart from a failure (1) and bad arguments (2).
    """

    exit_status = 75

    def __init__(self, message: str, holder: object) -> None:
        super().__init__(message)
        self.holder = holder

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (str(self), self.holder), self.__dict__
