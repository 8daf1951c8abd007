"""What the ``featureflow`` command says when a sub-command fails: one line, never a traceback.

featureflow's own errors (:class:`featureflow.errors.FeatureflowError`) already
say what went wrong and what to do. The few third-party failures a user meets
at the command line (an unreachable broker or Redis, an unknown Feast object, a
missing file) are translated here into the same kind of sentence; anything
else is named by its type and message. ``featureflow -v`` prints the traceback
as well.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import NoReturn

from featureflow.errors import FeatureflowError, KafkaBrokerError

VERBOSE_HINT = "run `featureflow -v ...` for the traceback"


class CommandParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (and exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _positive(text: str, convert: type[int] | type[float], kind: str) -> float:
    try:
        value = convert(text)
    except ValueError:
        msg = f"expected {kind}, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not 0 < value < float("inf"):
        msg = f"must be more than 0, got {text}"
        raise argparse.ArgumentTypeError(msg)
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer > 0."""
    return int(_positive(text, int, "a whole number"))


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    return _positive(text, float, "a number")


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1..65535."""
    value = positive_int(text)
    if value > 65_535:
        msg = f"a TCP port is at most 65535, got {value}"
        raise argparse.ArgumentTypeError(msg)
    return value


def require_kafka(bootstrap: str, timeout_s: float = 3.0) -> None:
    """Raise :class:`KafkaBrokerError` at once when no server of ``bootstrap`` accepts TCP
    connections (librdkafka would retry for its whole timeout before saying so)."""
    reasons = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
                return
        except ValueError:
            reasons.append(f"{server!r} is not HOST:PORT")
        except OSError as error:
            reasons.append(f"{server}: {error.strerror or error}")
    msg = (
        f"cannot reach the Kafka broker at {bootstrap} ({'; '.join(reasons)}): start the local "
        "one with `featureflow kafka up`, or pass the broker's address with --bootstrap"
    )
    raise KafkaBrokerError(msg)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def explain(error: BaseException) -> str:
    """One line naming what is wrong and what to do."""
    if isinstance(error, FeatureflowError):
        return _one_line(str(error))
    from confluent_kafka import KafkaException

    if isinstance(error, KafkaException):
        return _one_line(
            f"Kafka: {error.args[0] if error.args else error}: is the broker running "
            "(`featureflow kafka status`) and --bootstrap its address?"
        )
    from feast.errors import FeastObjectNotFoundException

    if isinstance(error, FeastObjectNotFoundException):
        return _one_line(
            f"{error}: `featureflow apply --repo R --schemas S` registers the repo's "
            "definitions, `feast -c R feature-views list` lists what is registered"
        )
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    if isinstance(error, RedisConnectionError | RedisTimeoutError):
        return _one_line(
            f"cannot reach the Redis online store ({error}): start redis-server, or fix "
            "online_store.connection_string in feature_store.yaml"
        )
    if isinstance(error, FileNotFoundError):
        return f"no such file or folder: {error.filename}"
    if isinstance(error, OSError) and error.filename:
        return f"{error.filename}: {error.strerror}"
    return _one_line(f"{type(error).__name__}: {error} ({VERBOSE_HINT})")


def report_failure(command: str, error: BaseException, *, verbose: bool) -> int:
    """Print ``error`` as one line (after its traceback when ``verbose``); the exit status."""
    if isinstance(error, KeyboardInterrupt):
        print(f"featureflow {command}: interrupted", file=sys.stderr)
        return 130
    from featureflow.secrets import redact_text

    if verbose:
        import traceback

        sys.stderr.write(redact_text("".join(traceback.format_exception(error))))
    print(f"featureflow {command}: error: {redact_text(explain(error))}", file=sys.stderr)
    return 1
