"""Typed settings of the Open Mirroring landing contract (spec §1) that a table can choose.

Used by :class:`diffcdc.config.TableConfig`; documented for users in ``docs/landing.md``.
"""

from __future__ import annotations

import codecs
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: ``file_format`` values: Parquet, or delimited text (csv/tsv/psv presets, ``text`` = any
#: extension given by ``file_extension``).
FileFormat = Literal["parquet", "csv", "tsv", "psv", "text"]
TEXT_FORMATS = ("csv", "tsv", "psv", "text")
#: Column separator of each text preset (``text`` uses the CSV default).
PRESET_SEPARATOR = {"csv": ",", "tsv": "\t", "psv": "|", "text": ","}
ROW_SEPARATORS = ("\r\n", "\n", "\r")

#: Spellings accepted for separators on a command line (a shell passes ``\t`` literally).
_ESCAPED = {"\\r\\n": "\r\n", "\\n": "\n", "\\r": "\r", "\\t": "\t", "tab": "\t", "crlf": "\r\n",
            "lf": "\n", "cr": "\r"}


def unescape_separator(value: str) -> str:
    """``\\t``, ``\\r\\n``, ``tab``, ``crlf``... → the character(s) (for CLI options)."""
    return _ESCAPED.get(value.lower() if value.isalpha() else value, value)


class TextOptions(BaseModel):
    """Delimited-text properties; each becomes a ``FileFormatTypeProperties`` entry.

    Defaults are the spec's: ``\\r\\n`` rows, ``,`` columns (``\\t`` for tsv, ``|`` for psv),
    ``"`` quotes, ``\\`` escapes, an empty NULL token, UTF-8.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    row_separator: str = Field(default="\r\n", description="RowSeparator: \\r\\n, \\n or \\r.")
    column_separator: str | None = Field(
        default=None, description="ColumnSeparator: one character (default from file_format)."
    )
    quote_character: str = Field(default='"', description="QuoteCharacter: one character or ''.")
    escape_character: str = Field(default="\\", description="EscapeCharacter: one character or ''.")
    null_value: str = Field(default="", description="NullValue: how NULL is written.")
    encoding: str = Field(default="UTF-8", description="Encoding: any Python codec name.")

    @field_validator("row_separator", "column_separator", mode="before")
    @classmethod
    def _unescape(cls, value: Any) -> Any:
        return unescape_separator(value) if isinstance(value, str) else value

    @field_validator("row_separator")
    @classmethod
    def _row(cls, value: str) -> str:
        if value not in ROW_SEPARATORS:
            raise ValueError(f"row_separator must be one of \\r\\n, \\n, \\r (got {value!r})")
        return value

    @field_validator("encoding")
    @classmethod
    def _encoding(cls, value: str) -> str:
        try:
            codecs.lookup(value)
        except LookupError:
            raise ValueError(f"unknown encoding {value!r}") from None
        return value

    @model_validator(mode="after")
    def _distinct(self) -> TextOptions:
        for name in ("column_separator", "quote_character", "escape_character"):
            value = getattr(self, name)
            if value is not None and len(value) > 1:
                raise ValueError(f"{name} must be a single character (got {value!r})")
            if value and value in "\r\n":
                raise ValueError(f"{name} cannot be a line break")
        if self.column_separator == "":
            raise ValueError("column_separator cannot be empty")
        specials = [c for c in (self.column_separator, self.quote_character) if c]
        if len(set(specials)) != len(specials):
            raise ValueError("column_separator and quote_character must differ")
        if self.escape_character and self.escape_character == self.column_separator:
            raise ValueError("escape_character and column_separator must differ")
        if any(ch in self.null_value for ch in "\r\n") or (
            self.column_separator and self.column_separator in self.null_value
        ):
            raise ValueError("null_value cannot contain a separator or a line break")
        if self.quote_character and self.quote_character in self.null_value:
            raise ValueError("null_value cannot contain the quote character")
        return self


class PartnerInfo(BaseModel):
    """``_partnerEvents.json`` at the landing root (spec §1: optional, strongly recommended)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    partner_name: str = Field(min_length=1, description="partnerName: keep it the same everywhere.")
    source_type: str = Field(min_length=1, description="sourceInfo.sourceType, free text (SQL, Oracle...).")
    source_version: str | None = Field(default=None, description="sourceInfo.sourceVersion.")
    additional_information: dict[str, Any] = Field(
        default_factory=dict, description="sourceInfo.additionalInformation."
    )

    @field_validator("source_version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, (int, float)) else value

    def document(self) -> dict[str, Any]:
        """The file's JSON content, in the spec's shape."""
        info: dict[str, Any] = {"sourceType": self.source_type}
        if self.source_version is not None:
            info["sourceVersion"] = self.source_version
        if self.additional_information:
            info["additionalInformation"] = self.additional_information
        return {"partnerName": self.partner_name, "sourceInfo": info}
