"""Names diffcdc makes folders of (tables, schemas, sinks): pure checks, no IO."""

from __future__ import annotations

import re

_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f/\\]")
_PATTERN_CHARS = re.compile(r"[\[\]{}*?]")
#: A name's bytes at most (one folder name on every file system diffcdc writes to).
MAX_NAME_BYTES = 255


def check_folder_name(value: str, what: str = "table name") -> str:
    """Refuse names that are not safe as one folder name in the landing zone."""
    if not value or not value.strip():
        raise ValueError(f"{what} is empty")
    if value in {".", ".."}:
        raise ValueError(f"{what} {value!r} is not a folder name")
    if _UNSAFE_NAME.search(value):
        raise ValueError(f"{what} {value!r} contains '/', '\\' or a control character")
    if value.startswith("_"):
        raise ValueError(f"{what} {value!r} starts with '_', which the landing zone ignores")
    if value != value.strip():
        raise ValueError(f"{what} {value!r} has leading or trailing spaces")
    if _PATTERN_CHARS.search(value):
        raise ValueError(f"{what} {value!r} contains one of [ ] {{ }} * ?, which paths and "
                         "consumers read as patterns")
    if len(value.encode()) > MAX_NAME_BYTES:
        raise ValueError(f"{what} is {len(value.encode())} bytes long; at most {MAX_NAME_BYTES}")
    return value
