"""A self-signed TLS certificate for local secured services, made with the JDK's ``keytool``.

For tests and trying featureflow against a TLS Kafka broker or ``redis-server``
on loopback: one RSA key and certificate for ``127.0.0.1``/``localhost``
(subject alternative names, so host-name verification passes), valid for a
few days, in the forms each client wants:

============================  ===============================================
file                          for
============================  ===============================================
``server.p12``                the broker's key store (PKCS12, key + certificate)
``truststore.p12``            Java clients' trust store (PKCS12, certificate)
``certificate.pem``           librdkafka ``ssl.ca.location``, redis-py ``ssl_ca_certs``,
                              ``redis-server --tls-cert-file``
``key.pem``                   ``redis-server --tls-key-file`` (``openssl`` exports it;
                              keytool can't write a private key)
============================  ===============================================

Passwords reach ``keytool``/``openssl`` through the environment
(``-storepass:env``, ``-passin env:``), never the command line, which
other users of the machine can read in ``ps``.
"""

from __future__ import annotations

import os
import secrets as random_secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from featureflow.errors import InfraError

_PASSWORD_VARIABLE = "FEATUREFLOW_TLS_STORE_PASSWORD"


@dataclass(frozen=True)
class LocalCertificate:
    """The files of :func:`make_self_signed`; ``password`` opens both PKCS12 stores (and the
    key in ``server.p12``)."""

    directory: Path
    password: str = field(repr=False)

    @property
    def keystore(self) -> Path:
        return self.directory / "server.p12"

    @property
    def truststore(self) -> Path:
        return self.directory / "truststore.p12"

    @property
    def certificate_pem(self) -> Path:
        return self.directory / "certificate.pem"

    @property
    def key_pem(self) -> Path:
        return self.directory / "key.pem"


def _tool(name: str) -> str:
    java_home = os.environ.get("JAVA_HOME")
    if name == "keytool" and java_home and (Path(java_home) / "bin" / name).is_file():
        return str(Path(java_home) / "bin" / name)
    found = shutil.which(name)
    if found is None:
        msg = f"{name} is not installed (keytool comes with the JDK, openssl with OpenSSL)"
        raise InfraError(msg)
    return found


def _run(command: list[str], password: str) -> None:
    environment = dict(os.environ, **{_PASSWORD_VARIABLE: password})
    result = subprocess.run(
        command, capture_output=True, text=True, env=environment, check=False, timeout=120
    )
    if result.returncode != 0:
        tool = Path(command[0]).name
        msg = f"{tool} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        raise InfraError(msg)


def make_self_signed(
    directory: Path, *, password: str | None = None, days: int = 3, with_key_pem: bool = True
) -> LocalCertificate:
    """Make a key and self-signed certificate for 127.0.0.1 in ``directory`` (created, 0700).

    Args:
        password: of the PKCS12 stores (default: 24 random URL-safe characters).
        days: validity from now.
        with_key_pem: also export the private key as PEM (``key.pem``, 0600; needs ``openssl``).

    Raises:
        InfraError: keytool or openssl is missing or failed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    cert = LocalCertificate(directory, password or random_secrets.token_urlsafe(18))
    keytool = _tool("keytool")
    store_pass = f"-storepass:env {_PASSWORD_VARIABLE}".split()
    _run(
        [
            keytool, "-genkeypair", "-alias", "server", "-keyalg", "RSA", "-keysize", "2048",
            "-validity", str(days), "-dname", "CN=127.0.0.1, O=featureflow local",
            "-ext", "SAN=ip:127.0.0.1,dns:localhost", "-storetype", "PKCS12",
            "-keystore", str(cert.keystore), *store_pass,
        ],
        cert.password,
    )  # fmt: skip
    _run(
        [
            keytool, "-exportcert", "-rfc", "-alias", "server", "-keystore", str(cert.keystore),
            *store_pass, "-file", str(cert.certificate_pem),
        ],
        cert.password,
    )  # fmt: skip
    _run(
        [
            keytool, "-importcert", "-noprompt", "-alias", "server", "-storetype", "PKCS12",
            "-file", str(cert.certificate_pem), "-keystore", str(cert.truststore), *store_pass,
        ],
        cert.password,
    )  # fmt: skip
    if with_key_pem:
        _run(
            [
                _tool("openssl"), "pkcs12", "-in", str(cert.keystore), "-nocerts", "-nodes",
                "-passin", f"env:{_PASSWORD_VARIABLE}", "-out", str(cert.key_pem),
            ],
            cert.password,
        )  # fmt: skip
        cert.key_pem.chmod(0o600)
    return cert
