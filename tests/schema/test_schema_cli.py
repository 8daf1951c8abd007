"""The validate / apply / schema commands: output and exit status."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from schema_helpers import Repo, edit

from featureflow.cli import apply, schema, validate


def parse(*argv: str) -> argparse.Namespace:
    """Parse with just the gate's sub-commands (the others live elsewhere)."""
    parser = argparse.ArgumentParser(prog="featureflow")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (schema, validate, apply):
        module.register(commands)
    return parser.parse_args(argv)


def run(*argv: str) -> int:
    args = parse(*argv)
    status: int = args.handler(args)
    return status


def gate_args(repo: Repo) -> list[str]:
    return ["--repo", str(repo.repo), "--schemas", str(repo.schemas)]


def test_validate_passes_with_status_0(fresh: Repo, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("validate", *gate_args(fresh)) == 0
    assert capsys.readouterr().out.rstrip().endswith("PASS: 61 ✅, 0 ⚠️, 0 ❌")


def test_validate_json_names_the_failing_row(
    fresh: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(fresh.schema, "EntityKey[Int64]", "EntityKey[Int32]")
    assert run("validate", *gate_args(fresh), "--format", "json") == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    (row,) = [r for r in data["rows"] if r["status"] == "fail"]
    assert row == {
        **row,
        "check": "entity key",
        "field": "user_id",
        "expected": "Int32",
        "actual": "Int64",
    }


def test_strict_fails_on_warnings(fresh: Repo) -> None:
    # Millisecond event time: Feast and Spark hand microseconds -> a warning.
    edit(fresh.schema, 'EventTimestamp["us", "UTC"]', 'EventTimestamp["ms", "UTC"]')
    assert run("validate", *gate_args(fresh)) == 0
    assert run("validate", *gate_args(fresh), "--strict") == 1


def test_parse_error_exits_2_naming_file_and_line(
    fresh: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(fresh.schema, "var sum_amount_600s: Float64", "var sum_amount_600s: Float16")
    line = fresh.schema.read_text().splitlines().index("    var sum_amount_600s: Float16") + 1
    assert run("validate", *gate_args(fresh)) == 2
    assert f"{fresh.schema}:{line}: expected field `sum_amount_600s` of type" in (
        capsys.readouterr().err
    )


def test_usage_errors_exit_2(tmp_path: Path, fresh: Repo) -> None:
    with pytest.raises(SystemExit) as caught:
        parse("validate", "--repo", str(tmp_path))
    assert caught.value.code == 2
    assert run("validate", "--repo", str(tmp_path), "--schemas", str(fresh.schemas)) == 2


def test_schema_init_writes_what_the_gate_accepts(fresh: Repo, tmp_path: Path) -> None:
    out = tmp_path / "generated"
    assert run("schema", "init", *gate_args(fresh)[:2], "--schemas", str(out)) == 0
    assert (out / "user_txn_stats.mojo").read_text() == fresh.schema.read_text()
    # The contract is not overwritten by accident.
    assert run("schema", "init", "--repo", str(fresh.repo), "--schemas", str(out)) == 2
    assert (
        run("schema", "init", "--repo", str(fresh.repo), "--schemas", str(out), "no_such_view") == 2
    )


def test_include_path_compiles_a_schema_with_mojo(
    example_schema: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("schema", "include-path") == 0
    include = capsys.readouterr().out.strip()
    mojo = Path(sys.executable).parent / "mojo"
    subprocess.run(
        [
            str(mojo),
            "build",
            "--emit",
            "object",
            "-I",
            include,
            str(example_schema),
            "-o",
            str(tmp_path / "schema.o"),
        ],
        check=True,
        capture_output=True,
    )
