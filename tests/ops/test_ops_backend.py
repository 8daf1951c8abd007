"""Backend selection, the loader and `describe`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import featureflow.ops as ops
from featureflow.ops import _backend, _mojo
from featureflow.ops._mojo import loader


def test_backend_is_the_forced_one(backend: str) -> None:
    assert ops.backend() == backend
    assert ops.describe()["backend"] == backend


def test_describe_says_where_and_why(backend: str) -> None:
    facts = ops.describe()
    assert set(facts) == {"backend", "reason", "mojo_version", "library"}
    assert facts["mojo_version"].startswith("Mojo 1.2")
    if backend == "mojo":
        assert facts["library"].endswith("_native/kernels.so")
        assert Path(facts["library"]).is_file()
        assert facts["library"] in ops.backend_reason()
    else:
        assert facts["library"] == ""
        assert "FEATUREFLOW_BACKEND=numpy" in ops.backend_reason()


def test_missing_kernels_fall_back_or_fail_as_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(loader, "NATIVE_DIR", tmp_path)
    monkeypatch.setenv(_backend.ENV_VAR, "auto")
    _backend.reset()
    assert ops.backend() == "numpy"
    assert "make kernels" in ops.backend_reason()
    monkeypatch.setenv(_backend.ENV_VAR, "mojo")
    _backend.reset()
    with pytest.raises(_mojo.NativeLoadError, match="not found"):
        ops.backend()


def _refused(monkeypatch: pytest.MonkeyPatch, match: str) -> None:
    """Forced, the library is refused with `match`; auto, the reference runs instead."""
    monkeypatch.setenv(_backend.ENV_VAR, "mojo")
    _backend.reset()
    with pytest.raises(loader.StaleKernelsError, match=match) as refused:
        ops.backend()
    assert "make kernels" in str(refused.value)
    monkeypatch.setenv(_backend.ENV_VAR, "auto")
    _backend.reset()
    assert ops.backend() == "numpy"
    assert "make kernels" in ops.backend_reason()


@pytest.mark.parametrize("backend", ["mojo"], indirect=True)
def test_library_records_the_digest_of_its_sources() -> None:
    facts = loader.load().abi()
    assert facts["abi_version"] == loader.ABI_VERSION
    assert facts["sources_digest"] == loader.sources_digest(loader.SOURCES_DIR)
    assert facts["sources_digest"] == loader.build_info()["sources_sha256"]


@pytest.mark.parametrize("backend", ["mojo"], indirect=True)
def test_kernels_built_from_other_sources_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A source edited after the build (the real library, other sources)."""
    sources = tmp_path / "mojo_ops"
    shutil.copytree(loader.SOURCES_DIR, sources, ignore=shutil.ignore_patterns("__mojocache__"))
    abi = sources / "featureflow_kernels" / "abi.mojo"
    abi.write_text(abi.read_text() + "\n# an edit not compiled yet\n")
    monkeypatch.setattr(loader, "SOURCES_DIR", sources)
    _refused(monkeypatch, "built from other sources")


@pytest.mark.parametrize("backend", ["mojo"], indirect=True)
def test_kernels_of_another_abi_version_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    built = loader.ABI_VERSION
    monkeypatch.setattr(loader, "ABI_VERSION", built + 1)
    _refused(monkeypatch, f"ABI version {built}, this featureflow speaks {built + 1}")


@pytest.mark.parametrize("backend", ["mojo"], indirect=True)
def test_installed_without_sources_the_build_record_is_checked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without the sources (an installed package) the library's digest must be the
    one its build recorded."""
    monkeypatch.setattr(loader, "SOURCES_DIR", tmp_path)
    _backend.reset()
    assert ops.backend() == "mojo"
    monkeypatch.setattr(loader, "build_info", lambda: {"sources_sha256": "0" * 16})
    _refused(monkeypatch, "built from other sources")


def test_children_get_the_environment_of_before_the_load(backend: str) -> None:
    """The Mojo runtime setenv()s PYTHONPATH and PYTHONEXECUTABLE when the kernels
    load; a child Python (a Spark worker, a tool) must still start in its venv."""
    ops.backend()
    lines = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout
    child = dict(line.split("=", 1) for line in lines.splitlines() if "=" in line)
    for name in loader.RUNTIME_ENV:
        assert child.get(name) == os.environ.get(name), name
    code = "import sys; print(sys.prefix)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == sys.prefix


def test_unknown_backend_name_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_backend.ENV_VAR, "cuda")
    _backend.reset()
    with pytest.raises(ValueError, match="FEATUREFLOW_BACKEND"):
        ops.backend()


def test_import_is_cheap_and_loads_no_kernels() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); import featureflow.ops; "
        "print(time.perf_counter() - t, 'featureflow.ops._mojo' in sys.modules)"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": src},
    ).stdout.split()
    assert out[1] == "False"
    assert float(out[0]) < 2.0
