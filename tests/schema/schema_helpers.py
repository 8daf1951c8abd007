"""Helpers of the schema-gate tests (imported by conftest and the test modules)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from featureflow.schema.report import Report, Row, Status

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Repo:
    """A temporary copy: ``root/feature_repo`` and ``root/schemas``."""

    root: Path

    @property
    def repo(self) -> Path:
        return self.root / "feature_repo"

    @property
    def schemas(self) -> Path:
        return self.root / "schemas"

    @property
    def features(self) -> Path:
        return self.repo / "features.py"

    @property
    def schema(self) -> Path:
        return self.schemas / "user_txn_stats.mojo"

    @property
    def registry(self) -> Path:
        return self.repo / "data" / "registry.db"


def copy_repo(target: Path) -> Repo:
    """Copy the example's Feast definitions (not its data) and schemas under ``target``."""
    repo = Repo(target)
    repo.repo.mkdir(parents=True)
    for name in ("feature_store.yaml", "features.py"):
        shutil.copy(ROOT / "feature_repo" / name, repo.repo / name)
    shutil.copytree(ROOT / "schemas", repo.schemas)
    return repo


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    """Replace ``old`` by ``new`` in a file, failing when ``old`` is not there ``count`` times."""
    text = path.read_text()
    assert text.count(old) == count, f"{old!r} occurs {text.count(old)} times in {path}"
    path.write_text(text.replace(old, new))


def drop_lines(path: Path, *needles: str) -> None:
    """Remove every line containing any of ``needles`` (each must match one line at least)."""
    lines = path.read_text().splitlines(keepends=True)
    for needle in needles:
        assert any(needle in line for line in lines), f"{needle!r} not in {path}"
    path.write_text("".join(line for line in lines if not any(n in line for n in needles)))


def failed(report: Report, check: str, field: str = "") -> list[Row]:
    """The ❌ rows of one check (and field, when given)."""
    return [
        r
        for r in report.rows
        if r.status is Status.FAIL and r.check == check and (not field or r.field == field)
    ]
