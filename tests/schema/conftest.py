"""Fixtures of the schema-gate tests: copies of the example repo and its schemas.

Every test works on copies in temporary folders; the real ``feature_repo/``
and ``schemas/`` are never written. The real Mojo toolchain and Feast run.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from schema_helpers import ROOT, Repo, copy_repo


@pytest.fixture(scope="session")
def applied_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example repo and schemas, applied once by ``featureflow apply`` (registry 1.0.0)."""
    from featureflow.schema import apply_repo, validate

    repo = copy_repo(tmp_path_factory.mktemp("applied"))
    assert validate(repo.repo, repo.schemas).ok
    apply_repo(repo.repo)
    assert repo.registry.is_file()
    return repo.root


@pytest.fixture
def fresh(tmp_path: Path) -> Repo:
    """A copy of the example repo and schemas with no registry."""
    return copy_repo(tmp_path)


@pytest.fixture
def applied(tmp_path: Path, applied_template: Path) -> Iterator[Repo]:
    """A copy of the applied repo: its registry holds user_txn_stats 1.0.0."""
    shutil.copytree(applied_template, tmp_path / "copy")
    yield Repo(tmp_path / "copy")


@pytest.fixture(scope="session")
def example_schema() -> Path:
    """The committed schema of user_txn_stats."""
    return ROOT / "schemas" / "user_txn_stats.mojo"
