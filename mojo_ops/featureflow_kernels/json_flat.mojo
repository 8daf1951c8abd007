"""Flat JSON objects to typed columns: the stream job's usual records, read in one pass.

`featureflow.events.json_batch` gives each record's declared fields as the
per-record parser (orjson and Spark's type rules) gives them. This pass reads the
records it can read exactly and leaves every other one to that parser, so the
output is the same by construction of the rule "read here only what is certain":

- the record is one JSON object of ASCII text (bytes 0x20-0x7E inside strings),
  whitespace around tokens as JSON allows, nothing after it;
- every key and string value without escapes; no nested object or array;
- no declared field twice;
- numbers by JSON's grammar: an integer of at most 18 digits, or a decimal whose
  significand fits 2^53 and whose decimal exponent is within +-22 (then one IEEE
  multiplication or division rounds it correctly: Clinger's fast path), or zero;
- a string field holds a string, an integer (its digits; not `-0`), `true`,
  `false` or null; a double field a number, `true`/`false` (invalid) or null (a
  string there may be `NaN` or `Infinity`: left to Python).

Anything else marks the record "left": status 1.
"""

from featureflow_kernels.abi import F64P, I32P, I64P, U8P, f64p, i64p, u8p

comptime K_INT = 0
comptime K_DOUBLE = 1
comptime K_STRING = 2
comptime K_BOOL = 3

comptime V_NULL = 0
comptime V_INT = 1
comptime V_FLOAT = 2
comptime V_STRING = 3
comptime V_TRUE = 4
comptime V_FALSE = 5

comptime FIELD_WORDS = 8
comptime HEAD_WORDS = 10
comptime MAX_SIGNIFICAND = 9007199254740992  # 2^53


@always_inline
def _is_space(c: Int) -> Bool:
    return c == 32 or c == 9 or c == 10 or c == 13


@always_inline
def _skip(data: U8P, var at: Int, end: Int) -> Int:
    while at < end and _is_space(Int(data[unsafe_offset=at])):
        at += 1
    return at


@always_inline
def _is_digit(c: Int) -> Bool:
    return c >= 48 and c <= 57


def _string_end(data: U8P, start: Int, end: Int) -> Int:
    """`start` is just after an opening quote: the closing quote's position, or -1 when
    the string holds an escape, a control byte or a non-ASCII byte (or is unterminated)."""
    var at = start
    while at < end:
        var c = Int(data[unsafe_offset=at])
        if c == 34:  # '"'
            return at
        if c == 92 or c < 32 or c >= 128:
            return -1
        at += 1
    return -1


@always_inline
def _literal(data: U8P, at: Int, end: Int, word: StringLiteral) -> Bool:
    var size = word.byte_length()
    if end - at < size:
        return False
    var bytes = word.as_bytes()
    for i in range(size):
        if Int(data[unsafe_offset=at + i]) != Int(bytes[i]):
            return False
    return True


@always_inline
def _power_of_ten(e: Int) -> Float64:
    var p: Float64 = 1.0
    for _ in range(e):
        p *= 10.0
    return p


struct Number(Copyable, Movable):
    var end: Int
    """Position after the number; -1: not read here."""
    var is_int: Bool
    var int_value: Int
    var float_value: Float64

    def __init__(out self):
        self.end = -1
        self.is_int = False
        self.int_value = 0
        self.float_value = 0.0


def _number(data: U8P, start: Int, end: Int) -> Number:
    var out = Number()
    var at = start
    var negative = Int(data[unsafe_offset=at]) == 45  # '-'
    if negative:
        at += 1
    if at >= end or not _is_digit(Int(data[unsafe_offset=at])):
        return out^
    var significand = 0
    var digits = 0
    var exponent = 0
    if Int(data[unsafe_offset=at]) == 48:  # a leading 0 stands alone
        at += 1
        if at < end and _is_digit(Int(data[unsafe_offset=at])):
            return out^
    else:
        while at < end and _is_digit(Int(data[unsafe_offset=at])):
            digits += 1
            if digits > 18:
                return out^
            significand = significand * 10 + Int(data[unsafe_offset=at]) - 48
            at += 1
    var is_int = True
    if at < end and Int(data[unsafe_offset=at]) == 46:  # '.'
        is_int = False
        at += 1
        var fraction_digits = 0
        while at < end and _is_digit(Int(data[unsafe_offset=at])):
            fraction_digits += 1
            if significand > 0 or Int(data[unsafe_offset=at]) != 48:
                digits += 1
            if digits > 18:
                return out^
            significand = significand * 10 + Int(data[unsafe_offset=at]) - 48
            exponent -= 1
            at += 1
        if fraction_digits == 0:
            return out^
    if at < end and (Int(data[unsafe_offset=at]) == 101 or Int(data[unsafe_offset=at]) == 69):
        is_int = False
        at += 1
        var exponent_negative = False
        if at < end and (Int(data[unsafe_offset=at]) == 43 or Int(data[unsafe_offset=at]) == 45):
            exponent_negative = Int(data[unsafe_offset=at]) == 45
            at += 1
        var exponent_digits = 0
        var written = 0
        while at < end and _is_digit(Int(data[unsafe_offset=at])):
            exponent_digits += 1
            if exponent_digits > 4:
                return out^
            written = written * 10 + Int(data[unsafe_offset=at]) - 48
            at += 1
        if exponent_digits == 0:
            return out^
        exponent += -written if exponent_negative else written
    out.is_int = is_int
    if is_int:
        out.int_value = -significand if negative else significand
    else:
        var value: Float64
        if significand == 0:
            value = 0.0
        elif significand > MAX_SIGNIFICAND or exponent > 22 or exponent < -22:
            return out^
        elif exponent >= 0:
            value = Float64(significand) * _power_of_ten(exponent)
        else:
            value = Float64(significand) / _power_of_ten(-exponent)
        out.float_value = -value if negative else value
    out.end = at
    return out^


def json_flat(d: I64P) raises -> Int:
    """Descriptor: n, int32 offsets addr (n + 1, from the array's first row), bytes addr,
    validity addr (0: no nulls), its bit offset, fields K, names' bytes addr, names'
    int64 offsets addr (K + 1), uint8 status out addr (n: 0 read, 1 left), unused;
    then FIELD_WORDS per field: kind (K_*), lowest and highest integer (K_INT), values
    out addr (int64 for K_INT and K_BOOL, float64 for K_DOUBLE, int32 offsets (n + 1)
    for K_STRING), string bytes out addr (K_STRING; as many as the input's), uint8
    null out addr, uint8 valid out addr, uint8 present out addr (present and not
    JSON null). Rows left (and null records) hold nulls. Returns how many were left."""
    var n = Int(d[unsafe_offset=0])
    var offsets = I32P(unsafe_from_address=Int(d[unsafe_offset=1]))
    var data = u8p(Int(d[unsafe_offset=2]))
    var validity = Int(d[unsafe_offset=3])
    var bit_offset = Int(d[unsafe_offset=4])
    var fields = Int(d[unsafe_offset=5])
    var names = u8p(Int(d[unsafe_offset=6]))
    var name_offsets = i64p(Int(d[unsafe_offset=7]))
    var status = u8p(Int(d[unsafe_offset=8]))
    var validity_bits = u8p(validity)
    var written = List[Int](length=fields, fill=0)  # string bytes written per field
    var seen = List[Bool](length=fields, fill=False)
    var marks = List[Int](length=fields, fill=0)  # string bytes written before this row
    var left = 0
    for i in range(n):
        var start = Int(offsets[unsafe_offset=i])
        var end = Int(offsets[unsafe_offset=i + 1])
        var present_record = True
        if validity != 0:
            var b = bit_offset + i
            present_record = (Int(validity_bits[unsafe_offset=b >> 3]) >> (b & 7)) & 1 == 1
        for k in range(fields):
            var w = d.unsafe_offset(HEAD_WORDS + FIELD_WORDS * k)
            u8p(Int(w[unsafe_offset=5]))[unsafe_offset=i] = 1
            u8p(Int(w[unsafe_offset=6]))[unsafe_offset=i] = 1
            u8p(Int(w[unsafe_offset=7]))[unsafe_offset=i] = 0
            marks[k] = written[k]
            seen[k] = False
        var ok = present_record and _record(
            d, data, start, end, fields, names, name_offsets, i, written, seen
        )
        if not ok:
            left += 1
            for k in range(fields):  # undo what the row wrote
                var w = d.unsafe_offset(HEAD_WORDS + FIELD_WORDS * k)
                u8p(Int(w[unsafe_offset=5]))[unsafe_offset=i] = 1
                u8p(Int(w[unsafe_offset=6]))[unsafe_offset=i] = 1
                u8p(Int(w[unsafe_offset=7]))[unsafe_offset=i] = 0
                written[k] = marks[k]
        status[unsafe_offset=i] = 0 if ok else 1
        for k in range(fields):
            var w = d.unsafe_offset(HEAD_WORDS + FIELD_WORDS * k)
            if Int(w[unsafe_offset=0]) == K_STRING:
                var out_offsets = I32P(unsafe_from_address=Int(w[unsafe_offset=3]))
                if i == 0:
                    out_offsets[unsafe_offset=0] = 0
                out_offsets[unsafe_offset=i + 1] = Int32(written[k])
    return left


def _record(
    d: I64P,
    data: U8P,
    start: Int,
    end: Int,
    fields: Int,
    names: U8P,
    name_offsets: I64P,
    row: Int,
    mut written: List[Int],
    mut seen: List[Bool],
) -> Bool:
    """Read row `row` (bytes [start, end)) into the fields' outputs; False: left."""
    var at = _skip(data, start, end)
    if at >= end or Int(data[unsafe_offset=at]) != 123:  # '{'
        return False
    at = _skip(data, at + 1, end)
    if at < end and Int(data[unsafe_offset=at]) == 125:  # '}'
        return _skip(data, at + 1, end) == end
    while True:
        if at >= end or Int(data[unsafe_offset=at]) != 34:
            return False
        var key_start = at + 1
        var key_end = _string_end(data, key_start, end)
        if key_end < 0:
            return False
        at = _skip(data, key_end + 1, end)
        if at >= end or Int(data[unsafe_offset=at]) != 58:  # ':'
            return False
        at = _skip(data, at + 1, end)
        if at >= end:
            return False
        var field = -1
        for k in range(fields):
            var name_start = Int(name_offsets[unsafe_offset=k])
            var size = Int(name_offsets[unsafe_offset=k + 1]) - name_start
            if size != key_end - key_start:
                continue
            var same = True
            for j in range(size):
                if data[unsafe_offset=key_start + j] != names[unsafe_offset=name_start + j]:
                    same = False
                    break
            if same:
                field = k
                break
        if field >= 0:
            if seen[field]:
                return False
            seen[field] = True
        # the value
        var c = Int(data[unsafe_offset=at])
        var kind = V_NULL
        var value_start = at
        var value_end = at
        var number = Number()
        if c == 34:
            var closing = _string_end(data, at + 1, end)
            if closing < 0:
                return False
            kind = V_STRING
            value_start = at + 1
            value_end = closing
            at = closing + 1
        elif c == 116:
            if not _literal(data, at, end, "true"):
                return False
            kind = V_TRUE
            value_end = at + 4
            at += 4
        elif c == 102:
            if not _literal(data, at, end, "false"):
                return False
            kind = V_FALSE
            value_end = at + 5
            at += 5
        elif c == 110:
            if not _literal(data, at, end, "null"):
                return False
            at += 4
        elif c == 45 or _is_digit(c):
            number = _number(data, at, end)
            if number.end < 0:
                return False
            kind = V_INT if number.is_int else V_FLOAT
            value_end = number.end
            at = number.end
        else:
            return False  # a nested object or array, or not JSON
        if field >= 0 and not _store(
            d, data, field, kind, value_start, value_end, number, row, written
        ):
            return False
        at = _skip(data, at, end)
        if at >= end:
            return False
        c = Int(data[unsafe_offset=at])
        if c == 44:  # ','
            at = _skip(data, at + 1, end)
            continue
        if c == 125:  # '}'
            return _skip(data, at + 1, end) == end
        return False


def _store(
    d: I64P,
    data: U8P,
    field: Int,
    kind: Int,
    value_start: Int,
    value_end: Int,
    number: Number,
    row: Int,
    mut written: List[Int],
) -> Bool:
    """One declared field's value into its outputs (null, valid and present already say
    null, valid, absent); False: the record is left to Python."""
    if kind == V_NULL:
        return True
    var w = d.unsafe_offset(HEAD_WORDS + FIELD_WORDS * field)
    var field_kind = Int(w[unsafe_offset=0])
    var null = u8p(Int(w[unsafe_offset=5]))
    var valid = u8p(Int(w[unsafe_offset=6]))
    u8p(Int(w[unsafe_offset=7]))[unsafe_offset=row] = 1
    if field_kind == K_INT:
        if kind == V_INT:
            var v = number.int_value
            if v >= Int(w[unsafe_offset=1]) and v <= Int(w[unsafe_offset=2]):
                i64p(Int(w[unsafe_offset=3]))[unsafe_offset=row] = Int64(v)
                null[unsafe_offset=row] = 0
                return True
        valid[unsafe_offset=row] = 0
        return True
    if field_kind == K_DOUBLE:
        var values = f64p(Int(w[unsafe_offset=3]))
        if kind == V_INT:
            values[unsafe_offset=row] = Float64(number.int_value)
        elif kind == V_FLOAT:
            values[unsafe_offset=row] = number.float_value
        elif kind == V_STRING:
            return False  # maybe NaN or Infinity: Python's words
        else:
            valid[unsafe_offset=row] = 0
            return True
        null[unsafe_offset=row] = 0
        return True
    if field_kind == K_BOOL:
        if kind == V_TRUE or kind == V_FALSE:
            i64p(Int(w[unsafe_offset=3]))[unsafe_offset=row] = 1 if kind == V_TRUE else 0
            null[unsafe_offset=row] = 0
        else:
            valid[unsafe_offset=row] = 0
        return True
    # K_STRING: a string, an integer's digits (not -0), true or false, as written
    if kind == V_FLOAT:
        return False
    if kind == V_INT and number.int_value == 0 and Int(data[unsafe_offset=value_start]) == 45:
        return False
    var out = u8p(Int(w[unsafe_offset=4]))
    var at = written[field]
    for j in range(value_start, value_end):
        out[unsafe_offset=at] = data[unsafe_offset=j]
        at += 1
    written[field] = at
    null[unsafe_offset=row] = 0
    return True
