"""The exceptions featureflow raises: one root, one base per area.

Every message says what went wrong and what to do about it.
"""

from __future__ import annotations


class FeatureflowError(Exception):
    """Root of every error featureflow raises on purpose."""


class InfraError(FeatureflowError):
    """A local service (Maven, the Kafka broker, Java) could not be set up or reached."""


class MavenError(InfraError):
    """Maven could not fetch the jars featureflow needs."""


class KafkaBrokerError(InfraError):
    """The local Kafka broker failed to start, stop or answer."""


class EventError(FeatureflowError):
    """An event could not be used; names the field and the reason."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"field {field!r}: {reason}")
        self.field = field
        self.reason = reason


class RepoError(FeatureflowError):
    """The Feast repo is missing something featureflow needs."""


class JobError(FeatureflowError):
    """The streaming job was configured wrongly or failed."""
