"""Spark types as PostgreSQL types (lossless), and values as the text PostgreSQL's COPY reads.

The mapping (:func:`pg_type`):

=========================================  ==========================================
Spark                                      PostgreSQL
=========================================  ==========================================
boolean                                    boolean
byte, short / int / long                   smallint / integer / bigint
float / double                             real / double precision (NaN, ±Infinity kept)
decimal(p,s)                               numeric(p,s)
string, char(n), varchar(n)                text (a NUL character is refused: text cannot hold it)
binary                                     bytea
date                                       date (years before 1 as BC)
timestamp / timestamp_ntz                  timestamptz / timestamp
time(p)                                    time
array of one of the above                  that type's array (``integer[]``)
array of an array, struct or map; struct;  jsonb (see below)
map
void (an all-NULL column Spark could not type)  text
=========================================  ==========================================

Anything else (intervals, variant, calendar intervals) is refused in one line naming the table
and the column: PostgreSQL's ``interval`` would not give the same value back.

A PostgreSQL array is rectangular and its elements are scalars (``integer[][]`` is the same
type as ``integer[]``, and a NULL or ragged inner array cannot be stored), so an array whose
elements are arrays, structs or maps is stored as jsonb, like structs and maps.

The jsonb form of a nested value (:func:`json_value`): a struct is an object of its fields in
order (a struct with two fields of one name is refused: jsonb keeps one), an array is an
array, a map with string keys is an object, a map with any other key type is an array of
``[key, value]`` pairs sorted by the key's JSON text (a map's entry order means nothing, so two
equal maps give equal jsonb); numbers are numbers (a decimal exactly its digits),
NaN / Infinity / -Infinity are the strings ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"``;
binary is ``"\\x<hex>"`` (bytea's text), dates, times and timestamps ISO 8601 text (a
timestamp with ``Z``). A NUL character in a nested string is refused (jsonb cannot hold it).

The COPY text (:func:`csv_batch`): COPY ``FORMAT csv`` with every value quoted except NULL,
so an empty string is not NULL. Numbers, booleans, decimals and times are Arrow's own text
(exact: floats are written as the shortest text that reads back as the same float);
dates and timestamps before year 1 are rewritten into PostgreSQL's ``BC`` form.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from psycopg import sql
from pyspark.sql import types as T

from diffcdc.errors import ConfigError, InputRefused

#: The column of a table :func:`diffcdc.sinks.postgres.copy.copy_into` loads in parallel: the
#: part (staged file, or Spark partition) each row came from, so a retried task replaces its own.
PART_COLUMN = "__diffcdc_part"
#: PostgreSQL's identifier limit (NAMEDATALEN - 1): a longer name is truncated by the server.
MAX_IDENTIFIER_BYTES = 63

_SCALARS: dict[type, str] = {
    T.BooleanType: "boolean",
    T.ByteType: "smallint",
    T.ShortType: "smallint",
    T.IntegerType: "integer",
    T.LongType: "bigint",
    T.FloatType: "real",
    T.DoubleType: "double precision",
    T.StringType: "text",
    T.CharType: "text",
    T.VarcharType: "text",
    T.BinaryType: "bytea",
    T.DateType: "date",
    T.TimestampType: "timestamptz",
    T.TimestampNTZType: "timestamp",
    T.NullType: "text",
}
_TIME_TYPE = getattr(T, "TimeType", None)  # Spark 4.1+ (absent on PySpark 3.5)


def check_identifier(name: str, where: str) -> None:
    """Refuse a name PostgreSQL would not keep as given: empty, a NUL character, or longer than
    63 bytes in UTF-8 (the server silently truncates it, and two names could then clash)."""
    if not name:
        raise ConfigError(f"{where}: an empty name cannot be a PostgreSQL identifier",
                          hint="give the table or column a name")
    if "\x00" in name:
        raise ConfigError(f"{where}: name {name!r} holds a NUL character, which PostgreSQL "
                          "identifiers cannot", hint="rename it (a normalizer, or the config)")
    size = len(name.encode("utf-8"))
    if size > MAX_IDENTIFIER_BYTES:
        raise ConfigError(
            f"{where}: name {name!r} is {size} bytes in UTF-8; PostgreSQL keeps only the first "
            f"{MAX_IDENTIFIER_BYTES} (it would be silently truncated)",
            hint=f"rename it to at most {MAX_IDENTIFIER_BYTES} bytes")


def is_scalar(dtype: T.DataType) -> bool:
    """Whether ``dtype`` maps to a PostgreSQL scalar type (one an array can hold)."""
    if isinstance(dtype, T.DecimalType) or type(dtype) in _SCALARS:
        return True
    return _TIME_TYPE is not None and isinstance(dtype, _TIME_TYPE)


def is_json(dtype: T.DataType) -> bool:
    """Whether ``dtype`` is stored as jsonb (structs, maps, arrays of nested values)."""
    if isinstance(dtype, (T.StructType, T.MapType)):
        return True
    return isinstance(dtype, T.ArrayType) and not is_scalar(dtype.elementType)


def _scalar_name(dtype: T.DataType) -> sql.Composable:
    if isinstance(dtype, T.DecimalType):
        return sql.SQL("numeric({}, {})").format(sql.Literal(dtype.precision),
                                                 sql.Literal(dtype.scale))
    if _TIME_TYPE is not None and isinstance(dtype, _TIME_TYPE):
        return sql.SQL("time")
    return sql.SQL(_SCALARS[type(dtype)])


def _refuse(where: str, dtype: T.DataType, why: str) -> InputRefused:
    return InputRefused(f"{where}: type {dtype.simpleString()} {why}",
                        hint="cast the column in the snapshot (e.g. to string), or exclude it "
                             "from this sink's table")


def _check_nested(dtype: T.DataType, where: str) -> None:
    """Refuse what jsonb cannot hold losslessly inside a nested type."""
    if isinstance(dtype, T.StructType):
        names = [f.name for f in dtype.fields]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise _refuse(where, dtype, f"has fields named {twice} more than once, and a "
                                        "jsonb object keeps one of them")
        for f in dtype.fields:
            _check_nested(f.dataType, where)
    elif isinstance(dtype, T.ArrayType):
        _check_nested(dtype.elementType, where)
    elif isinstance(dtype, T.MapType):
        _check_nested(dtype.keyType, where)
        _check_nested(dtype.valueType, where)
    elif not is_scalar(dtype):
        raise _refuse(where, dtype, "has no lossless PostgreSQL type")


def pg_type(spark_type: T.DataType, where: str) -> sql.Composable:
    """The PostgreSQL type holding ``spark_type``'s values losslessly (see the module);
    :class:`InputRefused` naming ``where`` (the table and column) for one it cannot."""
    if is_scalar(spark_type):
        return _scalar_name(spark_type)
    if is_json(spark_type):
        _check_nested(spark_type, where)
        return sql.SQL("jsonb")
    if isinstance(spark_type, T.ArrayType):
        return sql.SQL("{}[]").format(_scalar_name(spark_type.elementType))
    raise _refuse(where, spark_type, "has no lossless PostgreSQL type")


def column_defs(schema: T.StructType, where: str) -> sql.Composed:
    """``"col" type, ...`` for a CREATE TABLE, every name quoted and checked."""
    parts = []
    for f in schema.fields:
        at = f"{where}, column {f.name!r}"
        check_identifier(f.name, at)
        parts.append(sql.SQL("{} {}").format(sql.Identifier(f.name), pg_type(f.dataType, at)))
    return sql.SQL(", ").join(parts)


# -- values as COPY text ------------------------------------------------------------------------

def _nul_refusal(where: str, column: str) -> InputRefused:
    return InputRefused(
        f"{where}, column {column!r}: a value holds a NUL character (\\x00), which PostgreSQL "
        "text and jsonb cannot store",
        hint="remove it from the source or cast the column to binary (a normalizer does not "
             "change published values); a version already committed with it stays unpublished in "
             "this sink until `diffcdc reload --table T --sink NAME` with a snapshot without it")


def _bc(text: str) -> str:
    """Arrow's ISO text of a date or timestamp with a year before 1 (``-0221-09-04...``,
    ``0000-...``) as PostgreSQL's: ``0222-09-04... BC`` (ISO year 0 is 1 BC)."""
    negative = text.startswith("-")
    body = text[1:] if negative else text
    year_text, rest = body.split("-", 1)
    year = -int(year_text) if negative else int(year_text)
    if year >= 1:
        return text
    zone = ""
    if rest.endswith("Z"):
        rest, zone = rest[:-1], "Z"
    return f"{1 - year:04d}-{rest}{zone} BC"


_DAY_US = 86_400_000_000


def _date_strings(days: pa.Array) -> pa.Array:
    """date32 values as ISO text: each distinct day cast once (Arrow's cast is per value)."""
    encoded = pc.dictionary_encode(days)
    return pc.take(pc.cast(encoded.dictionary, pa.string()), encoded.indices)


def _floor_divmod(values: pa.Array, by: int) -> tuple[pa.Array, pa.Array]:
    """Integer floor division and its non-negative remainder (Arrow's divide truncates)."""
    quotient = pc.divide(values, by)
    rest = pc.subtract(values, pc.multiply(quotient, by))
    negative = pc.less(rest, 0)
    return (pc.if_else(negative, pc.subtract(quotient, 1), quotient),
            pc.if_else(negative, pc.add(rest, by), rest))


def _pad(values: pa.Array, width: int) -> pa.Array:
    return pc.utf8_lpad(pc.cast(values, pa.string()), width, "0")


def _timestamp_strings(array: pa.Array) -> pa.Array:
    """Microsecond timestamps as ``YYYY-MM-DD HH:MM:SS.ffffff`` (``Z`` with a time zone),
    from integer parts: Arrow's timestamp-to-text cast is ~8x slower."""
    us = array.cast(pa.int64())
    days, rest = _floor_divmod(us, _DAY_US)
    hours, rest = _floor_divmod(rest, 3_600_000_000)
    minutes, rest = _floor_divmod(rest, 60_000_000)
    seconds, micros = _floor_divmod(rest, 1_000_000)
    zone = "Z" if array.type.tz is not None else ""
    return pc.binary_join_element_wise(
        _date_strings(days.cast(pa.int32()).cast(pa.date32())), " ", _pad(hours, 2), ":",
        _pad(minutes, 2), ":", _pad(seconds, 2), ".", _pad(micros, 6), zone, "")


def _dates_text(array: pa.Array) -> pa.Array:
    text = (_timestamp_strings(array) if pa.types.is_timestamp(array.type)
            else _date_strings(array.cast(pa.date32())))
    early = pc.or_(pc.starts_with(text, "-"), pc.starts_with(text, "0000"))
    if not pc.any(early).as_py():
        return text
    return pa.array([None if v is None else _bc(v) for v in text.to_pylist()], pa.string())


def _bytea(value: bytes) -> str:
    return "\\x" + value.hex()


def scalar_text(array: pa.Array, where: str, column: str) -> pa.Array:
    """A flat Arrow array as PostgreSQL's input text of each value (NULL stays NULL)."""
    t = array.type
    if pa.types.is_dictionary(t):
        array = array.dictionary_decode()
        t = array.type
    if pa.types.is_null(t):
        return pa.nulls(len(array), pa.string())
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        array = array.cast(pa.string())
        if pc.any(pc.fill_null(pc.match_substring(array, "\x00"), False)).as_py():
            raise _nul_refusal(where, column)
        return array
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) \
            or pa.types.is_binary_view(t):
        return pa.array([None if v is None else _bytea(v) for v in array.to_pylist()],
                        pa.string())
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        if pa.types.is_timestamp(t) and t.unit != "us":
            array = array.cast(pa.timestamp("us", t.tz))
        return _dates_text(array)
    if pa.types.is_time(t):
        return pc.cast(array.cast(pa.time64("us")), pa.string())
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t) \
            or pa.types.is_decimal(t):
        return pc.cast(array, pa.string())
    raise InputRefused(f"{where}, column {column!r}: Arrow type {t} has no PostgreSQL text form")


def _array_element(text: str | None) -> str:
    if text is None:
        return "NULL"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def array_text(array: pa.Array, where: str, column: str) -> pa.Array:
    """A list array of scalars as PostgreSQL array literals (``{"1","2",NULL}``)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_large_list(array.type):
        array = array.cast(pa.list_(array.type.value_type))
    values = array.values
    offsets = array.offsets.to_pylist()
    elements = scalar_text(values, where, column).to_pylist()
    out: list[str | None] = []
    valid = array.is_valid().to_pylist()
    for i, ok in enumerate(valid):
        if not ok:
            out.append(None)
            continue
        out.append("{" + ",".join(_array_element(e)
                                   for e in elements[offsets[i]:offsets[i + 1]]) + "}")
    return pa.array(out, pa.string())


def _iso(value: Any) -> str:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.timezone.utc).replace(tzinfo=None).isoformat(
                timespec="microseconds") + "Z"
        return value.isoformat(timespec="microseconds")
    return value.isoformat()


def json_value(value: Any, dtype: pa.DataType, where: str = "", column: str = "") -> str:
    """The jsonb text of one nested value (Arrow's Python value of type ``dtype``)."""
    if value is None:
        return "null"
    if pa.types.is_struct(dtype):
        fields = [dtype.field(i) for i in range(dtype.num_fields)]
        return "{" + ",".join(
            _json_string(f.name, where, column) + ":" + json_value(value.get(f.name), f.type,
                                                                   where, column)
            for f in fields) + "}"
    if pa.types.is_map(dtype):
        kt, vt = dtype.key_type, dtype.item_type
        if pa.types.is_string(kt) or pa.types.is_large_string(kt):
            return "{" + ",".join(_json_string(k, where, column) + ":"
                                  + json_value(v, vt, where, column) for k, v in value) + "}"
        pairs = sorted((json_value(k, kt, where, column), json_value(v, vt, where, column))
                       for k, v in value)  # by key: a map's entry order means nothing
        return "[" + ",".join(f"[{k},{v}]" for k, v in pairs) + "]"
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) \
            or pa.types.is_fixed_size_list(dtype):
        return "[" + ",".join(json_value(v, dtype.value_type, where, column)
                              for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return '"NaN"'
        if math.isinf(value):
            return '"Infinity"' if value > 0 else '"-Infinity"'
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return _json_string(_bytea(bytes(value)), where, column)
    if isinstance(value, (dt.date, dt.time)):
        return _json_string(_iso(value), where, column)
    if isinstance(value, str):
        return _json_string(value, where, column)
    raise InputRefused(f"{where}, column {column!r}: value of Arrow type {dtype} has no jsonb form")


def _json_string(text: str, where: str, column: str) -> str:
    if "\x00" in text:
        raise _nul_refusal(where, column)
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def json_text(array: pa.Array, where: str, column: str) -> pa.Array:
    """A nested Arrow array as jsonb text per value."""
    dtype = array.type
    try:
        values = array.to_pylist()
    except (ValueError, OverflowError) as err:  # a date Python cannot hold, inside a struct
        raise InputRefused(f"{where}, column {column!r}: a nested value cannot be written as "
                           f"jsonb ({err})", hint="cast the column to string in the snapshot"
                           ) from None
    return pa.array([None if v is None else json_value(v, dtype, where, column) for v in values],
                    pa.string())


def _nested(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_list(t) \
        or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def column_text(array: pa.Array, where: str, column: str) -> pa.Array:
    """Any Arrow column as PostgreSQL's input text (scalars, arrays or jsonb as the type maps)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    t = array.type
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return json_text(array, where, column)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        if _nested(t.value_type):
            return json_text(array, where, column)
        if pa.types.is_fixed_size_list(t):
            array = array.cast(pa.list_(t.value_type))
        return array_text(array, where, column)
    return scalar_text(array, where, column)


def csv_batch(batch: pa.RecordBatch | pa.Table, columns: Sequence[str], where: str,
              extra: Sequence[tuple[str, pa.Array]] = ()) -> bytes:
    """The rows of ``batch`` (``columns`` in that order, then ``extra`` columns) as COPY
    ``FORMAT csv`` text: every value quoted but NULL (empty and unquoted)."""
    arrays = [column_text(batch.column(c), where, c) for c in columns]
    names = list(columns)
    for name, array in extra:
        arrays.append(pc.cast(array, pa.string()))
        names.append(name)
    table = pa.Table.from_arrays(arrays, names=[f"c{i}" for i in range(len(names))])
    out = io.BytesIO()
    pacsv.write_csv(table, out, pacsv.WriteOptions(include_header=False,
                                                   quoting_style="all_valid"))
    return out.getvalue()
