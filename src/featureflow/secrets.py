"""Secrets in featureflow's settings, and their redaction from everything it prints.

Secret settings:

- Kafka client settings (``kafka.`` prefix optional, case-insensitive) named in
  :data:`SECRET_KAFKA_KEYS`, and any key containing ``password``, ``secret``,
  ``token`` or ``jaas``; inside a JAAS config, every ``password="..."`` too.
- Feast's Redis ``connection_string`` (``host:port[,host:port],key=value,...``):
  the ``password`` parameter (and any parameter whose name contains
  ``password``/``secret``/``token``).
- The password of a URL's user info: ``redis://user:PASSWORD@host:port/0``.

Redaction works two ways, so text from anywhere (an exception raised by a
library, a Java stack trace relayed by Spark) comes out clean:

- by value: the values of every secret setting featureflow loaded are
  registered (:func:`register`) and replaced wherever they occur;
- by pattern: ``password=...``-like pairs, ``password="..."`` in JAAS
  configs and URL user info are redacted even when their value was never
  registered (e.g. in an executor, which loads the settings itself).

Values shorter than :data:`MIN_REGISTERED_LENGTH` characters are redacted by
pattern only: replacing them wherever they occur would garble every line.

Install :class:`RedactingFilter` on the log handlers with
:func:`install_log_redaction` (the job and the CLI do it at start); build
exception messages that name a Redis server with :func:`redis_address`.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType

REDACTED = "***"
"""What a secret value is replaced with."""

MIN_REGISTERED_LENGTH = 4
"""Registered values shorter than this (characters) are redacted by pattern only."""

SECRET_KAFKA_KEYS = frozenset(
    {
        "sasl.jaas.config",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "ssl.keystore.key",  # a PEM private key given inline
        "sasl.password",  # librdkafka's
        "sasl.oauthbearer.client.secret",
    }
)
"""Kafka client settings that are secret by name (besides the words of :data:`SECRET_WORDS`)."""

SECRET_WORDS = ("password", "secret", "token", "jaas")
"""A setting whose name contains one of these (case-insensitive) is secret."""

_KEY_WORDS = "|".join(SECRET_WORDS)
# key = "quoted value"  (JAAS options, JSON, shell); the key holds a secret word.
_QUOTED = re.compile(
    rf"""(?ix)
    (?P<key>["']?[\w.\-]*(?:{_KEY_WORDS})[\w.\-]*["']?\s*[=:]\s*)
    (?P<quote>["'])(?P<value>(?:\\.|(?!(?P=quote)).)*)(?P=quote)
    """
)
# key=value up to a delimiter (connection strings, properties, query strings).
_UNQUOTED = re.compile(
    rf"""(?ix)
    (?P<key>\b[\w.\-]*(?:{_KEY_WORDS})[\w.\-]*\s*=\s*)
    (?!\[hidden\])(?P<value>[^\s,;&"'\]\)}}]+)
    """
)
# scheme://user:password@host
_URL_USERINFO = re.compile(r"(?i)(?P<head>\b[a-z][a-z0-9+.\-]*://[^\s:/@]*:)(?P<value>[^\s@/]+)(?=@)")
_JAAS_PASSWORD = re.compile(r"""(?i)\b\w*password\w*\s*=\s*(["'])((?:\\.|(?!\1).)*)\1""")


def is_secret_key(key: str) -> bool:
    """Whether a setting's value is secret: ``sasl.jaas.config``, ``kafka.ssl.key.password``,
    ``password`` (a connection-string parameter), ``my.api.token``, ... (case-insensitive)."""
    name = key.strip().lower().removeprefix("kafka.")
    return name in SECRET_KAFKA_KEYS or any(word in name for word in SECRET_WORDS)


def jaas_passwords(jaas: str) -> list[str]:
    """The values of ``password="..."`` (and ``*password*``) options in a JAAS config."""
    return [match.group(2) for match in _JAAS_PASSWORD.finditer(jaas)]


def settings_secrets(settings: Mapping[str, str]) -> list[str]:
    """The secret values in key/value settings (Kafka client settings, connection-string
    parameters): each secret setting's value, and the passwords inside JAAS configs."""
    values: list[str] = []
    for key, value in settings.items():
        if is_secret_key(key) and value:
            values.append(value)
            values.extend(jaas_passwords(value))
    return values


def redact_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with every secret value replaced by :data:`REDACTED` (to print them)."""
    return {key: REDACTED if is_secret_key(key) else value for key, value in settings.items()}


# --- Feast's Redis connection string -----------------------------------------------------


@dataclass(frozen=True)
class RedisConnection:
    """Feast's Redis ``connection_string``, split as Feast splits it.

    ``host:port[,host:port...][,key=value...]``: a comma-separated part with an
    ``=`` is a parameter (the first ``=`` splits it), any other part a node.
    Feast then JSON-decodes each value (``ssl=true`` becomes ``True``); here
    values stay the text they were written as.
    """

    nodes: tuple[str, ...]
    params: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """The nodes, ``host:port[,host:port]``: what an error message may show."""
        return ",".join(self.nodes)

    @property
    def authenticated(self) -> bool:
        """Whether the client sends a password (``AUTH``)."""
        return bool(self.params.get("password"))

    @property
    def tls(self) -> bool:
        """Whether the client connects with TLS (``ssl=true``)."""
        return self.params.get("ssl", "").strip().lower() in ("true", "1", "yes")

    def redacted(self) -> str:
        """The connection string with every secret parameter's value replaced."""
        parts = [*self.nodes]
        parts += [
            f"{key}={REDACTED if is_secret_key(key) else value}"
            for key, value in self.params.items()
        ]
        return ",".join(parts)

    def secrets(self) -> list[str]:
        """The secret parameter values (to :func:`register`)."""
        return settings_secrets(self.params)


def parse_connection_string(text: str) -> RedisConnection:
    """Split Feast's Redis ``connection_string`` (see :class:`RedisConnection`).

    A ``redis://user:password@host:port/db`` URL is accepted too: its node is
    ``host:port`` and its password becomes the ``password`` parameter.
    """
    url = re.fullmatch(
        r"(?i)(?P<scheme>rediss?)://(?:(?P<user>[^:@/]*)(?::(?P<password>[^@/]*))?@)?"
        r"(?P<node>[^/?#]*)(?P<rest>.*)",
        text.strip(),
    )
    if url:
        params = {}
        if url.group("user"):
            params["username"] = url.group("user")
        if url.group("password") is not None:
            params["password"] = url.group("password")
        if url.group("scheme").lower() == "rediss":
            params["ssl"] = "true"
        return RedisConnection((url.group("node"),), params)
    nodes: list[str] = []
    params = {}
    for part in text.split(","):
        if "=" in part:
            key, value = part.split("=", 1)
            params[key] = value
        else:
            nodes.append(part)
    return RedisConnection(tuple(nodes), params)


def redis_address(connection_string: str) -> str:
    """The ``host:port`` nodes of a Redis connection string, without any parameter."""
    return parse_connection_string(connection_string).address


# --- Registered values and free text -----------------------------------------------------

_registered: set[str] = set()
_registered_sorted: tuple[str, ...] = ()
_lock = threading.Lock()


def register(values: Iterable[str]) -> None:
    """Add secret values to redact wherever they occur in this process's output."""
    global _registered_sorted
    with _lock:
        _registered.update(v for v in values if v)
        _registered_sorted = tuple(sorted(_registered, key=len, reverse=True))


def registered() -> tuple[str, ...]:
    """The registered secret values, longest first."""
    return _registered_sorted


def forget_all() -> None:
    """Forget every registered value (for tests)."""
    global _registered_sorted
    with _lock:
        _registered.clear()
        _registered_sorted = ()


def redact_text(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with secrets replaced by :data:`REDACTED`.

    Args:
        text: any text: a log line, an exception message, a Java stack trace.
        secrets: the values to replace (default: the registered ones); values
            shorter than :data:`MIN_REGISTERED_LENGTH` are skipped. Secret
            ``key=value`` pairs, ``password="..."`` and URL user info are
            redacted in any case.
    """
    values = registered() if secrets is None else sorted(set(secrets), key=len, reverse=True)
    for value in values:
        if len(value) >= MIN_REGISTERED_LENGTH and value in text:
            text = text.replace(value, REDACTED)
    text = _QUOTED.sub(lambda m: f"{m['key']}{m['quote']}{REDACTED}{m['quote']}", text)
    text = _UNQUOTED.sub(lambda m: m["key"] + REDACTED, text)
    return _URL_USERINFO.sub(lambda m: m["head"] + REDACTED, text)


# --- Logging -----------------------------------------------------------------------------


class RedactingFilter(logging.Filter):
    """A log filter that redacts each record's message, exception and stack text.

    The record is formatted once here (``msg % args``), its text redacted and
    stored back as ``msg`` with no ``args``; a traceback is formatted and
    redacted into ``exc_text``, which formatters print instead of formatting
    the exception again.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave the record to logging's own report
            return True
        record.msg = redact_text(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


_FILTER = RedactingFilter()


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Redact every line the handlers of ``logger`` (default: the root logger) write, and
    tracebacks of uncaught exceptions (``sys.excepthook``). Idempotent."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
    if not getattr(sys.excepthook, "featureflow_redacting", False):
        sys.excepthook = _redacting_excepthook(sys.excepthook)


def _redacting_excepthook(previous: Callable[..., object]) -> Callable[..., None]:
    """``sys.excepthook`` printing the redacted traceback (``previous`` is kept on it)."""
    import traceback

    def hook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        text = "".join(traceback.format_exception(kind, error, tb))
        sys.stderr.write(redact_text(text))

    setattr(hook, "featureflow_redacting", True)  # noqa: B010
    setattr(hook, "previous", previous)  # noqa: B010
    return hook
