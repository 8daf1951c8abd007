"""Every ops test runs under both backends (the `backend` fixture is autouse)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from featureflow.ops import _backend


@pytest.fixture(params=["mojo", "numpy"], autouse=True)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Force one backend; `mojo` fails (not falls back) when the kernels are missing."""
    monkeypatch.setenv(_backend.ENV_VAR, request.param)
    _backend.reset()
    yield request.param
    _backend.reset()
