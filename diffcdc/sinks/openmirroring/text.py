"""Delimited text landing files (spec §1): writing, and reading back with only ``_metadata.json``.

Quoting rules (what ``FileFormatTypeProperties`` declares is all a reader needs):

* NULL is the ``NullValue`` token, never quoted. A non-NULL value that equals the token is
  quoted, so ``""`` (quoted) is the empty string while an empty unquoted field is NULL (with the
  default empty token).
* With a ``QuoteCharacter`` Q, a value is quoted when it contains the column separator, Q, the
  escape character, CR or LF, equals the NULL token, or has leading/trailing whitespace. Inside
  quotes Q is written as ``QQ`` when ``EscapeCharacter`` is Q, else as ``EQ``; the escape
  character itself as ``EE``. Unquoted fields are taken literally.
* Without a quote character, the escape character E protects the column separator, CR, LF and
  E itself (``E<char>`` means the literal char); a value equal to a non-empty NULL token starts
  with E. A value that cannot be represented (no quote and no escape, or a quote in a value
  with no escape) is refused, never written ambiguously.
* Every row, the header and the last row included, ends with ``RowSeparator``.
* Value text: integers in decimal; Single/Double in shortest round-trip form with ``NaN``,
  ``Infinity``, ``-Infinity``; decimals in plain notation; booleans ``true``/``false``; dates
  ``YYYY-MM-DD``; timestamps ``YYYY-MM-DDTHH:MM:SS.ffffff`` with a trailing ``Z`` for instants
  (Spark ``timestamp``) and none for local date-times (``timestamp_ntz``); binary as base64;
  struct/array/map as JSON text.

Compression: the whole file is compressed with the table's codec and keeps its spec name
(``<20 digits>.<FileExtension>``): gzip (RFC 1952 member, mtime 0), zstd (one zstd frame),
snappy (the Snappy framing format with its ``sNaPpY`` stream identifier). Each starts with its
own magic bytes, so a reader detects the codec from the content; ``none`` is plain text.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import gzip
import io
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import types as T

from diffcdc.errors import InputRefused, LandingZoneMismatch

#: The spec's DataType values.
DATA_TYPES = ("Double", "Single", "Int16", "Int32", "Int64", "DateTime", "IDate", "ITime",
              "String", "Boolean", "ByteArray")

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SNAPPY_STREAM = b"\xff\x06\x00\x00sNaPpY"


@dataclass(frozen=True)
class TextFormat:
    """The delimited-text properties of a table, as declared in ``_metadata.json``."""

    extension: str
    row_separator: str = "\r\n"
    column_separator: str = ","
    quote: str = '"'
    escape: str = "\\"
    null_value: str = ""
    encoding: str = "UTF-8"

    def properties(self) -> dict[str, Any]:
        """``FileFormatTypeProperties`` with every property of the spec."""
        return {
            "FirstRowAsHeader": True,
            "RowSeparator": self.row_separator,
            "ColumnSeparator": self.column_separator,
            "QuoteCharacter": self.quote,
            "EscapeCharacter": self.escape,
            "NullValue": self.null_value,
            "Encoding": self.encoding,
        }

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> TextFormat:
        """Read the declared properties back (missing ones take the spec defaults)."""
        props = meta.get("FileFormatTypeProperties") or {}
        if props.get("FirstRowAsHeader") is False:
            raise LandingZoneMismatch("FirstRowAsHeader must be true for delimited text")
        return cls(
            extension=str(meta.get("FileExtension") or "csv"),
            row_separator=props.get("RowSeparator", "\r\n"),
            column_separator=props.get("ColumnSeparator", ","),
            quote=props.get("QuoteCharacter", '"'),
            escape=props.get("EscapeCharacter", "\\"),
            null_value=props.get("NullValue", ""),
            encoding=props.get("Encoding", "UTF-8"),
        )

    # -- writing -------------------------------------------------------------------------------

    def field(self, value: str | None) -> str:
        """One field as it appears in the file (raises ValueError if not representable)."""
        if value is None:
            return self.null_value
        sep, quote, esc = self.column_separator, self.quote, self.escape
        special = sep in value or "\r" in value or "\n" in value
        if quote:
            needs = (
                special
                or quote in value
                or (esc and esc in value)
                or value == self.null_value
                or value != value.strip()
            )
            if not needs:
                return value
            if esc == quote:
                body = value.replace(quote, quote + quote)
            elif esc:
                body = value.replace(esc, esc + esc).replace(quote, esc + quote)
            elif quote in value:
                raise ValueError("contains the quote character and no escape character is declared")
            else:
                body = value
            return quote + body + quote
        if not esc:
            if special:
                raise ValueError("contains a separator or line break and neither a quote nor an "
                                 "escape character is declared")
            if value == self.null_value:
                raise ValueError("equals the NULL token and no quote character is declared")
            return value
        if value == self.null_value == "":
            raise ValueError("is an empty string, the NULL token, and no quote character is declared")
        out = []
        for ch in value:
            out.append(esc + ch if ch in (sep, "\r", "\n", esc) else ch)
        body = "".join(out)
        if value == self.null_value and not body.startswith(esc):
            body = esc + body
        return body

    def encode_table(self, table: pa.Table) -> bytes:
        """A whole file: header row, then one line per row, every line ends with the separator."""
        columns = table.column_names
        formatted = [_format_column(table.column(i)) for i in range(table.num_columns)]
        sep, row_sep = self.column_separator, self.row_separator
        lines = [sep.join(self._field_of(name, name) for name in columns)]
        for values in zip(*formatted) if formatted else ():
            lines.append(sep.join(self._field_of(v, columns[i]) for i, v in enumerate(values)))
        text = row_sep.join(lines) + row_sep
        try:
            return text.encode(self.encoding)
        except UnicodeEncodeError as exc:
            bad = exc.object[exc.start : exc.end]
            raise InputRefused(
                f"the value text {bad!r} cannot be written in encoding {self.encoding}",
                hint="choose an encoding that holds every value (UTF-8), or fix the data",
            ) from None

    def _field_of(self, value: str | None, column: str) -> str:
        try:
            return self.field(value)
        except ValueError as exc:
            raise InputRefused(
                f"a value of column {column!r} cannot be written as delimited text: it {exc}",
                hint="declare a quote and escape character (text settings), or use Parquet",
            ) from None

    # -- reading -------------------------------------------------------------------------------

    def parse(self, text: str) -> list[list[str | None]]:
        """Split a decoded file into rows of fields (NULL as None); the header is row 0."""
        sep, row_sep, quote, esc = self.column_separator, self.row_separator, self.quote, self.escape
        rows: list[list[str | None]] = []
        row: list[str | None] = []
        i, n = 0, len(text)
        while i < n:
            value: str | None
            if quote and text[i] == quote:
                i += 1
                buf = []
                while True:
                    if i >= n:
                        raise LandingZoneMismatch("unterminated quoted value in delimited text")
                    ch = text[i]
                    if ch == quote:
                        if esc == quote and text[i + 1 : i + 2] == quote:
                            buf.append(quote)
                            i += 2
                            continue
                        i += 1
                        break
                    if esc and esc != quote and ch == esc and i + 1 < n:
                        buf.append(text[i + 1])
                        i += 2
                        continue
                    buf.append(ch)
                    i += 1
                value = "".join(buf)
            else:
                buf = []
                escaped = False
                while i < n and text[i] != sep and not text.startswith(row_sep, i):
                    ch = text[i]
                    if not quote and esc and ch == esc and i + 1 < n:
                        buf.append(text[i + 1])
                        escaped = True
                        i += 2
                        continue
                    buf.append(ch)
                    i += 1
                raw = "".join(buf)
                value = None if raw == self.null_value and not escaped else raw
            row.append(value)
            if i >= n:
                rows.append(row)
                break
            if text[i] == sep:
                i += 1
                if i >= n:  # a trailing separator: one more (empty) field
                    row.append(None if self.null_value == "" else "")
                    rows.append(row)
                continue
            if text.startswith(row_sep, i):
                i += len(row_sep)
                rows.append(row)
                row = []
                continue
            raise LandingZoneMismatch(f"unexpected {text[i]!r} after a quoted value at offset {i}")
        return rows


# ------------------------------------------------------------------------------------------
# Types


def data_type(dtype: T.DataType) -> str:
    """The spec DataType of a landing column (complex types are JSON text by then)."""
    if isinstance(dtype, (T.ByteType, T.ShortType)):
        return "Int16"
    if isinstance(dtype, T.IntegerType):
        return "Int32"
    if isinstance(dtype, T.LongType):
        return "Int64"
    if isinstance(dtype, T.FloatType):
        return "Single"
    if isinstance(dtype, T.DoubleType):
        return "Double"
    if isinstance(dtype, T.DecimalType):
        # Exact where a listed type is exact: whole numbers up to 18 digits fit Int64, up to
        # 15 significant digits survive a Double; wider decimals travel as exact text.
        if dtype.scale == 0 and dtype.precision <= 18:
            return "Int64"
        return "Double" if dtype.precision <= 15 else "String"
    if isinstance(dtype, T.BooleanType):
        return "Boolean"
    if isinstance(dtype, T.DateType):
        return "IDate"
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return "DateTime"
    if isinstance(dtype, T.BinaryType):
        return "ByteArray"
    time_type = getattr(T, "TimeType", None)
    if time_type is not None and isinstance(dtype, time_type):
        return "ITime"
    return "String"


def schema_definition(schema: T.StructType, keys: Sequence[str]) -> dict[str, Any]:
    """``SchemaDefinition`` for every data column (the row marker is not a table column)."""
    key_set = {k.lower() for k in keys}
    return {
        "Columns": [
            {
                "Name": f.name,
                "DataType": data_type(f.dataType),
                "IsNullable": f.name.lower() not in key_set and bool(f.nullable),
            }
            for f in schema.fields
        ]
    }


def _format_column(column: pa.ChunkedArray) -> list[str | None]:
    kind = column.type
    values = column.to_pylist()
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


def parse_value(text: str | None, dtype: str) -> Any:
    """A field's value from its text and declared DataType (the reference reader)."""
    if text is None:
        return None
    if dtype in ("Int16", "Int32", "Int64"):
        return int(text)
    if dtype in ("Double", "Single"):
        value = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(text)
        value = float(text) if value is None else value
        return float(np.float32(value)) if dtype == "Single" else value
    if dtype == "Boolean":
        return {"true": True, "false": False}[text.lower()]
    if dtype == "IDate":
        return dt.date.fromisoformat(text)
    if dtype == "DateTime":
        if text.endswith("Z"):
            return dt.datetime.fromisoformat(text[:-1]).replace(tzinfo=dt.timezone.utc)
        return dt.datetime.fromisoformat(text)
    if dtype == "ITime":
        return dt.time.fromisoformat(text)
    if dtype == "ByteArray":
        return base64.b64decode(text)
    return text


def coerce(value: Any, dtype: str) -> Any:
    """A snapshot value as the declared DataType holds it (to compare with a replayed mirror)."""
    if value is None:
        return None
    if isinstance(value, decimal.Decimal):
        if dtype == "Int64":
            return int(value)
        if dtype in ("Double", "Single"):
            return float(value)
        return format(value, "f")
    if dtype == "Single" and isinstance(value, float):
        return float(np.float32(value))
    return value


# ------------------------------------------------------------------------------------------
# Files


def write_text_file(part: str, target: str, fmt: TextFormat, codec: str) -> None:
    """Convert one staged Parquet part into a text landing file."""
    data = fmt.encode_table(pq.read_table(part))
    with open(target, "wb") as handle:
        handle.write(compress(data, codec))


def compress(data: bytes, codec: str) -> bytes:
    if codec == "none":
        return data
    if codec == "gzip":
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == "zstd":
        sink = pa.BufferOutputStream()
        stream = pa.CompressedOutputStream(sink, "zstd")
        stream.write(data)
        stream.close()
        return sink.getvalue().to_pybytes()
    if codec == "snappy":
        return _snappy_frame(data)
    raise ValueError(f"unknown codec {codec!r}")


def decompress(data: bytes) -> bytes:
    """Plain bytes of a landing text file, whatever codec its magic bytes name."""
    if data.startswith(_GZIP_MAGIC):
        return gzip.decompress(data)
    if data.startswith(_ZSTD_MAGIC):
        return pa.input_stream(pa.BufferReader(data), compression="zstd").read()
    if data.startswith(_SNAPPY_STREAM):
        return _snappy_unframe(data)
    return data


def read_text_file(data: bytes, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of a text landing file, using nothing but ``_metadata.json`` (``meta``)."""
    fmt = TextFormat.from_metadata(meta)
    types = {c["Name"]: c["DataType"] for c in (meta.get("SchemaDefinition") or {}).get("Columns", [])}
    text = decompress(data).decode(fmt.encoding)
    text = text.removeprefix("\ufeff")
    rows = fmt.parse(text)
    if not rows:
        raise LandingZoneMismatch("delimited text file has no header row")
    header = [h or "" for h in rows[0]]
    out = []
    for fields in rows[1:]:
        if len(fields) != len(header):
            raise LandingZoneMismatch(f"row has {len(fields)} fields, header has {len(header)}")
        row = {}
        for name, value in zip(header, fields):
            dtype = "Int32" if name == "__rowMarker__" else types.get(name, "String")
            row[name] = parse_value(value, dtype)
        out.append(row)
    return out


# -- Snappy framing format (github.com/google/snappy/blob/main/framing_format.txt) --------------

def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)  # CRC-32C (Castagnoli), as the framing format requires
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _snappy_frame(data: bytes) -> bytes:
    out = io.BytesIO()
    out.write(_SNAPPY_STREAM)
    for start in range(0, len(data), 65536):
        block = data[start : start + 65536]
        packed = pa.compress(block, codec="snappy", asbytes=True)
        kind, body = (0x00, packed) if len(packed) < len(block) else (0x01, block)
        length = len(body) + 4
        out.write(bytes([kind]) + length.to_bytes(3, "little"))
        out.write(struct.pack("<I", _masked_crc(block)))
        out.write(body)
    return out.getvalue()


def _snappy_unframe(data: bytes) -> bytes:
    out = io.BytesIO()
    i = 0
    while i < len(data):
        kind = data[i]
        length = int.from_bytes(data[i + 1 : i + 4], "little")
        body = data[i + 4 : i + 4 + length]
        i += 4 + length
        if kind == 0xFF or 0x80 <= kind <= 0xFE:
            continue  # stream identifier, padding and skippable chunks
        if kind not in (0x00, 0x01):
            raise LandingZoneMismatch(f"unknown snappy chunk type {kind:#x}")
        expected = struct.unpack("<I", body[:4])[0]
        payload = body[4:]
        if kind == 0x00:
            size, shift, pos = 0, 0, 0
            while True:  # the raw block starts with its uncompressed length (varint)
                byte = payload[pos]
                size |= (byte & 0x7F) << shift
                pos += 1
                shift += 7
                if not byte & 0x80:
                    break
            payload = pa.decompress(payload, decompressed_size=size, codec="snappy", asbytes=True)
        if _masked_crc(payload) != expected:
            raise LandingZoneMismatch("snappy chunk checksum mismatch")
        out.write(payload)
    return out.getvalue()
