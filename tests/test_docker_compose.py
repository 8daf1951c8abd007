"""docker-compose.yml and the Dockerfile can't run here (no Docker engine): check them
statically — they agree with the local setup, publish nothing beyond loopback, require the
Redis password, and the image holds what the job needs."""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path
from typing import Any

import pyspark
import pytest
import yaml

from featureflow.infra import kafka_broker, maven

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def test_services_are_kafka_redis_spark_and_the_job() -> None:
    assert {"kafka", "redis", "spark-master", "spark-worker", "job"} <= set(SERVICES)


def test_kafka_is_kraft_on_the_local_port_and_version() -> None:
    kafka = SERVICES["kafka"]
    port = kafka_broker.DEFAULT_PORT
    assert f"{kafka_broker.DEFAULT_HOST}:{port}:{port}" in kafka["ports"]
    assert kafka["image"].endswith(f":{maven.KAFKA_VERSION}")
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert (
        f"PLAINTEXT://{kafka_broker.DEFAULT_HOST}:{kafka_broker.DEFAULT_PORT}"
        in env["KAFKA_ADVERTISED_LISTENERS"]
    )


def test_spark_images_match_the_installed_pyspark() -> None:
    assert SERVICES["spark-master"]["image"].split(":")[1].startswith(pyspark.__version__)
    # The featureflow image is built on the same Spark image.
    spark_image = DOCKERFILE.args["SPARK_IMAGE"]
    assert spark_image == SERVICES["spark-master"]["image"]
    assert {stage.base for stage in DOCKERFILE.stages} >= {"${SPARK_IMAGE}"}
    assert DOCKERFILE.stages[-1].base == "${SPARK_IMAGE}"


def test_job_runs_the_repo_job_against_the_compose_broker() -> None:
    command = " ".join(SERVICES["job"]["command"].split())
    assert "jobs/realtime.py" in command
    assert "--repo feature_repo" in command
    assert "--master spark://spark-master:7077" in command
    assert command.startswith("spark-submit ")  # the image's PATH has /opt/spark/bin
    internal = next(
        listener.split("//")[1]
        for listener in SERVICES["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"].split(",")
        if listener.startswith("INTERNAL")
    )
    assert f"--bootstrap {internal}" in command
    assert (ROOT / "jobs" / "realtime.py").is_file()


def test_topic_matches_the_feast_repo() -> None:
    assert 'topic="transactions"' in (ROOT / "feature_repo" / "features.py").read_text()


# -- the Dockerfile, read as Docker reads it ----------------------------------------------


class Stage:
    """One ``FROM`` stage: its base, name and instructions (keyword, arguments)."""

    def __init__(self, base: str, name: str | None) -> None:
        self.base, self.name = base, name
        self.instructions: list[tuple[str, str]] = []

    def copies(self) -> list[tuple[str | None, list[str], str]]:
        """(``--from`` stage or None, sources, destination) of each COPY."""
        found = []
        for keyword, arguments in self.instructions:
            if keyword != "COPY":
                continue
            words = arguments.split()
            origin = next((w.split("=", 1)[1] for w in words if w.startswith("--from=")), None)
            paths = [w for w in words if not w.startswith("--")]
            found.append((origin, paths[:-1], paths[-1]))
        return found

    def env(self) -> dict[str, str]:
        values = {}
        for keyword, arguments in self.instructions:
            if keyword == "ENV":
                for pair in re.findall(r"(\w+)=(\S+)", arguments):
                    values[pair[0]] = pair[1]
        return values

    def runs(self) -> str:
        return "\n".join(arguments for keyword, arguments in self.instructions if keyword == "RUN")


class Dockerfile:
    def __init__(self, text: str) -> None:
        self.args: dict[str, str] = {}
        self.stages: list[Stage] = []
        for keyword, arguments in self._instructions(text):
            if keyword == "FROM":
                words = arguments.split()
                name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
                self.stages.append(Stage(words[0], name))
            elif keyword == "ARG" and not self.stages:
                key, _, value = arguments.partition("=")
                self.args[key] = value
            else:
                assert self.stages, f"{keyword} before FROM"
                self.stages[-1].instructions.append((keyword, arguments))

    @staticmethod
    def _instructions(text: str) -> list[tuple[str, str]]:
        logical, pending = [], ""
        for line in text.splitlines():
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            logical.append(pending + line)
            pending = ""
        assert not pending, "a continued line ends the Dockerfile"
        return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
                for line in logical]  # fmt: skip

    def stage(self, name: str) -> Stage:
        return next(stage for stage in self.stages if stage.name == name)


DOCKERFILE = Dockerfile((ROOT / "Dockerfile").read_text())
IGNORED = [
    line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]  # fmt: skip
FEATUREFLOW_PYTHON = "/opt/featureflow/venv/bin/python"


def _published(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(host address, host port, container port) of each published port."""
    published = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            published.append((entry.get("host_ip", ""), str(entry.get("published", "")),
                              str(entry["target"])))  # fmt: skip
            continue
        parts = str(entry).split(":")
        if len(parts) == 1:
            parts = ["", parts[0], parts[0]]
        elif len(parts) == 2:
            parts = ["", *parts]
        published.append((parts[0], parts[1], parts[2]))
    return published


def test_every_published_port_listens_on_loopback_only() -> None:
    published = {name: _published(service) for name, service in SERVICES.items()}
    assert sum(map(len, published.values())) >= 5
    for name, ports in published.items():
        for host, _, _ in ports:
            assert host == "127.0.0.1", (name, ports)


def test_the_spark_master_port_is_not_published() -> None:
    """Whoever reaches 7077 runs code on the cluster: it stays on the compose network."""
    for name, service in SERVICES.items():
        for _, host_port, container_port in _published(service):
            assert "7077" not in (host_port, container_port), name
    assert [(h, p, c) for h, p, c in _published(SERVICES["spark-master"])] == [
        ("127.0.0.1", "8080", "8080")
    ]


# -- secrets from .env ------------------------------------------------------------------

_VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?::\?([^}]*))?\}")


def _interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation of ``$$``, ``${VAR}`` and ``${VAR:?message}`` (unset or
    empty: an error with the message), as ``docker compose config`` does it."""

    def value(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, message = match.group(1), match.group(2)
        if message is not None and not env.get(name):
            raise ValueError(f"required variable {name} is missing a value: {message}")
        return env.get(name, "")

    return _VARIABLE.sub(value, text)


def _dotenv(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines()
             if line.strip() and not line.startswith("#"))  # fmt: skip
    return {key.strip(): value.strip() for key, value in pairs}


REQUIRED = set(re.findall(r"\$\{(\w+):\?", (ROOT / "docker-compose.yml").read_text()))


def test_compose_refuses_to_start_without_the_passwords_from_env() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert {"REDIS_PASSWORD", "GRAFANA_ADMIN_PASSWORD"} <= REQUIRED
    template = _dotenv(ROOT / ".env.example")
    assert set(template) == REQUIRED, "the template lists every required variable"
    assert not any(template.values()), "no password is committed"
    with pytest.raises(ValueError, match="REDIS_PASSWORD"):
        _interpolate(text, {})
    with pytest.raises(ValueError, match=re.escape("cp .env.example .env")):
        _interpolate(text, template)  # copied but not filled in
    filled = yaml.safe_load(_interpolate(text, dict.fromkeys(REQUIRED, "pw-123")))
    assert filled["services"]["redis"]["environment"]["REDIS_PASSWORD"] == "pw-123"


def test_redis_requires_the_password_without_putting_it_on_its_command_line() -> None:
    redis = SERVICES["redis"]
    assert redis["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD:?")
    script = redis["command"][-1]
    assert "requirepass" in script and "$$REDIS_PASSWORD" in script
    assert re.search(r"exec redis-server /\S+\.conf$", script), "the password is in a file"
    assert "REDISCLI_AUTH" in " ".join(redis["healthcheck"]["test"])
    for name in ("job", "spark-worker"):  # a Redis online store reads ${REDIS_PASSWORD}
        assert SERVICES[name]["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD:?")


def test_the_env_file_is_ignored_by_git_and_docker_and_its_template_is_not() -> None:
    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT,
                              check=False).returncode == 0  # fmt: skip

    assert ignored(".env")
    assert not ignored(".env.example")
    assert ".env" in IGNORED


# -- the featureflow image --------------------------------------------------------------


def test_the_job_and_the_workers_run_the_featureflow_image() -> None:
    images = {SERVICES[name]["image"] for name in ("job", "spark-worker")}
    assert images == {f"featureflow:{_project_version()}"}
    for name in ("job", "spark-worker"):
        assert SERVICES[name]["build"] == "."
    compose_text = (ROOT / "docker-compose.yml").read_text()
    assert ".venv" not in compose_text, "the host's venv does not exist in the image"
    assert "/workspace" not in compose_text
    runtime = DOCKERFILE.stages[-1]
    assert runtime.env()["PYSPARK_PYTHON"] == FEATUREFLOW_PYTHON
    assert runtime.env()["PYSPARK_DRIVER_PYTHON"] == FEATUREFLOW_PYTHON
    assert "/opt/featureflow/venv/bin" in runtime.env()["PATH"]


def test_the_job_command_finds_its_files_in_the_image() -> None:
    job = SERVICES["job"]
    workdir = job["working_dir"]
    runtime = DOCKERFILE.stages[-1]
    assert ("WORKDIR", workdir) in runtime.instructions
    copied = {destination for _, _, destination in runtime.copies()}
    command = job["command"].split()
    for relative in ("jobs", "schemas", "feature_repo"):
        assert f"{workdir}/{relative}" in copied, relative
    assert "jobs/realtime.py" in command
    # The checkpoint lives in the volume that the workers (which write the state) share.
    checkpoint = command[command.index("--checkpoint") + 1]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in job["volumes"]}
    volume = next(target for target in mounts if checkpoint.startswith(target + "/"))
    assert f"{mounts[volume]}:{volume}" in SERVICES["spark-worker"]["volumes"]
    assert mounts[volume] in COMPOSE["volumes"]


def test_the_build_stage_makes_the_kernels_and_installs_the_package() -> None:
    build = DOCKERFILE.stage("build")
    sources = {source for _, paths, _ in build.copies() for source in paths}
    # What `make kernels` and `pip install .` read.
    assert {"pyproject.toml", "README.md", "Makefile", "src", "mojo_ops", "scripts"} <= sources
    runs = build.runs()
    assert "make kernels" in runs
    assert re.search(r"^kernels:.*\n\t\$\(BIN\)/python scripts/build_kernels\.py",
                     (ROOT / "Makefile").read_text(), re.M)  # fmt: skip
    assert "uv pip install" in runs and " ." in runs
    assert "build_info.json" in runs, "the loader checks the kernels' source digest"
    assert "FEATUREFLOW_BACKEND=mojo" in runs, "the build fails when the kernels don't load"
    assert "featureflow jars fetch" in runs, "no Maven needed at run time"
    assert "python install 3.11" in runs
    assert re.search(r'requires-python = ">=3\.11,<3\.12"', (ROOT / "pyproject.toml").read_text())
    runtime = DOCKERFILE.stages[-1]
    assert ("build", ["/opt/featureflow"], "/opt/featureflow") in runtime.copies()
    assert runtime.env()["FEATUREFLOW_HOME"] == build.env()["FEATUREFLOW_HOME"]


def test_every_file_the_dockerfile_copies_exists_and_is_not_docker_ignored() -> None:
    for stage in DOCKERFILE.stages:
        for origin, paths, _ in stage.copies():
            if origin is not None:
                assert origin in {s.name for s in DOCKERFILE.stages}, origin
                continue
            for path in paths:
                assert (ROOT / path).exists(), path
                assert not any(fnmatch.fnmatch(path, pattern) for pattern in IGNORED), path
    # Built in the image, never copied from the host.
    assert "src/featureflow/ops/_native" in IGNORED
    assert {".venv", ".git", "feature_repo/data"} <= set(IGNORED)


def _project_version() -> str:
    match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert match is not None
    return match.group(1)


def test_interpolation_keeps_double_dollars_for_the_container() -> None:
    assert _interpolate("a $$B ${C:?x}", {"C": "c"}) == "a $B c"
