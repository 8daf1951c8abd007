"""Choosing the backend: the Mojo kernels when they load, else the numpy reference.

``FEATUREFLOW_BACKEND=numpy`` forces the reference; ``=mojo`` makes a load
failure an error instead of a silent fallback; unset (or ``auto``) tries Mojo
first. The choice is made once, on first use, so importing
`featureflow.ops` stays cheap.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import pyarrow as pa

from featureflow.ops._byte_rows import ByteRows
from featureflow.ops._flat_json import FlatField, FlatRead
from featureflow.ops._inputs import Series
from featureflow.ops._query import Plan, Run
from featureflow.ops._resume import InitialRecords, KeyedRows, RunColumns, Spliced
from featureflow.ops._tables import OutputColumn, WindowBounds

BackendName = Literal["mojo", "numpy"]
ENV_VAR = "FEATUREFLOW_BACKEND"


class Backend(Protocol):
    @property
    def name(self) -> BackendName: ...

    def rolling(
        self,
        s: Series,
        windows: list[int],
        hop: int | None,
        aggs: list[str],
        columns: list[OutputColumn],
    ) -> None: ...

    def rolling_at(
        self,
        runs: list[Run],
        plan: Plan,
        windows: list[int],
        hop: int | None,
        aggs: list[str],
        columns: list[OutputColumn],
        frames_in: tuple[np.ndarray, np.ndarray] | None = None,
        frames_out: tuple[np.ndarray, np.ndarray | None] | None = None,
        clip_ns: int = 0,
        added_run: int | None = None,
    ) -> bool:
        """Frames at query points; resumes ``frames_in`` (held states, per row and
        window, and each plan group's row of them, -1 none; `_query.FrameStates`
        ``words`` and ``rows_for``) where it can and writes the final frames' states,
        clipped to ``clip_ns``, to ``frames_out`` (states and each group's row of them;
        None rows: row g); ``added_run``: the run holding the rows added since
        ``frames_in`` were written. Returns whether it wrote them."""
        ...

    def merge_runs(self, runs: list[Run], cut_ns: int) -> np.ndarray: ...

    def run_segments(self, run_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Per key of ``keys`` (int64), ``[left, right)`` of its rows in ``run_keys`` (int64,
        sorted): an int64 array of shape (len(keys), 2), ``np.searchsorted``'s left and
        right sides. Fastest for ascending ``keys``; any order is answered."""
        ...

    def sort_run(
        self, keys: np.ndarray, ts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def crc64_rows(self, data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Redis's CRC-64 of each row ``data[offsets[i]:offsets[i + 1]]`` (uint64)."""
        ...

    def stamp_micros(
        self, stamps: pa.StringArray, max_millis: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per timestamp text: epoch µs (int64, 0 where unknown) and whether it was read."""
        ...

    def gather_chunks(self, chunks: list[pa.Array], rows: np.ndarray) -> pa.Array | None:
        """Rows ``rows`` (int64, contiguous) of the chunks' concatenation, in one pass
        over the chunks' buffers; None where the backend has no such pass or the type is
        not fixed-width (the caller joins the chunks and takes). See
        :func:`featureflow.ops.gather_chunks`."""
        ...

    def ascii_decimal(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Non-negative int64s (contiguous) as ASCII decimal digits: (uint8 matrix, int64
        lengths), each row's bytes left-aligned. See :func:`featureflow.ops.ascii_decimal`."""
        ...

    def varint(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Int64s (contiguous) as protobuf varints, laid out as :meth:`ascii_decimal`."""
        ...

    def join_rows(self, parts: list[ByteRows], n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Row ``i`` of the result is row ``i`` of each part, in order, as (bytes, int64
        offsets); None where the backend has no such pass (the caller joins)."""
        ...

    def hash_payloads(
        self, names: list[bytes], views_of: list[int], values: list[list[ByteRows]],
        rows: np.ndarray, version: bytes,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:  # fmt: skip
        """Each entity's Redis ``RESTORE`` payload (bytes, int64 offsets) and whether it
        holds one (bool; empty rows where not); None where the backend has no such pass
        (the caller builds them). See :func:`featureflow.ops.hash_payloads`."""
        ...

    def read_flat_json(self, values: pa.BinaryArray, fields: list[FlatField]) -> FlatRead | None:
        """The flat JSON records of ``values`` read into ``fields``' columns, the others
        left; None where the backend has no such pass (every record is the caller's)."""
        ...

    def gather_runs(
        self, runs: list[RunColumns], keys: np.ndarray, from_ns: np.ndarray,
        capacity: int | None = None,
    ) -> KeyedRows: ...  # fmt: skip

    def resume_sessions(
        self, init: InitialRecords, keys: np.ndarray, kept: KeyedRows, new: KeyedRows,
        gap: int, max_length: int, every: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...  # fmt: skip

    def record_segments(
        self, own: np.ndarray, keys: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def splice_records(
        self, old: np.ndarray, cut: np.ndarray, end: np.ndarray, new: np.ndarray,
        keys: np.ndarray, gap: int, max_length: int, watermark: int,
    ) -> Spliced: ...  # fmt: skip

    def hopping(
        self,
        s: Series,
        size: int,
        step: int,
        aggs: list[str],
        count_only: bool,
        bounds: WindowBounds,
        columns: list[OutputColumn],
    ) -> int: ...

    def sessions(
        self,
        s: Series,
        gap: int,
        gaps: np.ndarray | None,
        max_length: int | None,
        aggs: list[str],
        bounds: WindowBounds,
        columns: list[OutputColumn],
    ) -> int: ...


@dataclass(frozen=True)
class Choice:
    backend: Backend
    reason: str
    library: str | None


_choice: Choice | None = None


def _choose() -> Choice:
    from featureflow.ops import _mojo, _reference

    wanted = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if wanted not in ("auto", "mojo", "numpy"):
        msg = f"{ENV_VAR}={wanted!r}: expected 'mojo', 'numpy' or 'auto'"
        raise ValueError(msg)
    if wanted == "numpy":
        return Choice(_reference.ReferenceBackend(), f"forced by {ENV_VAR}=numpy", None)
    try:
        module = _mojo.load()
    except _mojo.NativeLoadError as exc:
        if wanted == "mojo":
            raise
        return Choice(_reference.ReferenceBackend(), f"Mojo kernels unavailable: {exc}", None)
    path = str(_mojo.library_path())
    return Choice(_mojo.NativeBackend(module), f"Mojo kernels loaded from {path}", path)


def current() -> Choice:
    """The backend in use, chosen (and the kernels loaded) on first call."""
    global _choice
    if _choice is None:
        _choice = _choose()
    return _choice


def reset() -> None:
    """Forget the choice so the next call re-reads the environment (tests)."""
    global _choice
    _choice = None
