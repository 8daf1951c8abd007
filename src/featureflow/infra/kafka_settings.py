"""Kafka client settings (SASL, TLS, ...) from a properties file, the environment and argv.

One set of settings serves every Kafka client featureflow runs: Spark's Kafka
source (Java client; each key gets Spark's ``kafka.`` prefix) and featureflow's own
confluent-kafka clients (the job's dead-letter producer,
:mod:`featureflow.infra.kafka_client`, :mod:`featureflow.infra.kafka_broker`,
librdkafka; translated by :func:`librdkafka_config`).

Sources, later ones winning per key:

1. ``--kafka-options-file PATH``: a Java ``.properties`` file (UTF-8) as
   Kafka's own tools take (``--command-config``), ``kafka.`` prefix optional;
2. environment variables ``FEATUREFLOW_KAFKA_<KEY>``: the key upper-cased,
   dots as underscores (``FEATUREFLOW_KAFKA_SASL_JAAS_CONFIG`` is
   ``sasl.jaas.config``, ``FEATUREFLOW_KAFKA_SSL_TRUSTSTORE_PASSWORD`` is
   ``ssl.truststore.password``);
3. ``--kafka-option KEY=VALUE`` on the command line (argv wins: what a person
   types for one run overrides what the deployment provides).

Keys are stored without the ``kafka.`` prefix. A key starting with
``librdkafka.`` is for featureflow's confluent-kafka clients only (e.g.
``librdkafka.ssl.ca.location=/etc/kafka/ca.pem``, since librdkafka reads no
Java trust stores) and never reaches Spark.

Every secret value loaded (:func:`featureflow.secrets.is_secret_key`) is
registered for redaction.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from featureflow import secrets
from featureflow.errors import KafkaSettingsError

log = logging.getLogger(__name__)

ENV_PREFIX = "FEATUREFLOW_KAFKA_"
"""Environment variables ``FEATUREFLOW_KAFKA_<KEY>`` hold Kafka client settings."""

LIBRDKAFKA_PREFIX = "librdkafka."
"""Settings for featureflow's confluent-kafka clients only."""

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


# --- Java .properties ----------------------------------------------------------------------


def parse_properties(text: str, *, source: str = "properties") -> dict[str, str]:
    """Parse a Java ``.properties`` text as ``java.util.Properties.load`` does.

    Natural lines end at ``\\n``, ``\\r`` or ``\\r\\n``; a line ending in an odd
    number of backslashes continues on the next (whose leading whitespace is
    dropped). Blank lines and lines whose first non-blank character is ``#``
    or ``!`` are skipped. The key ends at the first unescaped ``=``, ``:`` or
    whitespace; whitespace and one ``=``/``:`` after it are skipped. Escapes
    ``\\t \\n \\r \\f \\uXXXX``; any other escaped character is itself. A later
    duplicate key wins. One quirk of Java's is not copied: a lone backslash as the
    last line (at the end of the text, or before a final ``\\n`` but not ``\\r\\n``)
    gives Java an empty key; here it gives nothing.

    Raises:
        KafkaSettingsError: a malformed ``\\uXXXX`` escape (names ``source`` and line).
    """
    result: dict[str, str] = {}
    logical = ""
    number = 0
    naturals = re.split(r"\r\n|\r|\n", text)
    if naturals[-1] == "":
        naturals.pop()  # what follows the last line break is the end of the text
    for index, natural in enumerate(naturals):
        line = natural.lstrip(_WHITESPACE)
        if not logical:
            # Nothing gathered yet (also after a lone "\\" line): a new logical line,
            # where blank and comment lines are skipped, as Java's LineReader does.
            if not line or line[0] in "#!":
                continue
            number = index + 1
        continued = _ends_with_odd_backslashes(line)
        logical += line[:-1] if continued else line
        if not continued:
            _add(result, logical, source, number)
            logical = ""
    if logical:
        _add(result, logical, source, number)
    return result


def _add(result: dict[str, str], logical: str, source: str, number: int) -> None:
    key, value = _split_pair(logical)
    try:
        result[_unescape(key)] = _unescape(value)
    except ValueError as error:
        msg = f"{source}:{number}: {error}"
        raise KafkaSettingsError(msg) from None


def _ends_with_odd_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_pair(line: str) -> tuple[str, str]:
    """(escaped key, escaped value) of a logical line with its leading whitespace dropped."""
    at = 0
    while at < len(line):
        char = line[at]
        if char == "\\":
            at += 2
            continue
        if char in "=:" or char in _WHITESPACE:
            break
        at += 1
    key = line[:at]
    rest = line[at:]
    if rest[:1] in _WHITESPACE and rest:
        rest = rest.lstrip(_WHITESPACE)
        if rest[:1] in ("=", ":") and rest:
            rest = rest[1:]
    elif rest:
        rest = rest[1:]  # the "=" or ":" that ended the key
    return key, rest.lstrip(_WHITESPACE)


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    at = 0
    while at < len(text):
        char = text[at]
        if char != "\\":
            out.append(char)
            at += 1
            continue
        if at + 1 >= len(text):  # a lone backslash at the very end of the file
            break
        code = text[at + 1]
        if code == "u":
            digits = text[at + 2 : at + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                msg = f"malformed \\uXXXX escape {text[at : at + 6]!r}"
                raise ValueError(msg)
            out.append(chr(int(digits, 16)))
            at += 6
            continue
        out.append(_ESCAPES.get(code, code))
        at += 2
    return "".join(out)


def format_properties(settings: Mapping[str, str]) -> str:
    """A ``.properties`` text that :func:`parse_properties` (and Java) read back as
    ``settings``: one ``key=value`` line each, special characters escaped."""
    lines = []
    for key, value in settings.items():
        lines.append(f"{_escape(key, is_key=True)}={_escape(value, is_key=False)}")
    return "".join(line + "\n" for line in lines)


def _escape(text: str, *, is_key: bool) -> str:
    out = []
    for at, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[char])
        elif char == " " and (is_key or at == 0):
            out.append("\\ ")
        elif char in "=:#!" and is_key:
            out.append("\\" + char)
        elif ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F or 0xD800 <= ord(char) <= 0xDFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


# --- The sources ---------------------------------------------------------------------------


def normalise_key(key: str) -> str:
    """A setting's key as stored: surrounding whitespace and the ``kafka.`` prefix dropped."""
    key = key.strip()
    return key[len("kafka.") :] if key.lower().startswith("kafka.") else key


def from_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """The settings of a ``.properties`` file; a warning when it holds a secret and others
    than its owner may read it.

    Raises:
        KafkaSettingsError: the file can't be read or has a malformed escape.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
        mode = Path(path).stat().st_mode
    except (OSError, UnicodeDecodeError) as error:
        msg = f"--kafka-options-file {path}: cannot read it ({error})"
        raise KafkaSettingsError(msg) from None
    settings = {
        normalise_key(k): v for k, v in parse_properties(text, source=str(path)).items() if k
    }
    if mode & 0o077 and secrets.settings_secrets(settings):
        log.warning(
            "%s holds Kafka secrets and is readable by others than its owner (mode %03o): "
            "`chmod 600 %s`", path, mode & 0o777, path,
        )  # fmt: skip
    return settings


def env_key(variable: str) -> str | None:
    """The setting a ``FEATUREFLOW_KAFKA_*`` variable holds (``..._SASL_MECHANISM`` ->
    ``sasl.mechanism``), or None for any other variable."""
    if not variable.startswith(ENV_PREFIX) or len(variable) == len(ENV_PREFIX):
        return None
    return variable[len(ENV_PREFIX) :].lower().replace("_", ".")


def env_variable(key: str) -> str:
    """The environment variable of a setting (``sasl.jaas.config`` ->
    ``FEATUREFLOW_KAFKA_SASL_JAAS_CONFIG``)."""
    return ENV_PREFIX + normalise_key(key).upper().replace(".", "_")


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings given as ``FEATUREFLOW_KAFKA_<KEY>`` variables."""
    environ = os.environ if environ is None else environ
    found = {}
    for variable, value in environ.items():
        key = env_key(variable)
        if key is not None:
            found[key] = value
    return found


def from_pairs(pairs: Iterable[str], option: str = "--kafka-option") -> dict[str, str]:
    """``KEY=VALUE`` arguments as settings.

    Raises:
        KafkaSettingsError: an argument without ``=`` or with an empty key
            (the message shows the key only, never a value).
    """
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            what = "an empty key" if sep else f"no '=' in a {len(pair)}-character argument"
            msg = f"{option} expects KEY=VALUE, got {what} (not shown: it may hold a secret)"
            raise KafkaSettingsError(msg)
        settings[normalise_key(key)] = value
    return settings


def load(
    *,
    file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    pairs: Iterable[str] = (),
) -> dict[str, str]:
    """The merged settings: file, then environment, then argv pairs (later wins per key).

    Every secret value is registered for redaction (:func:`featureflow.secrets.register`).
    """
    settings: dict[str, str] = {}
    if file is not None:
        settings.update(from_file(file))
    settings.update(from_environment(environ))
    settings.update(from_pairs(pairs))
    secrets.register(secrets.settings_secrets(settings))
    return settings


# --- Per client ----------------------------------------------------------------------------


def spark_options(settings: Mapping[str, str]) -> dict[str, str]:
    """The settings for Spark's Kafka source and sink: ``kafka.<key>`` each, the
    ``librdkafka.*`` ones left out."""
    return {
        f"kafka.{key}": value
        for key, value in settings.items()
        if not key.lower().startswith(LIBRDKAFKA_PREFIX)
    }


_DIRECT = (
    "security.protocol",
    "sasl.mechanism",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "client.id",
)
"""Java client settings librdkafka takes under the same name and meaning."""

_JAAS_OPTION = re.compile(r"""(\w+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s;"]+))""")


def jaas_options(jaas: str) -> dict[str, str]:
    """The ``name="value"`` options of a JAAS config
    (``... required username="u" password="p";``)."""
    return {
        match.group(1): (match.group(2) if match.group(2) is not None else match.group(3))
        for match in _JAAS_OPTION.finditer(jaas)
    }


def librdkafka_config(settings: Mapping[str, str]) -> dict[str, str]:
    """The settings as confluent-kafka (librdkafka) configuration.

    ``security.protocol``, ``sasl.mechanism``, ``ssl.key.password``,
    ``ssl.endpoint.identification.algorithm`` carry over; ``sasl.jaas.config``
    becomes ``sasl.username``/``sasl.password`` (PLAIN and SCRAM); a PEM trust
    store (``ssl.truststore.type=PEM``) becomes ``ssl.ca.location``, a PKCS12
    key store ``ssl.keystore.location``/``ssl.keystore.password``;
    ``librdkafka.<key>`` settings are passed as ``<key>`` (and win).

    Raises:
        KafkaSettingsError: a JKS/PKCS12 trust store without
            ``librdkafka.ssl.ca.location`` (librdkafka reads PEM CA files only).
    """
    lowered = {key.lower(): value for key, value in settings.items()}
    config = {key: lowered[key] for key in _DIRECT if key in lowered}
    if config.get("ssl.endpoint.identification.algorithm") == "":
        config["ssl.endpoint.identification.algorithm"] = "none"
    if "sasl.jaas.config" in lowered:
        options = jaas_options(lowered["sasl.jaas.config"])
        if "username" in options:
            config["sasl.username"] = options["username"]
        if "password" in options:
            config["sasl.password"] = options["password"]
    direct = {
        key[len(LIBRDKAFKA_PREFIX) :]: value
        for key, value in settings.items()
        if key.lower().startswith(LIBRDKAFKA_PREFIX)
    }
    truststore = lowered.get("ssl.truststore.location")
    if truststore and "ssl.ca.location" not in direct:
        if lowered.get("ssl.truststore.type", "JKS").upper() != "PEM":
            msg = (
                f"the Kafka trust store {truststore} is not PEM, which librdkafka (featureflow's "
                "own Kafka clients) can't read: add librdkafka.ssl.ca.location=<CA .pem file> "
                "to the Kafka settings, or use ssl.truststore.type=PEM"
            )
            raise KafkaSettingsError(msg)
        config["ssl.ca.location"] = truststore
    keystore = lowered.get("ssl.keystore.location")
    if keystore and lowered.get("ssl.keystore.type", "JKS").upper() == "PKCS12":
        config["ssl.keystore.location"] = keystore
        if "ssl.keystore.password" in lowered:
            config["ssl.keystore.password"] = lowered["ssl.keystore.password"]
    config.update(direct)
    return config


def describe(settings: Mapping[str, str]) -> dict[str, str]:
    """What the settings secure, for ``featureflow doctor``: protocol, SASL mechanism,
    TLS on/off, trust store; never a secret."""
    lowered = {key.lower(): value for key, value in settings.items()}
    protocol = lowered.get("security.protocol", "PLAINTEXT").upper()
    facts = {
        "protocol": protocol,
        "tls": "on" if protocol in ("SSL", "SASL_SSL") else "off",
        "sasl": lowered.get("sasl.mechanism", "GSSAPI") if protocol.startswith("SASL") else "none",
    }
    if "sasl.jaas.config" in lowered:
        options = jaas_options(lowered["sasl.jaas.config"])
        facts["sasl user"] = options.get("username", "-")
    if protocol in ("SSL", "SASL_SSL"):
        facts["truststore"] = lowered.get("ssl.truststore.location", "(the JVM's default)")
        facts["hostname check"] = (
            "off" if lowered.get("ssl.endpoint.identification.algorithm", "https") == "" else "on"
        )
    return facts
