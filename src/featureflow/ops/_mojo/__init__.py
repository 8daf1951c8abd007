"""The compiled Mojo kernels behind the backend interface, one module a job.

- `loader`: finds ``_native/kernels.so`` (the build output of ``make kernels``),
  preloads the Mojo runtime next to it, imports it and refuses a library built
  from other sources or for another ABI version (`StaleKernelsError`).
- `descriptor`: packs the int64 descriptor each kernel reads (layout documented
  in ``mojo_ops/featureflow_kernels/abi.mojo`` and at each entry point).
- `planning`: which rolling / sessions path a call takes and how many threads.
- `threads`: the pool the parts of a call run on with the GIL released.
- `backend`: `NativeBackend`, the calls themselves; scratch sizes are asked of
  the library, never recomputed here.
"""

from __future__ import annotations

from featureflow.ops._mojo.backend import NativeBackend
from featureflow.ops._mojo.loader import (
    NativeLoadError,
    StaleKernelsError,
    build_info,
    library_path,
    load,
)

__all__ = [
    "NativeBackend",
    "NativeLoadError",
    "StaleKernelsError",
    "build_info",
    "library_path",
    "load",
]
