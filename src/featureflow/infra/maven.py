"""Fetch the jars featureflow runs (Kafka broker, Spark's Kafka connector) from Maven Central.

Each bundle is a small POM shipped in ``poms/``; ``mvn dependency:copy-dependencies``
copies its runtime dependencies into ``<cache>/jars/<bundle>/``. A marker file
records the resolved properties, so a second fetch is a no-op and a pyspark
upgrade re-fetches the matching connector.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from featureflow import paths
from featureflow.errors import MavenError

KAFKA_VERSION = "4.1.1"
"""Apache Kafka release run as the local broker (KRaft, Java 17+)."""

_MARKER = "bundle.json"
_JAR_NAME = re.compile(r"^(?P<artifact>.+)-(?P<version>\d+(?:\.\d+)+[^/]*)\.jar$")


@dataclass(frozen=True)
class JarBundle:
    """A set of jars resolved from one POM with the given Maven properties."""

    name: str
    pom: str
    properties: dict[str, str] = field(default_factory=dict)
    skip_artifacts_from: Path | None = None
    """A directory of jars already on the classpath (pyspark's): same artifacts are dropped."""

    @property
    def directory(self) -> Path:
        return paths.jars_dir(self.name)


def artifact_name(jar: str) -> str:
    """The Maven artifact id in a jar's name: ``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    match = _JAR_NAME.match(jar)
    return match.group("artifact") if match else jar.removesuffix(".jar")


def kafka_broker_bundle() -> JarBundle:
    """The jars of the local Kafka broker."""
    return JarBundle("kafka-broker", "kafka-broker.xml", {"kafka.version": KAFKA_VERSION})


def spark_kafka_bundle() -> JarBundle:
    """Spark's Kafka connector matching the installed pyspark (version and Scala binary)."""
    import pyspark

    spark_jars = Path(pyspark.__file__).parent / "jars"
    scala = "2.13"
    for jar in spark_jars.glob("scala-library-*.jar"):
        version = _JAR_NAME.match(jar.name)
        if version:
            scala = ".".join(version.group("version").split(".")[:2])
    return JarBundle(
        "spark-kafka",
        "spark-kafka.xml",
        {"spark.version": pyspark.__version__, "scala.binary.version": scala},
        skip_artifacts_from=spark_jars,
    )


def _pom_text(bundle: JarBundle) -> str:
    """The bundle's POM as shipped: a changed POM (a new dependency) means a new fetch."""
    return (resources.files("featureflow.infra") / "poms" / bundle.pom).read_text()


def bundled_jars(bundle: JarBundle) -> list[Path] | None:
    """The jars of an already fetched bundle, or None when it must be fetched."""
    marker = bundle.directory / _MARKER
    if not marker.is_file():
        return None
    try:
        recorded = json.loads(marker.read_text())
    except ValueError:
        return None
    if recorded.get("properties") != bundle.properties or recorded.get("pom") != _pom_text(bundle):
        return None
    jars = sorted(bundle.directory.glob("*.jar"))
    return jars or None


def fetch(bundle: JarBundle, *, force: bool = False) -> list[Path]:
    """Resolve the bundle's jars with Maven (once) and return their paths.

    Raises:
        MavenError: ``mvn`` is missing or the resolution failed (its output is included).
    """
    if not force:
        existing = bundled_jars(bundle)
        if existing is not None:
            return existing
    mvn = shutil.which("mvn")
    if mvn is None:
        msg = "Maven ('mvn') is not on PATH: install it (apt-get install maven) or run make setup"
        raise MavenError(msg)
    with tempfile.TemporaryDirectory(prefix=f"ff-{bundle.name}-") as tmp:
        staging = Path(tmp) / "jars"
        pom_path = Path(tmp) / "pom.xml"
        pom_path.write_text(_pom_text(bundle))
        command = [
            mvn, "-B", "-q", "-f", str(pom_path), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
            *(f"-D{key}={value}" for key, value in bundle.properties.items()),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()[-4000:]
            msg = f"Maven could not fetch the {bundle.name} jars ({bundle.properties}):\n{output}"
            raise MavenError(msg)
        skipped: set[str] = set()
        if bundle.skip_artifacts_from is not None:
            skipped = {artifact_name(j.name) for j in bundle.skip_artifacts_from.glob("*.jar")}
        target = bundle.directory
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for jar in sorted(staging.glob("*.jar")):
            if artifact_name(jar.name) not in skipped:
                shutil.copy2(jar, target / jar.name)
    marker = {"properties": bundle.properties, "pom": _pom_text(bundle)}
    (target / _MARKER).write_text(json.dumps(marker, indent=2))
    return sorted(target.glob("*.jar"))
