"""Loader and bindings of the compiled Mojo kernels (``_native/kernels.so``).

The extension's RUNPATH points at the venv it was built in, so the Mojo
runtime libraries shipped next to it are preloaded with ``RTLD_GLOBAL``
first: that makes the package work wherever it is installed (Spark workers,
other machines). Each kernel takes the address of one int64 descriptor
array holding sizes, buffer addresses and codes; the layout is documented in
``mojo_ops/kernels.mojo`` (``read_inputs``, ``rolling_prepare``).
``rolling_stream_mode`` picks the rolling path: input in ts order (one pass
to check) streams — keyed count/sum/mean/min/max in input order when a
window's frames span few rows, else through key buckets in four phases;
other keyed aggregates through per-key slots, unkeyed in place —
with results written in input order; unsorted input (or count_distinct) is
grouped by key first (prepare, parts, finish). Parts and phases release the
GIL and run on two threads for large inputs. Kernel scratch comes from the
Arrow memory pool. The sliding sums are only given finite values:
`featureflow.ops._nonfinite` handles frames holding ±inf.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow.errors import FeatureflowError
from featureflow.ops._aggs import CODES
from featureflow.ops._inputs import VALUE_TYPES, Series
from featureflow.ops._tables import OutputColumn, WindowBounds

NATIVE_DIR = Path(__file__).with_name("_native")
MODULE_NAME = "kernels"
# dependency order: KGENCompilerRTShared needs the two others
RUNTIME_LIBS = (
    "libMSupportGlobals.so",
    "libAsyncRTRuntimeGlobals.so",
    "libKGENCompilerRTShared.so",
)
BUILD_INFO = "build_info.json"


class NativeLoadError(FeatureflowError, ImportError):
    """The compiled Mojo kernels could not be loaded; run ``make kernels``."""


def library_path() -> Path:
    return NATIVE_DIR / f"{MODULE_NAME}.so"


def build_info() -> dict[str, str]:
    """What scripts/build_kernels.py recorded (mojo version, source hash), if present."""
    try:
        data = json.loads((NATIVE_DIR / BUILD_INFO).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()}


def load() -> ModuleType:
    """Preload the Mojo runtime, then import the extension from ``_native/``."""
    path = library_path()
    if not path.is_file():
        msg = (
            f"compiled kernels not found at {path}; build them with "
            "`make kernels` (python scripts/build_kernels.py)"
        )
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
    except OSError as exc:
        msg = f"cannot load the Mojo kernels or their runtime from {NATIVE_DIR}: {exc}"
        raise NativeLoadError(msg) from exc
    return module


def _address(arr: pa.Array, index: int) -> int:
    buf = arr.buffers()[index]
    return 0 if buf is None else int(buf.address)


def _header(s: Series) -> list[int]:
    """Descriptor words 0..7 (see ``read_inputs`` in kernels.mojo): buffers by address."""
    width = s.values.type.byte_width
    codes = 0 if s.codes is None else int(s.codes.ctypes.data)
    return [
        s.n,
        _address(s.ts, 1) + s.ts.offset * 8,
        _address(s.values, 1) + s.values.offset * width,
        VALUE_TYPES[s.values.type],
        _address(s.values, 0),
        s.values.offset,
        codes,
        s.ngroups,
    ]


def _column_words(columns: list[OutputColumn]) -> list[int]:
    words: list[int] = []
    for c in columns:
        validity = 0 if c.validity is None else int(c.validity.address)
        words += [CODES[c.agg], int(c.data.address), validity, VALUE_TYPES[c.type]]
    return words


META_WORDS = 16
HEADER = 8
"""Descriptor words before the call-specific ones (``_header``)."""
_CONVERT = 2
"""``rolling_stream_mode``: streams over values converted to float64 first."""
_BUCKETED = 3
"""``rolling_stream_mode``: keyed count/sum/mean/min/max, the bucketed path."""
PARALLEL_MIN_ROWS = 200_000
"""Below this many rows one thread does a rolling call (threads cost ~0.1 ms)."""
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _rolling_scratch_bytes(n: int, ngroups: int, nwin: int) -> int:
    """Scratch for the rolling kernel (``rolling_scratch_bytes`` in kernels.mojo).

    It comes from the Arrow memory pool: its pages stay mapped between calls,
    so a repeated call does not pay the page faults of fresh memory again.
    """
    npad = (n + 7) // 8 * 8
    return 8 * META_WORDS + 8 * (2 * ngroups + 2) + 8 * 3 * n + npad * nwin + 64 * 8


def _stream_scratch_bytes(n: int, ngroups: int) -> int:
    """Scratch for each part of ``rolling_stream_part`` (``stream_scratch_bytes`` in
    kernels.mojo): 128 bytes of state per key, 24 bytes per row."""
    return 128 * ngroups + 24 * n + 64 * 4


BUCKETS = 256
"""Key buckets of the bucketed rolling path (``BUCKETS`` in kernels.mojo)."""


WALK_ROWS = 16
"""Bucketed path: a window's frames are recomputed by walking back each key's rows
where a frame holds at most about this many rows (estimated per bucket; a bucket
whose walks take over twice as many steps a row falls back), else maintained by
expiry and min/max deques (`bucket_windows` in kernels.mojo). 0: never walk."""


def _bucket_scratch_bytes(n: int, parts: int) -> int:
    """Scratch of a bucketed rolling call (``bucket_scratch_bytes`` in kernels.mojo):
    per-part bucket counts, the partitioned rows (20 bytes each) and one window's
    bucket-ordered results (32 bytes a row)."""
    return 8 * parts * BUCKETS + 52 * n + 64 * 10


INORDER_MAX_SPAN = 1 << 19
"""The in-order keyed path takes a window when its ring (`_in_order_ring_rows`) needs
at most this many rows (16 MiB): beyond that the ring leaves the caches and the
bucketed path, whose passes stay in cache, is faster (measured: 10 min windows of
the 10 M-event benchmark 1.8x faster in order, 1 h about even)."""


def _in_order_span_limit(n: int, parts: int) -> int:
    """The most rows a window's frames may span on the in-order keyed path: beyond
    it they leave the caches or (several parts) the second part's warm-up is a large
    share of its rows."""
    return min(INORDER_MAX_SPAN, n // 4) if parts > 1 else INORDER_MAX_SPAN


def _in_order_ring_rows(span: int, limit: int) -> int:
    """Ring rows (a power of two >= the window's span) of the in-order keyed path, or 0
    when the span exceeds `limit` and the window takes the bucketed path."""
    if span > limit:
        return 0
    return 1 << max(span - 1, 1).bit_length()


def _inorder_scratch_bytes(ngroups: int, ring: int) -> int:
    """Scratch of one part of the in-order keyed path (``inorder_scratch_bytes`` in
    kernels.mojo): 64 bytes of state a key and 32 bytes a ring row."""
    return 64 * ngroups + 32 * ring + 128


_SESSIONS_GROUPED = {"std", "var", "count_distinct"}
"""Session aggregates that only the grouping path computes."""


def _sessions_in_order_scratch_bytes(n: int, ngroups: int) -> int:
    """Scratch of keyed sessions over ts-ordered input with a fixed gap
    (``sessions_in_order_scratch_bytes`` in kernels.mojo): 64 bytes a key, 13 a row
    (only one row in several is touched: one a session)."""
    return 64 * ngroups + (n + 7) // 8 * 8 + 12 * n + 64 * 6


def _sessions_scratch_bytes(n: int, ngroups: int) -> int:
    """Scratch for the sessions kernel (``sessions_scratch_bytes`` in kernels.mojo)."""
    return 8 * (2 * ngroups + 2) + 8 * 3 * n + (n + 7) // 8 * 8 + 64 * 8


def _parts(n: int) -> int:
    """How many threads share a rolling call: the cores, for large inputs."""
    return min(2, os.cpu_count() or 1) if n >= PARALLEL_MIN_ROWS else 1


def _pool(workers: int) -> ThreadPoolExecutor:
    """A process-wide pool for the parts the calling thread does not run itself."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(workers, thread_name_prefix="featureflow-ops")
        return _executor


class NativeBackend:
    """The Mojo kernels behind the backend interface of `featureflow.ops._backend`."""

    name: Final = "mojo"

    def __init__(self, module: ModuleType) -> None:
        self._kernels = module

    def _call(self, kernel: str, words: list[int] | np.ndarray, *extra: int) -> int:
        desc = words if isinstance(words, np.ndarray) else np.array(words, dtype=np.int64)
        try:
            return int(getattr(self._kernels, kernel)(desc.ctypes.data, *extra))
        except Exception as exc:  # the extension raises plain Exception
            text = str(exc)
            if text.startswith("ValueError: "):
                raise ValueError(text.removeprefix("ValueError: ")) from None
            raise

    def int_key_codes(self, arr: pa.Array) -> tuple[np.ndarray, pa.Array] | None:
        """Dense int32 codes of integer keys without nulls, numbered in order of first
        occurrence (as ``dictionary_encode``), through a direct table over the key
        range; ``None`` when the range is too wide for a table (the caller hashes)."""
        n = len(arr)
        if n == 0 or arr.null_count or not pa.types.is_integer(arr.type):
            return None
        bounds = pc.min_max(arr)
        lo, hi = int(bounds["min"].as_py()), int(bounds["max"].as_py())
        span = hi - lo + 1
        if span > max(4 * n, 1 << 16) or span >= 1 << 31:
            return None
        keys = arr if arr.type == pa.int64() else arr.cast(pa.int64())
        table = pa.allocate_buffer(4 * span)
        codes = np.empty(n, dtype=np.int32)
        first = np.empty(min(n, span), dtype=np.int64)
        address = _address(keys, 1) + keys.offset * 8
        words = [n, address, lo, span, table.address, int(codes.ctypes.data)]
        g = self._call("encode_int_keys", [*words, int(first.ctypes.data)])
        return codes, arr.take(pa.array(first[:g]))

    def rolling(
        self,
        s: Series,
        windows: list[int],
        hop: int | None,
        aggs: list[str],
        columns: list[OutputColumn],
    ) -> None:
        words = [*_header(s), len(windows), hop or 0, len(aggs), 0, 0]
        desc = np.array(words + windows + _column_words(columns), dtype=np.int64)
        mode = self._call("rolling_stream_mode", desc) if s.n else 0
        if mode == _BUCKETED:
            self._rolling_keyed_in_order(s, desc, len(windows))
            return
        if mode:
            self._rolling_stream(s, desc, mode == _CONVERT)
            return
        scratch = pa.allocate_buffer(_rolling_scratch_bytes(s.n, s.ngroups, len(windows)))
        desc[HEADER + 3 : HEADER + 5] = [scratch.address, scratch.size]
        maxrun = self._call("rolling_prepare", desc)
        if s.n == 0 or maxrun < 0:  # nothing to do, or done on the count_distinct path
            return
        parts = _parts(s.n)
        deques = [pa.allocate_buffer(16 * max(maxrun, 1)) for _ in range(parts)]
        self._on_threads(
            [("rolling_part", desc, i, parts, deques[i].address) for i in range(parts)]
        )
        self._call("rolling_finish", desc)

    def _rolling_stream(self, s: Series, desc: np.ndarray, convert: bool) -> None:
        """Input in ts order: one streaming pass per window and part (kernels.mojo)."""
        values = pa.allocate_buffer(8 * s.n) if convert else None
        if values is not None:
            self._call("rolling_stream_convert", desc, values.address)
        vaddr = 0 if values is None else values.address
        parts = _parts(s.n)
        size = _stream_scratch_bytes(s.n, s.ngroups)
        scratch = [pa.allocate_buffer(size) for _ in range(parts)]
        self._on_threads(
            [
                ("rolling_stream_part", desc, i, parts, scratch[i].address, vaddr)
                for i in range(parts)
            ]
        )

    def _rolling_keyed_in_order(self, s: Series, desc: np.ndarray, nwin: int) -> None:
        """Keyed count/sum/mean/min/max over input in ts order: each window whose
        frames span few rows (`_in_order_ring_rows`) streams in input order, the
        others take the bucketed path."""
        parts = _parts(s.n)
        bucketed = []
        scratch: list[pa.Buffer] = []
        limit = _in_order_span_limit(s.n, parts)
        for w in range(nwin):
            ring = _in_order_ring_rows(self._call("rolling_inorder_span", desc, w, limit), limit)
            if ring == 0:
                bucketed.append(w)
                continue
            size = _inorder_scratch_bytes(s.ngroups, ring)
            if not scratch or scratch[0].size < size:
                scratch = [pa.allocate_buffer(size) for _ in range(parts)]
            self._on_threads(
                [
                    ("rolling_inorder_part", desc, i, parts, w, scratch[i].address, ring)
                    for i in range(parts)
                ]
            )
        if bucketed:
            self._rolling_bucketed(s, desc, bucketed)

    def _rolling_bucketed(self, s: Series, desc: np.ndarray, windows: list[int]) -> None:
        """Keyed input in ts order: partition, per-bucket windows, back to input
        order; each phase split over the threads (kernels.mojo)."""
        parts = _parts(s.n)
        scratch = pa.allocate_buffer(_bucket_scratch_bytes(s.n, parts))

        def phase(number: int, window: int = 0) -> None:
            self._on_threads(
                [
                    (
                        "rolling_bucketed_part",
                        desc,
                        number,
                        i,
                        parts,
                        scratch.address,
                        window,
                        WALK_ROWS,
                    )
                    for i in range(parts)
                ]
            )

        phase(0)
        phase(1)
        for w in windows:
            phase(2, w)
            phase(3, w)

    def _on_threads(self, calls: list[tuple[Any, ...]]) -> None:
        """Run kernel calls that release the GIL: the first here, the others on the pool."""
        others = (
            [_pool(len(calls) - 1).submit(self._call, *c) for c in calls[1:]] if calls[1:] else []
        )
        self._call(*calls[0])
        for f in others:
            f.result()

    def hopping(
        self,
        s: Series,
        size: int,
        step: int,
        aggs: list[str],
        count_only: bool,
        bounds: WindowBounds,
        columns: list[OutputColumn],
    ) -> int:
        words = [*_header(s), size, step, len(aggs), int(count_only), bounds.capacity]
        return self._call("hopping", words + bounds.words() + _column_words(columns))

    def sessions(
        self,
        s: Series,
        gap: int,
        gaps: np.ndarray | None,
        aggs: list[str],
        bounds: WindowBounds,
        columns: list[OutputColumn],
    ) -> int:
        gaps_addr = 0 if gaps is None else int(gaps.ctypes.data)
        words = [*_header(s), 0 if gaps is not None else gap, gaps_addr, len(aggs)]
        words += bounds.words() + _column_words(columns)
        in_order = s.codes is not None and gaps is None and not _SESSIONS_GROUPED & set(aggs)
        sizes = [_sessions_in_order_scratch_bytes(s.n, s.ngroups)] if in_order else []
        for size in [*sizes, _sessions_scratch_bytes(s.n, s.ngroups)]:
            scratch = pa.allocate_buffer(size)
            m = self._call("sessions", [*words, scratch.address, scratch.size])
            if m >= 0:  # -1: input not in ts order, the grouping path needs more scratch
                return m
        msg = "internal: sessions kernel refused its scratch"
        raise RuntimeError(msg)
