# The Python extension `kernels`: thin bindings over the featureflow_kernels
# package (see mojo_ops/README.md for where each algorithm lives).
#
# Each binding turns its PythonObject arguments into Ints (the descriptor
# address into a pointer), releases the GIL around the kernels that touch no
# Python object (they run on two Python threads), and returns an int. Errors
# raised by a kernel reach Python as a plain Exception whose message starts
# with "ValueError: " where it is the caller's fault; the Python side
# (`featureflow.ops._mojo.backend`) maps it to a typed error.

from std.os import abort
from std.python import Python, PythonObject
from std.python._cpython import GILReleased  # private: wrapped here and nowhere else
from std.python.bindings import PythonModuleBuilder

from featureflow_kernels.abi import (
    ABI_VERSION,
    HEADER,
    I64P,
    SOURCES_DIGEST,
    i64p,
    A_COUNT,
    A_SUM,
    A_MEAN,
    A_MIN,
    A_MAX,
    A_STD,
    A_VAR,
    A_FIRST,
    A_LAST,
    A_DISTINCT,
    DT_F64,
    DT_F32,
    DT_I64,
    DT_I32,
)
from featureflow_kernels import (
    rolling,
    hopping as hop,
    sessions as ses,
    keys,
    runs,
    checksums,
    stamps,
    json_flat as flat,
    byte_rows,
    chunks,
    digits,
    hash_payloads as payloads,
)


@always_inline
def _desc(desc: PythonObject) raises -> I64P:
    return i64p(Int(py=desc))


# --- build facts and the ABI ------------------------------------------------


def abi() raises -> PythonObject:
    """The library's ABI facts as a dict: version, source digest, header words,
    the rolling stream modes, the aggregate codes and the value-type codes
    (keyed by Arrow's type names)."""
    var facts = Python.dict()
    facts["abi_version"] = ABI_VERSION
    facts["sources_digest"] = SOURCES_DIGEST
    facts["header_words"] = HEADER
    facts["stream_none"] = rolling.STREAM_NONE
    facts["stream_in_place"] = rolling.STREAM_IN_PLACE
    facts["stream_convert"] = rolling.STREAM_CONVERT
    facts["stream_bucketed"] = rolling.STREAM_BUCKETED
    facts["frame_words"] = rolling.FRAME_WORDS
    facts["session_record_head"] = ses.R_HEAD
    facts["session_record_column"] = ses.R_COL
    var aggs = Python.dict()
    aggs["count"] = A_COUNT
    aggs["sum"] = A_SUM
    aggs["mean"] = A_MEAN
    aggs["min"] = A_MIN
    aggs["max"] = A_MAX
    aggs["std"] = A_STD
    aggs["var"] = A_VAR
    aggs["first"] = A_FIRST
    aggs["last"] = A_LAST
    aggs["count_distinct"] = A_DISTINCT
    facts["aggs"] = aggs
    var dtypes = Python.dict()
    dtypes["double"] = DT_F64
    dtypes["float"] = DT_F32
    dtypes["int64"] = DT_I64
    dtypes["int32"] = DT_I32
    facts["dtypes"] = dtypes
    return facts


def scratch_bytes(
    kind: PythonObject, a: PythonObject, b: PythonObject, c: PythonObject
) raises -> PythonObject:
    """Bytes of scratch a kernel needs: `kind` names it, `a`, `b`, `c` are its
    sizes (unused ones 0). rolling: (rows, keys, windows); stream: (rows, keys);
    bucketed: (rows, parts); query: (rows); inorder: (keys, ring rows); deques: (longest key's
    rows); sessions_in_order, sessions: (rows, keys)."""
    var k = String(kind)
    var x = Int(py=a)
    var y = Int(py=b)
    var z = Int(py=c)
    if k == "rolling":
        return PythonObject(rolling.rolling_scratch_bytes(x, y, z))
    if k == "stream":
        return PythonObject(rolling.stream_scratch_bytes(x, y))
    if k == "bucketed":
        return PythonObject(rolling.bucket_scratch_bytes(x, y))
    if k == "inorder":
        return PythonObject(rolling.inorder_scratch_bytes(x, y))
    if k == "query":
        return PythonObject(rolling.query_scratch_bytes(x))
    if k == "deques":
        return PythonObject(rolling.deque_bytes(x))
    if k == "sessions_in_order":
        return PythonObject(ses.sessions_in_order_scratch_bytes(x, y))
    if k == "sessions":
        return PythonObject(ses.sessions_scratch_bytes(x, y))
    raise Error(String("ValueError: unknown scratch kind ", k))


# --- rolling ------------------------------------------------------------------


def rolling_prepare(desc: PythonObject) raises -> PythonObject:
    return PythonObject(rolling.rolling_prepare(_desc(desc)))


def rolling_part(
    desc: PythonObject, part: PythonObject, parts: PythonObject, dq: PythonObject
) raises -> PythonObject:
    var d = _desc(desc)
    var p = Int(py=part)
    var ps = Int(py=parts)
    var q = i64p(Int(py=dq))
    with GILReleased(Python()):
        rolling.rolling_part(d, p, ps, q)
    return PythonObject(0)


def rolling_finish(desc: PythonObject) raises -> PythonObject:
    return PythonObject(rolling.rolling_finish(_desc(desc)))


def rolling_stream_mode(desc: PythonObject) raises -> PythonObject:
    return PythonObject(rolling.rolling_stream_mode(_desc(desc)))


def rolling_stream_convert(desc: PythonObject, dst: PythonObject) raises -> PythonObject:
    return PythonObject(rolling.rolling_stream_convert(_desc(desc), Int(py=dst)))


def rolling_stream_part(
    desc: PythonObject,
    part: PythonObject,
    parts: PythonObject,
    scratch: PythonObject,
    values: PythonObject,
) raises -> PythonObject:
    var d = _desc(desc)
    var p = Int(py=part)
    var ps = Int(py=parts)
    var sc = Int(py=scratch)
    var v = Int(py=values)
    var rows: Int
    with GILReleased(Python()):
        rows = rolling.rolling_stream_part(d, p, ps, sc, v)
    return PythonObject(rows)


def rolling_bucketed_part(
    desc: PythonObject,
    phase: PythonObject,
    part: PythonObject,
    parts: PythonObject,
    scratch: PythonObject,
    window: PythonObject,
    walk_rows: PythonObject,
) raises -> PythonObject:
    var d = _desc(desc)
    var ph = Int(py=phase)
    var p = Int(py=part)
    var ps = Int(py=parts)
    var sc = Int(py=scratch)
    var w = Int(py=window)
    var wr = Int(py=walk_rows)
    with GILReleased(Python()):
        rolling.bucketed_phase(d, ph, p, ps, sc, w, wr)
    return PythonObject(0)


def rolling_inorder_span(
    desc: PythonObject, window: PythonObject, limit: PythonObject
) raises -> PythonObject:
    var d = _desc(desc)
    var w = Int(py=window)
    var lim = Int(py=limit)
    var span: Int
    with GILReleased(Python()):
        span = rolling.rolling_inorder_span(d, w, lim)
    return PythonObject(span)


def rolling_inorder_part(
    desc: PythonObject,
    part: PythonObject,
    parts: PythonObject,
    window: PythonObject,
    scratch: PythonObject,
    ring_rows: PythonObject,
) raises -> PythonObject:
    var d = _desc(desc)
    var p = Int(py=part)
    var ps = Int(py=parts)
    var w = Int(py=window)
    var sc = Int(py=scratch)
    var rr = Int(py=ring_rows)
    var rows: Int
    with GILReleased(Python()):
        rows = rolling.rolling_inorder_part(d, p, ps, w, sc, rr)
    return PythonObject(rows)


def rolling_query(desc: PythonObject, scratch: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var sc = Int(py=scratch)
    var rows: Int
    with GILReleased(Python()):
        rows = rolling.rolling_query(d, sc)
    return PythonObject(rows)


# --- hopping, sessions, keys --------------------------------------------------


def hopping(desc: PythonObject) raises -> PythonObject:
    return PythonObject(hop.hopping(_desc(desc)))


def sessions(desc: PythonObject) raises -> PythonObject:
    return PythonObject(ses.sessions(_desc(desc)))


def resume_sessions(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var rows: Int
    with GILReleased(Python()):
        rows = ses.resume_sessions(d)
    return PythonObject(rows)


def record_segments(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var keys: Int
    with GILReleased(Python()):
        keys = ses.record_segments(d)
    return PythonObject(keys)


def splice_records(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var rows: Int
    with GILReleased(Python()):
        rows = ses.splice_records(d)
    return PythonObject(rows)


def sort_run(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var keys: Int
    with GILReleased(Python()):
        keys = runs.sort_run(d)
    return PythonObject(keys)


def gather_runs(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var rows: Int
    with GILReleased(Python()):
        rows = runs.gather_runs(d)
    return PythonObject(rows)


def merge_runs(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var rows: Int
    with GILReleased(Python()):
        rows = runs.merge_runs(d)
    return PythonObject(rows)


def run_segments(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var asked: Int
    with GILReleased(Python()):
        asked = runs.run_segments(d)
    return PythonObject(asked)


def encode_int_keys(desc: PythonObject) raises -> PythonObject:
    return PythonObject(keys.encode_int_keys(_desc(desc)))


def crc64_rows(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var n: Int
    with GILReleased(Python()):
        n = checksums.crc64_rows(d)
    return PythonObject(n)


def stamp_micros(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var read: Int
    with GILReleased(Python()):
        read = stamps.stamp_micros(d)
    return PythonObject(read)


def json_flat(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var left: Int
    with GILReleased(Python()):
        left = flat.json_flat(d)
    return PythonObject(left)


def join_rows(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var size: Int
    with GILReleased(Python()):
        size = byte_rows.join_rows(d)
    return PythonObject(size)


def gather_chunks(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var n: Int
    with GILReleased(Python()):
        n = chunks.gather_chunks(d)
    return PythonObject(n)


def ascii_decimal(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var n: Int
    with GILReleased(Python()):
        n = digits.ascii_decimal(d)
    return PythonObject(n)


def varint(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var n: Int
    with GILReleased(Python()):
        n = digits.varint(d)
    return PythonObject(n)


def hash_payloads(desc: PythonObject) raises -> PythonObject:
    var d = _desc(desc)
    var size: Int
    with GILReleased(Python()):
        size = payloads.hash_payloads(d)
    return PythonObject(size)


@export
def PyInit_kernels() abi("C") -> PythonObject:
    try:
        var m = PythonModuleBuilder("kernels")
        m.def_function[abi]("abi", docstring="ABI version, source digest and codes of this build.")
        m.def_function[scratch_bytes]("scratch_bytes", docstring="Scratch bytes a kernel needs.")
        m.def_function[rolling_prepare](
            "rolling_prepare",
            docstring="Rolling windows, step 1: group rows; see rolling/_grouped.mojo.",
        )
        m.def_function[rolling_part](
            "rolling_part",
            docstring="Rolling windows, step 2: one part; see rolling/_grouped.mojo.",
        )
        m.def_function[rolling_finish](
            "rolling_finish",
            docstring="Rolling windows, step 3: validity; see rolling/_grouped.mojo.",
        )
        m.def_function[rolling_stream_mode](
            "rolling_stream_mode", docstring="Rolling over ts-ordered input: can it stream?"
        )
        m.def_function[rolling_stream_convert](
            "rolling_stream_convert", docstring="Rolling over ts-ordered input: float64 values."
        )
        m.def_function[rolling_stream_part](
            "rolling_stream_part", docstring="Rolling over ts-ordered input: one part."
        )
        m.def_function[rolling_bucketed_part](
            "rolling_bucketed_part", docstring="Rolling over ts-ordered keyed input: one phase."
        )
        m.def_function[rolling_inorder_span](
            "rolling_inorder_span", docstring="Ring rows the in-order rolling pass needs."
        )
        m.def_function[rolling_inorder_part](
            "rolling_inorder_part", docstring="Rolling over ts-ordered keyed input, in input order."
        )
        m.def_function[rolling_query](
            "rolling_query", docstring="Rolling frames at query points; see rolling/_query.mojo."
        )
        m.def_function[hopping]("hopping", docstring="Hopping windows; see hopping.mojo.")
        m.def_function[sessions]("sessions", docstring="Session windows; see sessions/.")
        m.def_function[resume_sessions](
            "resume_sessions",
            docstring="Sessions resumed from kept states; see sessions/_resume.mojo.",
        )
        m.def_function[record_segments](
            "record_segments", docstring="Each key's kept session records; see sessions/_records."
        )
        m.def_function[splice_records](
            "splice_records", docstring="Kept session records after a batch; see sessions/_records."
        )
        m.def_function[sort_run](
            "sort_run", docstring="A batch's rows in (key, ts) order; see runs.mojo."
        )
        m.def_function[gather_runs](
            "gather_runs", docstring="Some keys' rows from runs, in ts order; see runs.mojo."
        )
        m.def_function[merge_runs](
            "merge_runs", docstring="Merge runs sorted by (key, ts); see runs.mojo."
        )
        m.def_function[run_segments](
            "run_segments", docstring="Each asked key's rows in a sorted run; see runs.mojo."
        )
        m.def_function[encode_int_keys](
            "encode_int_keys", docstring="Dense codes of integer keys; see keys.mojo."
        )
        m.def_function[crc64_rows](
            "crc64_rows", docstring="Redis's CRC-64 of each row; see checksums.mojo."
        )
        m.def_function[stamp_micros](
            "stamp_micros", docstring="Timestamp texts to epoch µs; see stamps.mojo."
        )
        m.def_function[json_flat](
            "json_flat", docstring="Flat JSON records to columns; see json_flat.mojo."
        )
        m.def_function[join_rows](
            "join_rows", docstring="Byte strings joined row by row; see byte_rows.mojo."
        )
        m.def_function[gather_chunks](
            "gather_chunks", docstring="Rows of several chunks of a column; see chunks.mojo."
        )
        m.def_function[ascii_decimal](
            "ascii_decimal", docstring="Integers as ASCII decimal digits; see digits.mojo."
        )
        m.def_function[varint]("varint", docstring="Integers as protobuf varints; see digits.mojo.")
        m.def_function[hash_payloads](
            "hash_payloads", docstring="Redis RESTORE payloads; see hash_payloads.mojo."
        )
        return m.finalize()
    except e:
        abort(String("featureflow: failed to create the kernels module: ", e))
