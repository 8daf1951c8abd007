"""Compile the Mojo kernels in mojo_ops/ into src/featureflow/ops/_native/.

Each ``mojo_ops/<name>.mojo`` that defines ``PyInit_<name>`` becomes the
Python extension ``_native/<name>.so``, compiled with ``-I mojo_ops`` so that
it imports the ``featureflow_kernels`` package, and with the digest of every
``.mojo`` file below mojo_ops/ baked in (``-D FEATUREFLOW_KERNELS_DIGEST``):
the loader refuses a library whose digest differs from the sources'. The Mojo
runtime libraries it links against are copied next to it so the package works
without the build venv. Skips work when ``build_info.json`` records the
sources' digest already (``--force`` rebuilds). Exits non-zero, printing the
compiler's diagnostics, when a build fails.

Usage: .venv/bin/python scripts/build_kernels.py [--force]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from featureflow.ops._mojo.loader import sources_digest  # noqa: E402  # one digest for both

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


def build(force: bool) -> int:
    modules = [s for s in sorted(SOURCES.glob("*.mojo")) if f"PyInit_{s.stem}" in s.read_text()]
    if not modules:
        sys.exit(f"build_kernels: no extension modules (PyInit_<name>) in {SOURCES}")
    digest = sources_digest(SOURCES)
    OUT.mkdir(parents=True, exist_ok=True)
    mojo = mojo_binary()
    info_path = OUT / "build_info.json"
    built = json.loads(info_path.read_text()).get("sources_sha256") if info_path.exists() else None
    targets = [OUT / f"{module.stem}.so" for module in modules]
    if not force and built == digest and all(t.exists() for t in targets):
        print(f"build_kernels: {OUT.relative_to(ROOT)} is up to date (sources {digest})")
        return 0
    info_path.unlink(missing_ok=True)  # a failed build leaves no claim of a digest
    for module, target in zip(modules, targets, strict=True):
        tmp = target.with_suffix(".so.tmp")
        cmd = [
            str(mojo), "build", "-I", str(SOURCES), "-D", f"FEATUREFLOW_KERNELS_DIGEST={digest}",
            str(module), "--emit", "shared-lib", "-o", str(tmp),
        ]  # fmt: skip
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
    info = {"mojo_version": version.strip(), "sources_sha256": digest}
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    return build(parser.parse_args().force)


if __name__ == "__main__":
    sys.exit(main())
