"""Config files written by tests: TOML values."""

from __future__ import annotations

import json
from typing import Any


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (a dict as an inline table)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)
