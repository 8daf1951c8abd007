"""Compile the Mojo kernels in mojo_ops/ into src/featureflow/ops/_native/.

Each ``mojo_ops/<name>.mojo`` that defines ``PyInit_<name>`` becomes the
Python extension ``_native/<name>.so``; the Mojo runtime libraries it links
against are copied next to it so the package works without the build venv.
Skips work when outputs are newer than every source (``--force`` rebuilds).
Exits non-zero, printing the compiler's diagnostics, when a build fails.

Usage: .venv/bin/python scripts/build_kernels.py [--force]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "mojo_ops"
OUT = ROOT / "src" / "featureflow" / "ops" / "_native"
RUNTIME_LIBS = (
    "libKGENCompilerRTShared.so",
    "libMSupportGlobals.so",
    "libAsyncRTRuntimeGlobals.so",
)


def mojo_binary() -> Path:
    candidate = Path(sys.executable).with_name("mojo")
    if candidate.exists():
        return candidate
    found = shutil.which("mojo")
    if found is None:
        sys.exit("build_kernels: no `mojo` next to this Python or on PATH; pip install mojo")
    return Path(found)


def runtime_dir() -> Path:
    import modular  # type: ignore[import-not-found]  # installed with the mojo wheel

    for base in modular.__path__:
        lib = Path(base) / "lib"
        if (lib / RUNTIME_LIBS[0]).exists():
            return lib
    sys.exit("build_kernels: Mojo runtime libraries not found in site-packages/modular/lib")


def sources_digest(sources: list[Path]) -> str:
    digest = hashlib.sha256()
    for src in sources:
        digest.update(src.name.encode())
        digest.update(src.read_bytes())
    return digest.hexdigest()[:16]


def build(force: bool) -> int:
    sources = sorted(SOURCES.glob("*.mojo"))
    modules = [s for s in sources if f"PyInit_{s.stem}" in s.read_text()]
    if not modules:
        sys.exit(f"build_kernels: no extension modules (PyInit_<name>) in {SOURCES}")
    OUT.mkdir(parents=True, exist_ok=True)
    mojo = mojo_binary()
    newest_source = max(s.stat().st_mtime for s in sources)
    for module in modules:
        target = OUT / f"{module.stem}.so"
        if not force and target.exists() and target.stat().st_mtime >= newest_source:
            print(f"build_kernels: {target.relative_to(ROOT)} is up to date")
            continue
        tmp = target.with_suffix(".so.tmp")
        cmd = [str(mojo), "build", str(module), "--emit", "shared-lib", "-o", str(tmp)]
        print("build_kernels:", " ".join(cmd), flush=True)
        result = subprocess.run(cmd, cwd=SOURCES, capture_output=True, text=True)
        if result.returncode != 0:
            sys.stderr.write(result.stdout + result.stderr)
            tmp.unlink(missing_ok=True)
            print(f"build_kernels: FAILED to compile {module.name}", file=sys.stderr)
            return result.returncode or 1
        tmp.replace(target)  # atomic: a running worker never sees a half-written .so
    libs = runtime_dir()
    for name in RUNTIME_LIBS:
        src, dst = libs / name, OUT / name
        if force or not dst.exists() or dst.stat().st_size != src.stat().st_size:
            shutil.copy2(src, dst)
    version = subprocess.run([str(mojo), "--version"], capture_output=True, text=True).stdout
    info = {"mojo_version": version.strip(), "sources_sha256": sources_digest(sources)}
    (OUT / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    return build(parser.parse_args().force)


if __name__ == "__main__":
    sys.exit(main())
