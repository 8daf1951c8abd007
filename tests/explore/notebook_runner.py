"""Execute notebooks/explore.ipynb with nbclient on this interpreter, and keep its figures."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO_ROOT / "notebooks" / "explore.ipynb"
KERNEL_NAME = "featureflow-tests"


def register_kernel(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernelspec running ipykernel on this interpreter (the venv), found through JUPYTER_PATH.

    The venv's own ``python3`` kernelspec says ``python``, whatever that is on
    PATH; naming ``sys.executable`` makes the test work on a fresh clone.
    """
    spec_dir = directory / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "featureflow (tests)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(directory))


def execute(timeout_s: int = 600) -> nbformat.NotebookNode:
    """Run every cell top to bottom in ``notebooks/``; a failing cell raises CellExecutionError."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        kernel_name=KERNEL_NAME,
        timeout=timeout_s,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    return notebook


def figures(notebook: nbformat.NotebookNode) -> dict[str, bytes]:
    """PNG bytes of each cell tagged ``{"featureflow": {"figure": name}}``, by name."""
    found: dict[str, bytes] = {}
    for cell in notebook.cells:
        name = cell.get("metadata", {}).get("featureflow", {}).get("figure")
        if cell.cell_type != "code" or name is None:
            continue
        pngs = [o["data"]["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(pngs) == 1, f"figure cell {name!r} displayed {len(pngs)} images"
        found[name] = base64.b64decode(pngs[0])
    return found


def text_of(notebook: nbformat.NotebookNode) -> str:
    """Every text and Markdown output of the executed notebook, concatenated."""
    parts: list[str] = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            data = output.get("data", {})
            parts.append(data.get("text/markdown", ""))
            parts.append(data.get("text/plain", ""))
    return "\n".join(parts)
