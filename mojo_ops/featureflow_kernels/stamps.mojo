"""Event timestamp texts to epoch microseconds: the two forms producers send almost always.

The rules are `featureflow.events.timestamps`' (exactly what Spark reads there);
the numpy reference is `featureflow.ops._stamps`. A text is read when it is

- epoch milliseconds: `-?[0-9]{1,15}` within +-max_millis, or
- RFC 3339 with a zone: `(19|20|21)YY-MM-DDTHH:MM:SS[.f{1,6}](Z|+-HH:MM)`, a real
  calendar date, hours 0-23, minutes and seconds 0-59, offsets under 18 hours;

every other text (and a null) is left unknown, for Spark to read.
"""

from featureflow_kernels.abi import I32P, I64P, U8P, i64p, u8p


@always_inline
def _digit(data: U8P, at: Int) -> Int:
    """The digit's value, or -1 for any other byte."""
    var c = Int(data[unsafe_offset=at])
    return c - 48 if c >= 48 and c <= 57 else -1


@always_inline
def _two(data: U8P, at: Int) -> Int:
    """Two digits' value, or -1."""
    var a = _digit(data, at)
    var b = _digit(data, at + 1)
    return a * 10 + b if a >= 0 and b >= 0 else -1


@always_inline
def _days_in_month(year: Int, month: Int) -> Int:
    if month == 2:
        var leap = (year % 4 == 0 and year % 100 != 0) or year % 400 == 0
        return 29 if leap else 28
    if month == 4 or month == 6 or month == 9 or month == 11:
        return 30
    return 31


@always_inline
def _days_from_civil(year: Int, month: Int, day: Int) -> Int:
    """Days since 1970-01-01 (H. Hinnant's days_from_civil; years here are >= 1900)."""
    var y = year - (1 if month <= 2 else 0)
    var era = y // 400
    var year_of_era = y - era * 400
    var shifted = month - 3 if month > 2 else month + 9
    var day_of_year = (153 * shifted + 2) // 5 + day - 1
    var day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468


def _millis(data: U8P, start: Int, end: Int, max_millis: Int, mut micros: Int) -> Bool:
    var at = start
    var negative = at < end and Int(data[unsafe_offset=at]) == 45  # '-'
    if negative:
        at += 1
    var count = end - at
    if count < 1 or count > 15:
        return False
    var value = 0
    for i in range(at, end):
        var d = _digit(data, i)
        if d < 0:
            return False
        value = value * 10 + d
    if value > max_millis:
        return False
    micros = (-value if negative else value) * 1000
    return True


def _rfc3339(data: U8P, start: Int, end: Int, mut micros: Int) -> Bool:
    if end - start < 20:
        return False
    var century = _two(data, start)
    if century < 19 or century > 21:
        return False
    var yy = _two(data, start + 2)
    var month = _two(data, start + 5)
    var day = _two(data, start + 8)
    var hour = _two(data, start + 11)
    var minute = _two(data, start + 14)
    var second = _two(data, start + 17)
    if yy < 0 or month < 0 or day < 0 or hour < 0 or minute < 0 or second < 0:
        return False
    if (
        Int(data[unsafe_offset=start + 4]) != 45  # '-'
        or Int(data[unsafe_offset=start + 7]) != 45
        or Int(data[unsafe_offset=start + 10]) != 84  # 'T'
        or Int(data[unsafe_offset=start + 13]) != 58  # ':'
        or Int(data[unsafe_offset=start + 16]) != 58
    ):
        return False
    var at = start + 19
    var fraction = 0
    if Int(data[unsafe_offset=at]) == 46:  # '.': 1 to 6 digits, padded to 6
        at += 1
        var digits = 0
        while at < end and _digit(data, at) >= 0:
            if digits == 6:
                return False
            fraction = fraction * 10 + _digit(data, at)
            digits += 1
            at += 1
        if digits == 0:
            return False
        for _ in range(digits, 6):
            fraction *= 10
    var offset_s = 0
    var rest = end - at
    if rest == 1 and Int(data[unsafe_offset=at]) == 90:  # 'Z'
        offset_s = 0
    elif rest == 6:
        var sign = Int(data[unsafe_offset=at])
        var zone_hours = _two(data, at + 1)
        var zone_minutes = _two(data, at + 4)
        if (
            (sign != 43 and sign != 45)  # '+', '-'
            or Int(data[unsafe_offset=at + 3]) != 58
            or zone_hours < 0
            or zone_minutes < 0
        ):
            return False
        if zone_hours > 17 or zone_minutes > 59:
            return False
        offset_s = (zone_hours * 3600 + zone_minutes * 60) * (-1 if sign == 45 else 1)
    else:
        return False
    var year = century * 100 + yy
    if month < 1 or month > 12 or day < 1 or day > _days_in_month(year, month):
        return False
    if hour > 23 or minute > 59 or second > 59:
        return False
    var seconds = (
        _days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset_s
    )
    micros = seconds * 1_000_000 + fraction
    return True


def stamp_micros(d: I64P) raises -> Int:
    """Descriptor: n, int32 offsets addr (n + 1, from the array's first row), bytes addr,
    validity bitmap addr (0: no nulls), its bit offset, max_millis, int64 micros out
    addr, uint8 known out addr. Writes each row's epoch microseconds (0 where
    unknown) and whether it was read; returns how many were."""
    var n = Int(d[unsafe_offset=0])
    var offsets = I32P(unsafe_from_address=Int(d[unsafe_offset=1]))
    var data = u8p(Int(d[unsafe_offset=2]))
    var validity = Int(d[unsafe_offset=3])
    var bit_offset = Int(d[unsafe_offset=4])
    var max_millis = Int(d[unsafe_offset=5])
    var out = i64p(Int(d[unsafe_offset=6]))
    var known = u8p(Int(d[unsafe_offset=7]))
    var bits = u8p(validity)
    var read = 0
    for i in range(n):
        var micros = 0
        var ok = False
        var present = True
        if validity != 0:
            var b = bit_offset + i
            present = (Int(bits[unsafe_offset=b >> 3]) >> (b & 7)) & 1 == 1
        if present:
            var start = Int(offsets[unsafe_offset=i])
            var end = Int(offsets[unsafe_offset=i + 1])
            if end - start <= 16:
                ok = _millis(data, start, end, max_millis, micros)
            else:
                ok = _rfc3339(data, start, end, micros)
        out[unsafe_offset=i] = Int64(micros) if ok else 0
        known[unsafe_offset=i] = 1 if ok else 0
        if ok:
            read += 1
    return read
