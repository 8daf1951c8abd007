"""The Mojo package's own tests (tests/ops/mojo/test_*.mojo) at the boundary each
piece exposes: compensated sums, the descriptor reader, the path predicates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from featureflow.ops._mojo import loader

MOJO_TESTS = sorted((Path(__file__).parent / "mojo").glob("test_*.mojo"))


@pytest.mark.parametrize("backend", ["mojo"], indirect=True)
@pytest.mark.parametrize("test", MOJO_TESTS, ids=lambda p: p.stem)
def test_mojo_unit(backend: str, test: Path) -> None:
    mojo = Path(sys.executable).with_name("mojo")
    if not mojo.exists() or not loader.SOURCES_DIR.is_dir():
        pytest.fail(f"needs the mojo toolchain ({mojo}) and the sources ({loader.SOURCES_DIR})")
    cmd = [str(mojo), "run", "-I", str(loader.SOURCES_DIR), str(test)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok")
