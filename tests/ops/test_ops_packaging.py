"""The files the kernel loader reads ship in the package (pyproject's package data).

An installed wheel has no Mojo sources beside it, so the loader checks the
library's digest against ``build_info.json``: a wheel without that file would load
a stale library unchecked.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from featureflow.ops._mojo import loader

ROOT = Path(__file__).resolve().parents[2]


def _shipped(package: str, relative: str) -> bool:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"].get(package, [])
    return any(fnmatch.fnmatch(relative, pattern) for pattern in patterns)


def test_every_file_the_loader_reads_is_package_data() -> None:
    native = loader.NATIVE_DIR.name
    needed = [loader.library_path().name, *loader.RUNTIME_LIBS, loader.BUILD_INFO]
    missing = [name for name in needed if not _shipped("featureflow.ops", f"{native}/{name}")]
    assert not missing, f"not in pyproject's package data: {missing}"


def test_the_check_knows_an_unshipped_file() -> None:
    assert not _shipped("featureflow.ops", "_native/notes.txt")
