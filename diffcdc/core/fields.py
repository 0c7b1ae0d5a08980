"""Field types shared by every settings model (config file and command line alike).

Settings are validated strictly: a value of the wrong type is refused, never converted
(``max_delete_ratio = "0.2"`` is a typo to report, not a number to guess), and a path is
non-empty text without control characters.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, ConfigDict

#: The model configuration of every settings model: unknown fields and wrong types refused.
STRICT_SETTINGS = ConfigDict(extra="forbid", frozen=True, strict=True)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _path_text(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a path, not empty")
    if _CONTROL.search(value):
        raise ValueError(f"path {value!r} contains a control character (a newline or tab?)")
    return value


#: A local path or a storage URL.
PathText = Annotated[str, AfterValidator(_path_text)]
