"""Writing delimited text landing files: a whole Arrow table encoded at once.

The quoting rules are :meth:`TextFormat.field <diffcdc.sinks.openmirroring.text.TextFormat.field>`
(the module docstring of ``text.py`` states them); here they are applied to whole columns with
``pyarrow.compute`` (substring tests, replacements, element-wise joins), so strings, integers,
booleans, decimals, dates and microsecond timestamps never pass through Python one value at a
time. The value texts Arrow's casts make are the ones the spec asks for (checked against
Python's own formatting in tests/test_landing_contract.py); so are doubles between 1e-4 and
1e10, where Arrow's shortest round-trip text is ``repr``'s but for a whole number's ``.0``.
Other doubles, singles, times, binary and nested values, and a decimal column Arrow would write
in scientific notation, are formatted in Python. A value the declared characters cannot represent
is refused with the message the scalar rules give.
"""

from __future__ import annotations

import base64
import codecs
import datetime as dt
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from diffcdc.errors import InputRefused
from diffcdc.sinks.openmirroring.text import TextFormat
from diffcdc.sinks.openmirroring.text_codecs import compress
from diffcdc.storage import paths

_TEXT = pa.large_string()  # 64-bit offsets: one file's text may pass 2 GiB


def _char_class(chars: str) -> str:
    """An RE2 character class of exactly ``chars`` (each written as a code point)."""
    return "[" + "".join(f"\\x{{{ord(c):x}}}" for c in sorted(set(chars))) + "]"


def write_text_file(part: str, target: str, fmt: TextFormat, codec: str) -> None:
    """Convert one staged Parquet part into a text landing file."""
    with paths.open_read(part) as handle:
        data = encode_table(fmt, pq.read_table(handle))
    paths.write_bytes(target, compress(data, codec))


def encode_table(fmt: TextFormat, table: pa.Table) -> bytes:
    """A whole file: header row, then one line per row, every line ends with the separator."""
    names = table.column_names
    header = fmt.column_separator.join(fmt.checked_field(name, name) for name in names)
    body = b""
    if names and table.num_rows:
        fields = [_fields(fmt, name, text_values(table.column(i))) for i, name in enumerate(names)]
        sep, row_sep = pa.scalar(fmt.column_separator, _TEXT), pa.scalar(fmt.row_separator, _TEXT)
        lines = pc.binary_join_element_wise(*fields, sep)
        lines = pc.binary_join_element_wise(lines, pa.scalar("", _TEXT), row_sep)  # line + row_sep
        body = _utf8_bytes(lines)
    head = header + fmt.row_separator
    try:
        if codecs.lookup(fmt.encoding).name == "utf-8":
            return head.encode("utf-8") + body
        return (head + body.decode("utf-8")).encode(fmt.encoding)
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end]
        raise InputRefused(
            f"the value text {bad!r} cannot be written in encoding {fmt.encoding}",
            hint="choose an encoding that holds every value (UTF-8), or fix the data",
        ) from None


def _utf8_bytes(array: pa.Array) -> bytes:
    """The values of a string array without NULLs, back to back (its data buffer's span)."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)
    start, end = offsets[array.offset], offsets[array.offset + len(array)]
    data = array.buffers()[2]
    return b"" if data is None else data[start:end].to_pybytes()


# -- values to text ----------------------------------------------------------------------------


def text_values(column: pa.ChunkedArray) -> pa.Array:
    """A column's values as their text (NULL stays NULL)."""
    kind = column.type
    array = column.combine_chunks()
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return array.cast(_TEXT)
    if pa.types.is_integer(kind):
        return pc.cast(array, _TEXT)
    if pa.types.is_boolean(kind):
        return pc.if_else(array, pa.scalar("true", _TEXT), pa.scalar("false", _TEXT))
    if pa.types.is_date32(kind):
        return pc.cast(array, _TEXT)  # YYYY-MM-DD
    if pa.types.is_decimal(kind):
        text = pc.cast(array, _TEXT)  # plain notation, except tiny values at large scales
        if not pc.any(pc.match_substring(text, "E")).as_py():
            return text
    if pa.types.is_float64(kind):
        return _double_texts(array)
    if pa.types.is_timestamp(kind) and kind.unit == "us":
        # instants as UTC wall time plus Z; Arrow writes "YYYY-MM-DD HH:MM:SS.ffffff"
        wall = pc.cast(array, pa.timestamp("us")) if kind.tz is not None else array
        text = pc.utf8_replace_slice(pc.cast(wall, _TEXT), start=10, stop=11, replacement="T")
        if kind.tz is not None:
            text = pc.binary_join_element_wise(text, pa.scalar("Z", _TEXT), pa.scalar("", _TEXT))
        return text
    return pa.array(python_text(array), _TEXT)


def _double_texts(array: pa.Array) -> pa.Array:
    """Doubles as ``repr`` writes them (shortest round-trip digits). Arrow's cast writes the
    same digits, in positional notation between 1e-6 and 1e10 where ``repr`` does so between
    1e-4 and 1e16, and without ``repr``'s ``.0`` after a whole number: between 1e-4 and 1e10 the
    two differ only by that ``.0``; other values (and NaN, infinities) are written in Python."""
    text = pc.cast(array, _TEXT)
    size = pc.abs(array)
    arrow = pc.and_(
        pc.and_(pc.is_finite(array), pc.less(size, 1e10)),
        pc.and_(pc.or_(pc.greater_equal(size, 1e-4), pc.equal(size, 0)),
                pc.invert(pc.match_substring(text, "e"))),
    )
    whole = pc.invert(pc.match_substring(text, "."))
    text = pc.if_else(whole, pc.binary_join_element_wise(text, pa.scalar(".0", _TEXT),
                                                         pa.scalar("", _TEXT)), text)
    rest = pc.and_(pc.invert(arrow), pc.is_valid(array))
    if not pc.any(rest).as_py():
        return text
    formatted = python_text(pc.filter(array, rest))
    return pc.replace_with_mask(text, pc.fill_null(rest, False), pa.array(formatted, _TEXT))


def python_text(array: pa.Array) -> list[str | None]:
    """Value texts of the types formatted in Python (also the reference for the others)."""
    kind = array.type
    values = array.to_pylist()
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return values
    if pa.types.is_float32(kind):
        return [None if v is None else _float_text(v, single=True) for v in values]
    if pa.types.is_floating(kind):
        return [None if v is None else _float_text(v) for v in values]
    if pa.types.is_boolean(kind):
        return [None if v is None else ("true" if v else "false") for v in values]
    if pa.types.is_decimal(kind):
        return [None if v is None else format(v, "f") for v in values]
    if pa.types.is_timestamp(kind):
        aware = kind.tz is not None
        return [None if v is None else _timestamp_text(v, aware) for v in values]
    if pa.types.is_date(kind):
        return [None if v is None else v.isoformat() for v in values]
    if pa.types.is_time(kind):
        return [None if v is None else v.isoformat(timespec="microseconds") for v in values]
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return [None if v is None else base64.b64encode(v).decode("ascii") for v in values]
    if pa.types.is_null(kind):
        return [None] * len(values)
    return [None if v is None else str(v) for v in values]


def _float_text(value: float, single: bool = False) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return str(np.float32(value)) if single else repr(value)


def _timestamp_text(value: dt.datetime, aware: bool) -> str:
    if aware:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat(timespec="microseconds") + "Z"
    return value.isoformat(timespec="microseconds")


# -- text to fields ----------------------------------------------------------------------------


def _fields(fmt: TextFormat, column: str, values: pa.Array) -> pa.Array:
    """Each value as its field in the file (TextFormat.field on a whole column)."""
    sep, quote, esc, null = fmt.column_separator, fmt.quote, fmt.escape, fmt.null_value
    is_null_token = pc.equal(values, pa.scalar(null, _TEXT))
    if quote:
        # Arrow's white space is exactly what str.strip() removes (tests/test_landing_contract.py)
        edge_space = pc.not_equal(values, pc.utf8_trim_whitespace(values))
        special = _has_any(values, (sep, "\r", "\n", quote, esc))
        needs = pc.or_(pc.or_(special, is_null_token), edge_space)
        if not pc.any(needs).as_py():
            return pc.fill_null(values, pa.scalar(null, _TEXT))
        if esc == quote:
            body = pc.replace_substring(values, quote, quote + quote)
        elif esc:
            body = pc.replace_substring(pc.replace_substring(values, esc, esc + esc), quote, esc + quote)
        else:
            if pc.any(pc.match_substring(values, quote)).as_py():
                _refuse(fmt, column, values)
            body = values
        out = pc.if_else(needs, _wrap(quote, body, quote), values)
    elif not esc:
        if pc.any(pc.or_(_has_any(values, (sep, "\r", "\n")), is_null_token)).as_py():
            _refuse(fmt, column, values)
        out = values
    else:
        if null == "" and pc.any(is_null_token).as_py():
            _refuse(fmt, column, values)
        # one escape per character: a multi-character separator is never one character
        protected = "".join(c for c in (sep, "\r", "\n", esc) if len(c) == 1)
        if not pc.any(pc.or_(_has_any(values, tuple(protected)), is_null_token)).as_py():
            return pc.fill_null(values, pa.scalar(null, _TEXT))
        rewrite = esc.replace("\\", "\\\\") + "\\1"
        body = pc.replace_substring_regex(values, f"({_char_class(protected)})", rewrite)
        lead = pc.and_(is_null_token, pc.invert(pc.starts_with(body, esc)))
        out = pc.if_else(lead, _wrap(esc, body, ""), body)
    return pc.fill_null(out, pa.scalar(null, _TEXT))


def _has_any(values: pa.Array, texts: tuple[str, ...]) -> pa.Array:
    """Whether each value contains any of ``texts`` (one scan for all single characters)."""
    found = pc.match_substring_regex(values, _char_class("".join(t for t in texts if len(t) == 1)))
    for text in (t for t in texts if len(t) > 1):
        found = pc.or_(found, pc.match_substring(values, text))
    return found


def _wrap(before: str, body: pa.Array, after: str) -> pa.Array:
    return pc.binary_join_element_wise(
        pa.scalar(before, _TEXT), body, pa.scalar(after, _TEXT), pa.scalar("", _TEXT)
    )


def _refuse(fmt: TextFormat, column: str, values: pa.Array) -> None:
    """Raise the scalar rules' refusal for the first value of ``column`` they refuse."""
    for value in values.to_pylist():
        fmt.checked_field(value, column)
    raise InputRefused(f"a value of column {column!r} cannot be written as delimited text",
                       hint="declare a quote and escape character (text settings), or use Parquet")
