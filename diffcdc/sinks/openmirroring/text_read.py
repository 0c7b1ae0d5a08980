"""Reading delimited text landing files back with nothing but ``_metadata.json`` (the reference
reader the verify and replay commands use)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
from typing import Any

import numpy as np

from diffcdc.errors import LandingZoneMismatch
from diffcdc.sinks.openmirroring.text import TextFormat
from diffcdc.sinks.openmirroring.text_codecs import decompress


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
