"""The Mojo toolchain as the schema reader uses it: ``mojo doc`` over schema files.

``mojo doc`` type-checks a file and prints its declarations as JSON. Its
startup dominates its cost (about 1.5 s here, for one file or twenty), so
:func:`document` runs it once over a temporary package holding every file
asked for, and caches each file's result on disk under its content hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from featureflow.errors import SchemaError
from featureflow.paths import home

# Bump when the cached format or the reader's use of it changes.
_CACHE_FORMAT = "1"
_DOC_TIMEOUT_S = 300


def include_path() -> Path:
    """Folder to pass to ``mojo -I`` so that ``import featureflow_schema`` resolves."""
    return Path(__file__).resolve().parent / "mojo"


def mojo_executable() -> Path:
    """The ``mojo`` driver: ``$FEATUREFLOW_MOJO``, the one next to Python, or on PATH."""
    explicit = os.environ.get("FEATUREFLOW_MOJO")
    candidates = [Path(explicit)] if explicit else []
    candidates.append(Path(sys.executable).parent / "mojo")
    found = shutil.which("mojo")
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    msg = (
        "cannot find the Mojo toolchain: install it (pip install mojo==1.2.0) in the "
        "environment featureflow runs in, or set FEATUREFLOW_MOJO to the mojo executable"
    )
    raise SchemaError(msg)


@dataclass(frozen=True)
class Diagnostic:
    """One ``error:`` the compiler reported for a file."""

    line: int
    message: str


@dataclass(frozen=True)
class DocResult:
    """What ``mojo doc`` made of one file: its module JSON, or its errors."""

    module: dict[str, Any] | None
    errors: tuple[Diagnostic, ...] = ()
    cacheable: bool = True


def _toolchain_fingerprint(mojo: Path) -> bytes:
    digest = hashlib.sha256(_CACHE_FORMAT.encode())
    stat = mojo.resolve().stat()
    digest.update(f"{mojo.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    for marker in sorted(include_path().rglob("*.mojo")):
        digest.update(marker.read_bytes())
    return digest.digest()


def _cache_dir() -> Path:
    path = home() / "schema-cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


_memory_cache: dict[str, DocResult] = {}


def _load_cached(key: str) -> DocResult | None:
    if key in _memory_cache:
        return _memory_cache[key]
    path = _cache_dir() / f"{key}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        result = DocResult(
            data["module"], tuple(Diagnostic(d["line"], d["message"]) for d in data["errors"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    _memory_cache[key] = result
    return result


def _store_cached(key: str, result: DocResult) -> None:
    _memory_cache[key] = result
    data = {
        "module": result.module,
        "errors": [{"line": d.line, "message": d.message} for d in result.errors],
    }
    path = _cache_dir() / f"{key}.json"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)


def _parse_diagnostics(stderr: str, names: dict[str, int]) -> dict[int, list[Diagnostic]]:
    """``<path>:<line>:<col>: error: <message>`` lines, grouped by input index."""
    found: dict[int, list[Diagnostic]] = {}
    for text in stderr.splitlines():
        for name, index in names.items():
            if not text.startswith(name + ":"):
                continue
            parts = text[len(name) + 1 :].split(":", 3)
            if len(parts) == 4 and parts[0].isdigit() and parts[2].strip() == "error":
                found.setdefault(index, []).append(Diagnostic(int(parts[0]), parts[3].strip()))
    return found


def _run_batch(mojo: Path, sources: list[bytes]) -> list[DocResult | None]:
    """One ``mojo doc`` over a package of ``sources``; None where the outcome is unknown."""
    with tempfile.TemporaryDirectory(prefix="featureflow-schema-") as tmp:
        package = Path(tmp) / "ffschemas"
        package.mkdir()
        (package / "__init__.mojo").write_text("")
        names: dict[str, int] = {}
        for index, source in enumerate(sources):
            path = package / f"m{index}.mojo"
            path.write_bytes(source)
            names[str(path)] = index
        out = Path(tmp) / "doc.json"
        try:
            proc = subprocess.run(
                [str(mojo), "doc", "-I", str(include_path()), str(package), "-o", str(out)],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=_DOC_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            stderr, returncode = f"mojo doc ran over {_DOC_TIMEOUT_S} s", -1
        else:
            stderr, returncode = proc.stderr, proc.returncode
        if returncode == 0 and out.exists():
            modules = {
                m["name"]: m for m in json.loads(out.read_text(encoding="utf-8"))["decl"]["modules"]
            }
            return [DocResult(modules.get(f"m{i}", {})) for i in range(len(sources))]
        errors = _parse_diagnostics(stderr, names)
        if not errors and len(sources) == 1:
            tail = " ".join(stderr.strip().splitlines()[-3:]) or f"exit status {returncode}"
            return [DocResult(None, (Diagnostic(1, f"mojo doc failed: {tail}"),), cacheable=False)]
        return [
            DocResult(None, tuple(errors[i])) if i in errors else None for i in range(len(sources))
        ]


def document(sources: list[bytes]) -> list[DocResult]:
    """``mojo doc`` of each source text, from the cache where the same text was seen before."""
    mojo = mojo_executable()
    fingerprint = _toolchain_fingerprint(mojo)
    keys = [hashlib.sha256(fingerprint + s).hexdigest() for s in sources]
    results: list[DocResult | None] = [_load_cached(k) for k in keys]
    pending = [i for i, r in enumerate(results) if r is None]
    while pending:
        batch = _run_batch(mojo, [sources[i] for i in pending])
        if all(r is None for r in batch):
            # Errors attributable to no single file: document them one by one.
            batch = [_run_batch(mojo, [sources[i]])[0] for i in pending]
        for index, result in zip(pending, batch, strict=True):
            if result is not None:
                results[index] = result
                if result.cacheable:
                    _store_cached(keys[index], result)
        pending = [i for i in pending if results[i] is None]
    return [r for r in results if r is not None]
