"""`NativeBackend`: the backend interface of `featureflow.ops._backend` over the
loaded Mojo kernels (see `featureflow.ops._mojo` for the other jobs).

Kernel scratch comes from the Arrow memory pool: its pages stay mapped between
calls, so a repeated call does not pay the page faults of fresh memory again.
Its sizes are asked of the library (``scratch_bytes``). The sliding sums are
only given finite values: `featureflow.ops._nonfinite` handles frames holding
±inf.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featureflow.ops._byte_rows import ByteRows
from featureflow.ops._checksums import SLICING_TABLES
from featureflow.ops._digits import VARINT_WIDTH
from featureflow.ops._flat_json import KIND_CODES, FlatColumn, FlatField, FlatRead
from featureflow.ops._inputs import VALUE_TYPES, Series
from featureflow.ops._mojo import descriptor, planning, threads
from featureflow.ops._query import Plan, Run
from featureflow.ops._resume import (
    R_COL,
    R_HEAD,
    InitialRecords,
    KeyedRows,
    RunColumns,
    Spliced,
    float_values,
    pooled,
    record_words,
    reference_sort_run,
)
from featureflow.ops._tables import OutputColumn, WindowBounds

_SESSIONS_SLACK: Final = 1024
"""`resume_sessions`' room for sessions beyond its estimate (records)."""


def _int64_array(array: np.ndarray, shape: tuple[int, ...]) -> bool:
    """Whether ``array`` is C-contiguous int64 of ``shape``, as a kernel reads it."""
    return array.shape == shape and array.dtype == np.int64 and array.flags.c_contiguous


def _check_rows(name: str, states: np.ndarray, rows: np.ndarray,
                shape: tuple[int, int, int], lowest: int) -> None:
    """Raise ValueError unless ``states`` are C-contiguous int64 ``(n, *shape[1:])`` and
    ``rows`` one C-contiguous int64 row per group (``shape[0]``), each in
    ``[lowest, n)``: the kernel reads and writes only there."""
    if not _int64_array(states, (len(states), *shape[1:])):
        msg = f"{name}: expected C-contiguous int64 states of shape (rows, {shape[1:]})"
        raise ValueError(msg)
    groups = shape[0]
    if not _int64_array(rows, (groups,)) or (
        groups and not lowest <= int(rows.min()) <= int(rows.max()) < len(states)
    ):
        msg = f"{name}: expected {groups} int64 rows, each {lowest} or more and below {len(states)}"
        raise ValueError(msg)


class NativeBackend:
    """The Mojo kernels behind the backend interface of `featureflow.ops._backend`."""

    name: Final = "mojo"

    def __init__(self, module: ModuleType) -> None:
        self._kernels = module
        facts = module.abi()
        self._convert = int(facts["stream_convert"])
        self._bucketed = int(facts["stream_bucketed"])
        # 0 in a library before ABI 4 (loaded unchecked by bench/kernels_ab_inproc.py):
        # no frame states are kept there
        self.frame_words = int(facts.get("frame_words", 0))
        """Words of one (key, window) frame state (rolling/_resume.mojo)."""
        layout = (facts.get("session_record_head"), facts.get("session_record_column"))
        if layout != (R_HEAD, R_COL):
            msg = f"the kernels' session records are laid out as {layout}, not {(R_HEAD, R_COL)}"
            raise ValueError(msg)
        self._sessions_per_row = 1 / 8
        """`resume_sessions`' room for sessions beyond one a key, per row: learnt."""

    def _call(self, kernel: str, words: list[int] | np.ndarray, *extra: int) -> int:
        desc = words if isinstance(words, np.ndarray) else np.array(words, dtype=np.int64)
        try:
            return int(getattr(self._kernels, kernel)(desc.ctypes.data, *extra))
        except Exception as exc:  # the extension raises plain Exception
            text = str(exc)
            if text.startswith("ValueError: "):
                raise ValueError(text.removeprefix("ValueError: ")) from None
            raise

    def _scratch(self, kind: str, a: int, b: int = 0, c: int = 0) -> int:
        """Bytes of scratch kernel `kind` needs (``scratch_bytes`` in kernels.mojo)."""
        return int(self._kernels.scratch_bytes(kind, a, b, c))

    def _on_threads(self, calls: list[tuple[Any, ...]]) -> None:
        """Run kernel calls that release the GIL: the first here, the others on the pool."""
        threads.on_threads(self._call, calls)

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
        address = descriptor.address(keys, 1) + keys.offset * 8
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
        desc = descriptor.rolling(s, windows, hop, len(aggs), columns)
        mode = self._call("rolling_stream_mode", desc) if s.n else 0
        if mode == self._bucketed:
            self._rolling_keyed_in_order(s, desc, len(windows))
            return
        if mode:
            self._rolling_stream(s, desc, mode == self._convert)
            return
        scratch = pa.allocate_buffer(self._scratch("rolling", s.n, s.ngroups, len(windows)))
        desc[descriptor.ROLLING_SCRATCH] = [scratch.address, scratch.size]
        maxrun = self._call("rolling_prepare", desc)
        if s.n == 0 or maxrun < 0:  # nothing to do, or done on the count_distinct path
            return
        parts = planning.parts(s.n)
        deques = [pa.allocate_buffer(self._scratch("deques", maxrun)) for _ in range(parts)]
        self._on_threads(
            [("rolling_part", desc, i, parts, deques[i].address) for i in range(parts)]
        )
        self._call("rolling_finish", desc)

    def _rolling_stream(self, s: Series, desc: np.ndarray, convert: bool) -> None:
        """Input in ts order: one streaming pass per window and part (rolling/__init__.mojo)."""
        values = pa.allocate_buffer(8 * s.n) if convert else None
        if values is not None:
            self._call("rolling_stream_convert", desc, values.address)
        vaddr = 0 if values is None else values.address
        parts = planning.parts(s.n)
        size = self._scratch("stream", s.n, s.ngroups)
        scratch = [pa.allocate_buffer(size) for _ in range(parts)]
        self._on_threads(
            [
                ("rolling_stream_part", desc, i, parts, scratch[i].address, vaddr)
                for i in range(parts)
            ]
        )

    def _rolling_keyed_in_order(self, s: Series, desc: np.ndarray, nwin: int) -> None:
        """Keyed count/sum/mean/min/max over input in ts order: each window whose
        frames span few rows (`planning.in_order_ring_rows`) streams in input order,
        the others take the bucketed path."""
        parts = planning.parts(s.n)
        bucketed = []
        scratch: list[pa.Buffer] = []
        limit = planning.in_order_span_limit(s.n, parts)
        for w in range(nwin):
            span = self._call("rolling_inorder_span", desc, w, limit)
            ring = planning.in_order_ring_rows(span, limit)
            if ring == 0:
                bucketed.append(w)
                continue
            size = self._scratch("inorder", s.ngroups, ring)
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
        order; each phase split over the threads (rolling/_bucketed.mojo)."""
        parts = planning.parts(s.n)
        scratch = pa.allocate_buffer(self._scratch("bucketed", s.n, parts))

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
                        planning.WALK_ROWS,
                    )
                    for i in range(parts)
                ]
            )

        phase(0)
        phase(1)
        for w in windows:
            phase(2, w)
            phase(3, w)

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
        """Frames at query points over runs (rolling/_query.mojo), resuming the frame
        states of ``frames_in`` and writing the new ones to ``frames_out``
        (rolling/_resume.mojo). ``frames_in``: held states (``(rows, windows,
        frame_words)`` int64, C-contiguous, read in place) and each group key's row of
        them (int64, -1: none). ``frames_out``: states of that shape and each group key's
        row to write (int64; None: row g of ``(groups, windows, frame_words)``); they may
        be ``frames_in``'s array when each key writes its held row or one no key reads.
        ``added_run``: the run of the rows added since ``frames_in`` were written."""
        if plan.nq == 0:
            return frames_out is not None  # no key: no state
        groups = len(plan.group_keys)
        shape = (groups, len(windows), self.frame_words)
        held, rows = frames_in if frames_in is not None else (None, None)
        out, out_rows = frames_out if frames_out is not None else (None, None)
        if held is not None and rows is not None:
            _check_rows("frames_in", held, rows, shape, -1)
        if out is not None:
            if out_rows is None:
                if not _int64_array(out, shape):
                    msg = f"frames_out: expected a C-contiguous int64 array of shape {shape}"
                    raise ValueError(msg)
            else:
                _check_rows("frames_out", out, out_rows, shape, 0)
        dtype = VALUE_TYPES[runs[0].values.type]
        words = [len(runs), len(plan.group_keys), plan.nq, len(windows), hop or 0, len(aggs)]
        words += [dtype, int(plan.qts.ctypes.data), int(plan.qout.ctypes.data)]
        words += [int(plan.qoff.ctypes.data), int(plan.segs.ctypes.data), plan.capacity]
        words += [0 if held is None else int(held.ctypes.data)]
        words += [0 if out is None else int(out.ctypes.data), int(clip_ns)]
        words += [-1 if added_run is None else added_run]
        words += [0 if rows is None else int(rows.ctypes.data)]
        words += [0 if out_rows is None else int(out_rows.ctypes.data)]
        for run in runs:
            v = run.values
            words += [
                int(run.ts.ctypes.data),
                descriptor.address(v, 1) + v.offset * v.type.byte_width,
                descriptor.address(v, 0),
                v.offset,
            ]
        desc = np.array(words + windows + descriptor.column_words(columns), dtype=np.int64)
        scratch = pa.allocate_buffer(self._scratch("query", plan.capacity))
        self._call("rolling_query", desc, scratch.address)
        return frames_out is not None

    def sort_run(
        self, keys: np.ndarray, ts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(order, distinct keys, offsets): a counting sort through a direct table over
        the key range (runs.mojo), or numpy's lexsort when the range is too wide."""
        n = len(keys)
        if n == 0:
            return reference_sort_run(keys, ts)
        lo, hi = int(keys.min()), int(keys.max())
        span = hi - lo + 1
        if span > max(4 * n, 1 << 16) or span >= 1 << 31:
            return reference_sort_run(keys, ts)
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        ts = np.ascontiguousarray(ts, dtype=np.int64)
        table = np.empty(span + 1, np.int64)
        order = np.empty(n, np.int64)
        scratch = np.empty(n, np.int64)
        distinct = np.empty(min(n, span), np.int64)
        offsets = np.empty(min(n, span) + 1, np.int64)
        words = [n, keys.ctypes.data, ts.ctypes.data, lo, span, table.ctypes.data,
                 order.ctypes.data, scratch.ctypes.data, distinct.ctypes.data,
                 offsets.ctypes.data]  # fmt: skip
        g = self._call("sort_run", words)
        return order, distinct[:g], offsets[: g + 1]

    def gather_runs(
        self, runs: list[RunColumns], keys: np.ndarray, from_ns: np.ndarray,
        capacity: int | None = None,
    ) -> KeyedRows:  # fmt: skip
        """The keys' rows at or after ``from_ns`` from every run, in ts order (runs.mojo);
        ``capacity``: the rows expected (more: the call is made again with room for all)."""
        ncols = len(runs[0][2]) if runs else 0
        everything = max(sum(len(run[1]) for run in runs), 1)
        room = everything if capacity is None else max(min(capacity, everything), 1)
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        from_ns = np.ascontiguousarray(from_ns, dtype=np.int64)
        head = [len(runs), ncols, len(keys), keys.ctypes.data, from_ns.ctypes.data]
        inputs: list[int] = []
        held: list[object] = []  # keep converted columns alive during the call
        for run_keys, run_ts, _ in runs:
            run_keys = np.ascontiguousarray(run_keys, dtype=np.int64)
            run_ts = np.ascontiguousarray(run_ts, dtype=np.int64)
            held += [run_keys, run_ts]
            inputs += [len(run_ts), run_keys.ctypes.data, run_ts.ctypes.data]
        for _, _, columns in runs:
            for column in columns:
                if column.type not in VALUE_TYPES:
                    column = pa.array(float_values(column))
                held.append(column)
                data = descriptor.address(column, 1) + column.offset * column.type.byte_width
                inputs += [data, VALUE_TYPES[column.type], descriptor.address(column, 0),
                           column.offset]  # fmt: skip
        # the scratch sorts one key's rows at a time (those whose runs interleave in time)
        widest = sum(_widest_key(np.asarray(run[0])) for run in runs)
        while True:
            offsets = pooled((len(keys) + 1,))
            ts, rows = pooled((room,)), pooled((room,))
            scratch = pooled((2 * min(room, widest),))
            values = [pooled((room,), np.float64) for _ in range(ncols)]
            words = [*head, offsets.ctypes.data, ts.ctypes.data, rows.ctypes.data,
                     scratch.ctypes.data, room, *inputs,
                     *(v.ctypes.data for v in values)]  # fmt: skip
            m = self._call("gather_runs", words)
            if m >= 0:
                return KeyedRows(ts[:m], [v[:m] for v in values], offsets, rows[:m])
            room = everything

    def resume_sessions(
        self, init: InitialRecords, keys: np.ndarray, kept: KeyedRows, new: KeyedRows,
        gap: int, max_length: int, every: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """Sessions continued from ``init`` over the kept and new rows (sessions/_resume.mojo)."""
        ncols = len(new.values)
        width = record_words(ncols)
        nkeys = len(keys)
        rows = len(kept.ts) + len(new.ts)
        bound = nkeys + rows  # every row its own session
        room = min(bound, nkeys + int(rows * self._sessions_per_row) + _SESSIONS_SLACK)
        checkpoints = pooled((rows // max(every, 1) + nkeys + 1, width))
        latest = pooled((nkeys, width))
        counts = np.zeros(2, np.int64)
        arrays = [init.records, init.at, init.extra, kept.ts, kept.offsets, new.ts, new.offsets,
                  keys]  # fmt: skip
        arrays = [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]
        columns = [np.ascontiguousarray(v, dtype=np.float64) for pair in
                   zip(kept.values, new.values, strict=True) for v in pair]  # fmt: skip
        words = [nkeys, ncols, gap, max_length, every, *(a.ctypes.data for a in arrays[:7]),
                 0, 0, checkpoints.ctypes.data, len(checkpoints),
                 latest.ctypes.data, arrays[7].ctypes.data, counts.ctypes.data,
                 *(c.ctypes.data for c in columns)]  # fmt: skip
        while True:
            sessions = pooled((room, width))
            words[12:14] = [sessions.ctypes.data, len(sessions)]
            if self._call("resume_sessions", words) >= 0:
                break
            if room == bound:  # room for every row's session: the others were short
                msg = "resume_sessions: an output's capacity was too small"
                raise RuntimeError(msg)
            room = bound
        # the next call's room: twice the most sessions a row has opened beyond the
        # slack, so a call seldom runs twice, and none holds a record for every row
        opened = max(int(counts[0]) - nkeys - _SESSIONS_SLACK, 0) / max(rows, 1)
        self._sessions_per_row = min(max(self._sessions_per_row, 2 * opened), 1.0)
        return sessions[: counts[0]], checkpoints[: counts[1]], latest

    def record_segments(
        self, own: np.ndarray, keys: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each wanted key's records [lo, hi): one merge of the two sorted sequences."""
        own = np.ascontiguousarray(own, dtype=np.int64)
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        lo, hi = pooled((len(keys),)), pooled((len(keys),))
        words = [len(own), own.ctypes.data, len(keys), keys.ctypes.data, lo.ctypes.data,
                 hi.ctypes.data]  # fmt: skip
        self._call("record_segments", words)
        return lo, hi

    def splice_records(
        self, old: np.ndarray, cut: np.ndarray, end: np.ndarray, new: np.ndarray,
        keys: np.ndarray, gap: int, max_length: int, watermark: int,
    ) -> Spliced:  # fmt: skip
        """The records after a batch, split by the watermark (sessions/_records.mojo)."""
        arrays = [np.ascontiguousarray(a, dtype=np.int64) for a in (old, cut, end, new, keys)]
        old, cut, end, new, keys = arrays
        width = old.shape[1]
        room = len(old) + len(new)
        opened, closed = pooled((room, width)), pooled((room, width))
        own, lasts = pooled((room,)), pooled((room,))
        first_keys, first_starts = pooled((room,)), pooled((room,))
        counts = np.zeros(4, np.int64)
        words = [len(old), width, old.ctypes.data, len(keys), cut.ctypes.data, end.ctypes.data,
                 len(new), new.ctypes.data, keys.ctypes.data, gap, max_length, watermark,
                 opened.ctypes.data, closed.ctypes.data, counts.ctypes.data, own.ctypes.data,
                 first_keys.ctypes.data, first_starts.ctypes.data, lasts.ctypes.data]  # fmt: skip
        self._call("splice_records", words)
        n, c, d, rows = (int(x) for x in counts)
        return Spliced(opened[:n], closed[:c], own[:n], lasts[:n], first_keys[:d],
                       first_starts[:d], rows)  # fmt: skip

    def merge_runs(self, runs: list[Run], cut_ns: int) -> np.ndarray:
        """The merged order of runs (indices into their concatenation), rows before
        ``cut_ns`` dropped (runs.mojo)."""
        out = np.empty(max(sum(run.n for run in runs), 1), dtype=np.int64)
        words = [len(runs), cut_ns, int(out.ctypes.data)]
        for run in runs:
            words += [run.n, int(run.keys.ctypes.data), int(run.ts.ctypes.data)]
        m = self._call("merge_runs", words)
        return out[:m]

    def run_segments(self, run_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Each key's ``[left, right)`` in the sorted ``run_keys``, one galloping pass
        (runs.mojo): the binary searches over a 24 h state's run missed the cache."""
        run_keys = np.ascontiguousarray(run_keys, dtype=np.int64)
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        out = np.empty((len(keys), 2), dtype=np.int64)
        words = [len(run_keys), int(run_keys.ctypes.data), len(keys), int(keys.ctypes.data),
                 int(out.ctypes.data)]  # fmt: skip
        self._call("run_segments", words)
        return out

    def crc64_rows(self, data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """One slicing-by-8 pass per row (checksums.mojo), the GIL released."""
        data = np.ascontiguousarray(data, dtype=np.uint8)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        out = np.empty(max(len(offsets) - 1, 0), dtype=np.uint64)
        if not len(out):
            return out
        words = [len(out), int(data.ctypes.data), int(offsets.ctypes.data),
                 int(SLICING_TABLES.ctypes.data), int(out.ctypes.data)]  # fmt: skip
        self._call("crc64_rows", words)
        return out

    def stamp_micros(
        self, stamps: pa.StringArray, max_millis: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """One pass over the texts' bytes in place (stamps.mojo), the GIL released."""
        n = len(stamps)
        micros = np.empty(n, dtype=np.int64)
        known = np.empty(n, dtype=np.uint8)
        if n == 0:
            return micros, known.view(np.bool_)
        validity, offsets, data = stamps.buffers()
        words = [
            n, offsets.address + 4 * stamps.offset, 0 if data is None else data.address,
            0 if validity is None or not stamps.null_count else validity.address,
            stamps.offset, max_millis, int(micros.ctypes.data), int(known.ctypes.data),
        ]  # fmt: skip
        self._call("stamp_micros", words)
        return micros, known.view(np.bool_)

    def gather_chunks(self, chunks: list[pa.Array], rows: np.ndarray) -> pa.Array | None:
        """One pass over the rows (chunks.mojo), the GIL released; None for a type that
        is not 1, 2, 4 or 8 bytes wide (booleans are bits)."""
        kind = chunks[0].type
        if not pa.types.is_primitive(kind) or pa.types.is_boolean(kind):
            return None
        width = kind.byte_width
        if width not in (1, 2, 4, 8):
            return None
        n = len(rows)
        starts = np.cumsum([0, *map(len, chunks)], dtype=np.int64)
        data = pa.allocate_buffer(n * width)
        nullable = any(chunk.null_count for chunk in chunks)
        validity = pa.allocate_buffer((n + 7) // 8) if nullable else None
        if validity is not None:
            np.frombuffer(validity, dtype=np.uint8)[:] = 0
        words = [n, int(rows.ctypes.data), len(chunks), int(starts[-1]), width, data.address,
                 0 if validity is None else validity.address]  # fmt: skip
        for start, chunk in zip(starts, chunks, strict=False):
            valid = descriptor.address(chunk, 0) if chunk.null_count else 0
            words += [int(start), descriptor.address(chunk, 1) + chunk.offset * width, valid,
                      chunk.offset]  # fmt: skip
        if n:
            self._call("gather_chunks", words)
        return pa.Array.from_buffers(kind, n, [validity, data])

    def ascii_decimal(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One pass over the values (digits.mojo), the GIL released."""
        n = values.shape[0]
        width = len(str(int(values.max()))) if n else 1  # a negative max: the kernel raises
        matrix = np.empty((n, width), dtype=np.uint8)
        lengths = np.empty(n, dtype=np.int64)
        if n:
            words = [n, int(values.ctypes.data), int(matrix.ctypes.data), width,
                     int(lengths.ctypes.data)]  # fmt: skip
            self._call("ascii_decimal", words)
        return matrix, lengths

    def varint(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One pass over the values (digits.mojo), the GIL released."""
        n = values.shape[0]
        matrix = np.empty((n, VARINT_WIDTH), dtype=np.uint8)
        lengths = np.empty(n, dtype=np.int64)
        if n:
            words = [n, int(values.ctypes.data), int(matrix.ctypes.data), int(lengths.ctypes.data)]
            self._call("varint", words)
        return matrix, lengths

    def join_rows(self, parts: list[ByteRows], n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """One pass over the rows (byte_rows.mojo), the GIL released."""
        offsets = np.empty(n + 1, dtype=np.int64)
        size = sum(part.total_bytes(n) for part in parts)
        out = np.empty(max(size, 1), dtype=np.uint8)
        words = [n, len(parts), int(offsets.ctypes.data), int(out.ctypes.data), size]
        held: list[np.ndarray | None] = []  # what the kernel reads, alive until it returns
        words += _part_words(parts, held)
        if n:
            self._call("join_rows", words)
        else:
            offsets[0] = 0
        return out[:size], offsets

    def hash_payloads(
        self, names: list[bytes], views_of: list[int], values: list[list[ByteRows]],
        rows: np.ndarray, version: bytes,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:  # fmt: skip
        """One pass over the entities (hash_payloads.mojo), the GIL released."""
        n, n_views = rows.shape
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        name_bytes = np.frombuffer(b"".join(names) or b"\0", dtype=np.uint8)
        name_offsets = np.cumsum([0, *map(len, names)], dtype=np.int64)
        pair_views = np.asarray(views_of, dtype=np.int64)
        bounds = np.cumsum([0, *map(len, values)], dtype=np.int64)
        parts = [part for field in values for part in field]
        # each row of a view's parts belongs to one entity at most (rows is a union's)
        size = sum(part.total_bytes(part.rows) for part in parts)
        size += n * (23 + sum(len(name) + 4 for name in names))
        offsets = np.empty(n + 1, dtype=np.int64)
        out = np.empty(max(size, 1), dtype=np.uint8)
        ok = np.zeros(n, dtype=np.uint8)
        held: list[np.ndarray | None] = [rows, name_bytes, name_offsets, pair_views, bounds]
        words = [
            n, n_views, len(names), int.from_bytes(version, "little"),
            int(offsets.ctypes.data), int(out.ctypes.data), size, int(ok.ctypes.data),
            int(SLICING_TABLES.ctypes.data), int(name_bytes.ctypes.data),
            int(name_offsets.ctypes.data), int(pair_views.ctypes.data), int(bounds.ctypes.data),
            int(rows.ctypes.data), len(parts), *_part_words(parts, held),
        ]  # fmt: skip
        if n:
            written = int(self._call("hash_payloads", words))
        else:
            offsets[0], written = 0, 0
        return out[:written], offsets, ok.view(np.bool_)

    def read_flat_json(self, values: pa.BinaryArray, fields: list[FlatField]) -> FlatRead | None:
        """One pass over the records' bytes in place (json_flat.mojo), the GIL released."""
        if values.type != pa.binary():
            return None
        n = len(values)
        validity, offsets, data = values.buffers()
        size = 0 if data is None else data.size
        names = np.frombuffer(b"".join(f.name.encode() for f in fields) or b"\0", np.uint8)
        name_offsets = np.cumsum([0, *(len(f.name.encode()) for f in fields)], dtype=np.int64)
        status = np.empty(n, dtype=np.uint8)
        words = [
            n, offsets.address + 4 * values.offset, 0 if data is None else data.address,
            0 if validity is None or not values.null_count else validity.address,
            values.offset, len(fields), int(names.ctypes.data), int(name_offsets.ctypes.data),
            int(status.ctypes.data), 0,
        ]  # fmt: skip
        outs = []
        for field in fields:
            flags = np.empty((3, n), dtype=np.uint8)  # null, valid, present
            text = np.empty(max(size, 1), dtype=np.uint8) if field.kind == "string" else None
            column = (
                np.empty(n + 1, dtype=np.int32) if field.kind == "string"
                else np.empty(n, dtype=np.float64 if field.kind == "double" else np.int64)
            )  # fmt: skip
            words += [
                KIND_CODES[field.kind], field.lowest, field.highest, int(column.ctypes.data),
                0 if text is None else int(text.ctypes.data), int(flags[0].ctypes.data),
                int(flags[1].ctypes.data), int(flags[2].ctypes.data),
            ]  # fmt: skip
            outs.append((column, flags, text))
        if n:
            self._call("json_flat", words)
        columns = []
        for column, flags, text in outs:
            null, valid, present = flags.view(np.bool_)
            if text is not None:  # sized for every record's bytes: keep only the values'
                text = text[: int(column[n]) if n else 0].copy()
            columns.append(FlatColumn(column, null, valid, present, text))
        return FlatRead(status.view(np.bool_), columns)

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
        words = descriptor.hopping(s, size, step, len(aggs), count_only, bounds, columns)
        return self._call("hopping", words)

    def sessions(
        self,
        s: Series,
        gap: int,
        gaps: np.ndarray | None,
        max_length: int | None,
        aggs: list[str],
        bounds: WindowBounds,
        columns: list[OutputColumn],
    ) -> int:
        words = descriptor.sessions(s, gap, gaps, max_length, len(aggs), bounds, columns)
        in_order = planning.sessions_may_stream(s, gaps, aggs)
        sizes = [self._scratch("sessions_in_order", s.n, s.ngroups)] if in_order else []
        for size in [*sizes, self._scratch("sessions", s.n, s.ngroups)]:
            scratch = pa.allocate_buffer(size)
            m = self._call("sessions", [*words, scratch.address, scratch.size])
            if m >= 0:  # -1: input not in ts order, the grouping path needs more scratch
                return m
        msg = "internal: sessions kernel refused its scratch"
        raise RuntimeError(msg)


def _widest_key(run_keys: np.ndarray) -> int:
    """The most rows one key has in a run sorted by key."""
    if not len(run_keys):
        return 0
    starts = np.flatnonzero(run_keys[1:] != run_keys[:-1]) + 1
    return int(np.diff(starts, prepend=0, append=len(run_keys)).max())


def _part_words(parts: list[ByteRows], held: list[np.ndarray | None]) -> list[int]:
    """The PART_WORDS of each part (byte_rows.mojo), keeping in ``held`` every array the
    kernel will read (alive until it returns)."""
    words: list[int] = []
    for part in parts:
        if part.offsets is not None:
            part_offsets = np.ascontiguousarray(part.offsets, dtype=np.int64)
            held.append(part_offsets)
            words += [0, int(part.data.ctypes.data), int(part_offsets.ctypes.data), 0, 0]
            continue
        matrix = part.data
        if matrix.shape[1] > 1 and matrix.strides[1] != 1:
            matrix = np.ascontiguousarray(matrix)
        lengths = (
            None if part.lengths is None
            else np.ascontiguousarray(part.lengths, dtype=np.int64)
        )  # fmt: skip
        held += [matrix, lengths]
        stride = int(matrix.strides[0]) if matrix.shape[0] > 1 else 0
        words += [1, int(matrix.ctypes.data),
                  0 if lengths is None else int(lengths.ctypes.data),
                  int(matrix.shape[1]), stride]  # fmt: skip
    return words
