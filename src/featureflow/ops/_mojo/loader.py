"""Loading ``_native/kernels.so`` and refusing one that does not match.

The extension's RUNPATH points at the venv it was built in, so the Mojo
runtime libraries shipped next to it are preloaded with ``RTLD_GLOBAL``
first: that makes the package work wherever it is installed (Spark workers,
other machines).

A library is only used when it was built for this code: its ABI version
(``ABI_VERSION`` in ``mojo_ops/featureflow_kernels/abi.mojo``) must equal
`ABI_VERSION`, its aggregate and value-type codes must equal Python's tables,
and the digest of the Mojo sources it was compiled from (baked in by
``scripts/build_kernels.py``) must equal the digest of the sources in this
checkout (or, where the package is installed without them, the digest the build
recorded in ``build_info.json``). Otherwise `load` raises `StaleKernelsError`,
which says to run ``make kernels``.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Final

from featureflow.errors import FeatureflowError
from featureflow.ops._aggs import CODES
from featureflow.ops._inputs import VALUE_TYPES
from featureflow.ops._mojo.descriptor import HEADER

ABI_VERSION: Final = 9
"""The kernels' ABI this Python side speaks (``ABI_VERSION`` in abi.mojo)."""
NATIVE_DIR = Path(__file__).resolve().parent.parent / "_native"
SOURCES_DIR = Path(__file__).resolve().parents[4] / "mojo_ops"
"""The Mojo sources, where the package runs from a checkout (absent in a wheel)."""
MODULE_NAME = "kernels"
# dependency order: KGENCompilerRTShared needs the two others
RUNTIME_LIBS = (
    "libMSupportGlobals.so",
    "libAsyncRTRuntimeGlobals.so",
    "libKGENCompilerRTShared.so",
)
BUILD_INFO = "build_info.json"
RUNTIME_ENV = ("PYTHONPATH", "PYTHONEXECUTABLE")
"""Variables the Mojo runtime setenv()s when the extension initialises (for an
interpreter it would embed): PYTHONPATH=":" and PYTHONEXECUTABLE naming the first
python3 on PATH, which makes a child venv Python start outside its venv."""
REBUILD = "run `make kernels` (python scripts/build_kernels.py)"


class NativeLoadError(FeatureflowError, ImportError):
    """The compiled Mojo kernels could not be loaded; run ``make kernels``."""


class StaleKernelsError(NativeLoadError):
    """The compiled kernels were built from other sources or for another ABI."""


def library_path() -> Path:
    return NATIVE_DIR / f"{MODULE_NAME}.so"


def build_info() -> dict[str, str]:
    """What scripts/build_kernels.py recorded (mojo version, source digest), if present."""
    try:
        data = json.loads((NATIVE_DIR / BUILD_INFO).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()}


def sources_digest(root: Path) -> str | None:
    """Digest of every ``.mojo`` file below `root` (paths and contents), or ``None``
    when there are none. The build bakes it into the library; `load` compares."""
    files = sorted(p for p in root.rglob("*.mojo") if "__mojocache__" not in p.parts)
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def load() -> ModuleType:
    """Preload the Mojo runtime, import the extension from ``_native/`` and check it.

    Raises:
        NativeLoadError: the library or its runtime is missing or does not load.
        StaleKernelsError: it was built from other sources or for another ABI.
    """
    path = library_path()
    if not path.is_file():
        msg = f"compiled kernels not found at {path}; {REBUILD}"
        raise NativeLoadError(msg)
    try:
        for lib in RUNTIME_LIBS:
            ctypes.CDLL(str(NATIVE_DIR / lib), mode=ctypes.RTLD_GLOBAL)
        loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
        spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
        if spec is None:
            msg = f"cannot create an import spec for {path}"
            raise NativeLoadError(msg)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        _restore_environment()
    except OSError as exc:
        msg = f"cannot load the Mojo kernels or their runtime from {NATIVE_DIR}: {exc}"
        raise NativeLoadError(msg) from exc
    check(module, path)
    return module


def _restore_environment() -> None:
    """Give this process's children the environment it had before the extension
    initialised (`os.environ` still holds it: the runtime changed only the C one)."""
    for name in RUNTIME_ENV:
        if name in os.environ:
            os.putenv(name, os.environ[name])
        else:
            os.unsetenv(name)


def check(module: ModuleType, path: Path) -> None:
    """Refuse a library whose ABI facts or source digest differ from this code's."""
    abi = getattr(module, "abi", None)
    if abi is None:
        msg = f"the kernels at {path} predate the ABI check (no `abi()`); {REBUILD}"
        raise StaleKernelsError(msg)
    facts = abi()
    if facts["abi_version"] != ABI_VERSION:
        msg = (
            f"the kernels at {path} have ABI version {facts['abi_version']}, this featureflow "
            f"speaks {ABI_VERSION}; {REBUILD}"
        )
        raise StaleKernelsError(msg)
    dtypes = {str(t): code for t, code in VALUE_TYPES.items()}
    codes_match = dict(facts["aggs"]) == CODES and dict(facts["dtypes"]) == dtypes
    if not codes_match or facts["header_words"] != HEADER:
        msg = f"the kernels at {path} use other codes or descriptor header; {REBUILD}"
        raise StaleKernelsError(msg)
    expected = sources_digest(SOURCES_DIR) or build_info().get("sources_sha256")
    built = str(facts["sources_digest"])
    if expected is not None and built != expected:
        msg = (
            f"the kernels at {path} were built from other sources (digest {built}, "
            f"the sources are {expected}); {REBUILD}"
        )
        raise StaleKernelsError(msg)
