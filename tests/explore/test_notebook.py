"""The notebook runs top to bottom on a fresh clone (generated events) and saves its figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from notebook_runner import REPO_ROOT, execute, figures, register_kernel, text_of

pytestmark = pytest.mark.slow


FIGURES = ("distributions", "feature_over_time", "compare_windows", "sessions", "late_events")


def test_notebook_runs_on_generated_events_and_saves_figures(
    feature_repo_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A repo that was never applied (no registry): the view comes from its definitions.
    register_kernel(tmp_path / "jupyter", monkeypatch)
    monkeypatch.setenv("FEATUREFLOW_REPO", str(feature_repo_copy))
    monkeypatch.setenv("FEATUREFLOW_EXPLORE_SOURCE", "sample")
    notebook = execute()

    text = text_of(notebook)
    assert "using a generated sample (50,000 events, 2,000 users, seed 7)" in text
    assert "No check: the events are generated" in text
    images = figures(notebook)
    assert sorted(images) == sorted(FIGURES)
    out = REPO_ROOT / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    for name, png in images.items():
        assert png.startswith(b"\x89PNG") and len(png) > 10_000, name
        (out / f"explore-{name}.png").write_bytes(png)
