"""Backend selection, the loader and `describe`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import featureflow.ops as ops
from featureflow.ops import _backend, _native


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
    monkeypatch.setattr(_native, "NATIVE_DIR", tmp_path)
    monkeypatch.setenv(_backend.ENV_VAR, "auto")
    _backend.reset()
    assert ops.backend() == "numpy"
    assert "make kernels" in ops.backend_reason()
    monkeypatch.setenv(_backend.ENV_VAR, "mojo")
    _backend.reset()
    with pytest.raises(_native.NativeLoadError, match="not found"):
        ops.backend()


def test_unknown_backend_name_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_backend.ENV_VAR, "cuda")
    _backend.reset()
    with pytest.raises(ValueError, match="FEATUREFLOW_BACKEND"):
        ops.backend()


def test_import_is_cheap_and_loads_no_kernels() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); import featureflow.ops; "
        "print(time.perf_counter() - t, 'featureflow.ops._native' in sys.modules)"
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
