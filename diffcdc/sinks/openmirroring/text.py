"""Delimited text landing files (spec §1): the declared format, its quoting rules and the types.

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

A file keeps its spec name (``<20 digits>.<FileExtension>``) whatever its codec. Whole tables
are written by ``text_encode.py``, compressed by ``text_codecs.py`` and read back (with nothing
but ``_metadata.json``) by ``text_read.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T

from diffcdc.errors import InputRefused, LandingZoneMismatch

#: The spec's DataType values.
DATA_TYPES = ("Double", "Single", "Int16", "Int32", "Int64", "DateTime", "IDate", "ITime",
              "String", "Boolean", "ByteArray")


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

    def checked_field(self, value: str | None, column: str) -> str:
        """:meth:`field`, refusing what it cannot write with a message naming ``column``."""
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
