"""Every sub-command answers bad input with one line on stderr and a non-zero exit, never a
traceback: bad arguments, a missing repo, an unknown view, an unreachable broker, Redis or job.

Real subprocesses of the installed ``featureflow``; "unreachable" is a loopback port
nothing listens on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from local_processes import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
FEATUREFLOW = str(Path(sys.executable).parent / "featureflow")
SCHEMAS = str(REPO_ROOT / "schemas")


CLOSED = free_port()  # nothing listens there


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FEATUREFLOW, *args], capture_output=True, text=True, timeout=120, check=False
    )


def _applied_repo(root: Path, online_store: str | None = None) -> Path:
    import shutil

    repo = root / "feature_repo"
    shutil.copytree(REPO_ROOT / "feature_repo", repo, ignore=shutil.ignore_patterns("data"))
    (repo / "data").mkdir()
    if online_store is not None:
        config = repo / "feature_store.yaml"
        sqlite = "  type: sqlite\n  path: data/online_store.db\n"
        assert sqlite in config.read_text()
        config.write_text(config.read_text().replace(sqlite, online_store))
    applied = _run("apply", "--repo", str(repo), "--schemas", SCHEMAS)
    assert applied.returncode == 0, applied.stderr
    return repo


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``{repo}``: the example repo, applied; ``{redis_repo}``: the same with the Redis online
    store on a closed port; ``{entities}``: a one-row entity CSV; ``{missing}``: no repo."""
    root = tmp_path_factory.mktemp("cli-errors")
    entities = root / "entities.csv"
    entities.write_text("user_id,event_timestamp\n1,2026-11-30T00:00:00Z\n")
    redis = f"  type: redis\n  connection_string: 127.0.0.1:{CLOSED}\n"
    return {
        "repo": str(_applied_repo(root / "sqlite")),
        "redis_repo": str(_applied_repo(root / "redis", redis)),
        "entities": str(entities),
        "missing": str(root / "no-such-repo"),
        "out": str(root / "out.parquet"),
        "closed": str(CLOSED),
    }


# (case, arguments with {placeholders} from `repos`, what the line must name)
CASES: list[tuple[str, list[str], str]] = [
    # bad arguments, for every sub-command
    ("no command", [], "the following arguments are required: COMMAND"),
    ("unknown command", ["nope"], "invalid choice: 'nope'"),
    ("doctor", ["doctor", "--nope"], "unrecognized arguments: --nope"),
    ("kafka", ["kafka", "restart"], "invalid choice: 'restart'"),
    ("kafka port", ["kafka", "up", "--port", "99999"], "a TCP port is at most 65535"),
    ("jars", ["jars", "fetch", "--nope"], "unrecognized arguments: --nope"),
    ("produce events", ["produce", "--events", "-5"],
     "argument --events: must be more than 0, got -5"),
    ("produce span", ["produce", "--span", "soon"], "argument --span: expected a number"),
    ("produce format", ["produce", "--format", "xml"], "argument --format: invalid choice"),
    ("online", ["online", "show", "--repo", "{repo}", "--keys", "1"], "--view"),
    ("online keys", ["online", "show", "--repo", "{repo}", "--view", "v", "--keys", "x"],
     "argument --keys: invalid int value: 'x'"),
    ("schema", ["schema", "init", "--schemas", "s"], "--repo"),
    ("schema action", ["schema", "delete"], "invalid choice: 'delete'"),
    ("validate", ["validate", "--repo", "{repo}", "--schemas", SCHEMAS, "--format", "xml"],
     "argument --format: invalid choice"),
    ("apply", ["apply", "--repo", "{repo}"], "--schemas"),
    ("training-set", ["training-set", "--repo", "{repo}", "--output", "o"], "--entities"),
    ("status", ["status"], "one of the arguments --metrics-port --url is required"),
    ("status port", ["status", "--metrics-port", "0"],
     "argument --metrics-port: must be more than 0"),
    ("status interval", ["status", "--metrics-port", "1", "--interval", "-1"],
     "argument --interval: must be more than 0"),
    # a missing repo
    ("online, no repo", ["online", "show", "--repo", "{missing}", "--view", "v", "--keys", "1"],
     "is not a Feast repo"),
    ("validate, no repo", ["validate", "--repo", "{missing}", "--schemas", SCHEMAS],
     "is not a Feast repo"),
    ("apply, no repo", ["apply", "--repo", "{missing}", "--schemas", SCHEMAS],
     "is not a Feast repo"),
    ("schema, no repo", ["schema", "init", "--repo", "{missing}", "--schemas", SCHEMAS],
     "is not a Feast repo"),
    ("training-set, no repo", ["training-set", "--repo", "{missing}", "--entities",
     "{entities}", "--feature", "user_txn_stats:sum_amount_600s", "--output", "{out}"],
     "is not a Feast repo"),
    ("training-set, no entities", ["training-set", "--repo", "{repo}", "--entities",
     "{missing}.csv", "--feature", "user_txn_stats:sum_amount_600s", "--output", "{out}"],
     "no such file"),
    # an unknown view or feature
    ("online, unknown view", ["online", "show", "--repo", "{repo}", "--view", "nope",
     "--keys", "1"], "no stream feature view named ['nope'] in the repo; it has"),
    ("online, unknown feature", ["online", "show", "--repo", "{repo}", "--view",
     "user_txn_stats", "--keys", "1", "--features", "nope"], "has no feature ['nope']"),
    ("schema, unknown view", ["schema", "init", "--repo", "{repo}", "--schemas", "{missing}",
     "nope"], "no feature view named nope"),
    ("training-set, unknown view", ["training-set", "--repo", "{repo}", "--entities",
     "{entities}", "--feature", "nope:x", "--output", "{out}"], "with a view of"),
    # unreachable services
    ("produce, no broker", ["produce", "--bootstrap", "127.0.0.1:{closed}"],
     "cannot reach the Kafka broker at 127.0.0.1:{closed}"),
    ("produce --fresh, no broker", ["produce", "--fresh", "--bootstrap", "127.0.0.1:{closed}"],
     "featureflow kafka up"),
    ("kafka status, no broker", ["kafka", "status", "--port", "{closed}"],
     "not running on 127.0.0.1:{closed}"),
    ("online, no Redis", ["online", "show", "--repo", "{redis_repo}", "--view",
     "user_txn_stats", "--keys", "1"], "cannot reach the Redis online store"),
    ("status, no job", ["status", "--metrics-port", "{closed}", "--once"],
     "cannot read the job's metrics at http://127.0.0.1:{closed}/metrics"),
    ("status url, no job", ["status", "--url", "127.0.0.1:{closed}"],
     "is the job running, started with --metrics-port"),
]  # fmt: skip


@pytest.fixture(scope="module")
def answers(repos: dict[str, str]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every case's run, four at a time (most of their time is Python and Feast imports,
    or waiting on a refused connection)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        runs = {
            case: pool.submit(_run, *(argument.format(**repos) for argument in arguments))
            for case, arguments, _ in CASES
        }
        return {case: run.result() for case, run in runs.items()}


@pytest.mark.parametrize(("case", "names"), [(case, names) for case, _, names in CASES])
def test_one_line_on_stderr_no_traceback_non_zero_exit(
    answers: dict[str, subprocess.CompletedProcess[str]], repos: dict[str, str], case: str,
    names: str,
) -> None:
    result = answers[case]
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("featureflow"), lines
    assert names.format(**repos) in lines[0]


def test_every_sub_command_has_a_bad_argument_case() -> None:
    from featureflow.cli import COMMAND_MODULES

    covered = {arguments[0] for _, arguments, _ in CASES if arguments}
    assert {name.replace("_", "-") for name in COMMAND_MODULES} <= covered


def test_verbose_shows_the_traceback_then_the_line(repos: dict[str, str]) -> None:
    args = ("online", "show", "--repo", repos["repo"], "--view", "nope", "--keys", "1")
    result = _run("-v", *args)
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("featureflow online: error: no stream")


def test_version_prints_the_version() -> None:
    from featureflow import __version__

    result = _run("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"featureflow {__version__}")
