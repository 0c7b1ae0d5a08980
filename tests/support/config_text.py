"""Config files written by tests: TOML values, a table's config file."""

from __future__ import annotations

import json
from typing import Any


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (a dict as an inline table)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def table_toml(table: Any, state: str, *, spark: dict[str, Any] | None = None,
               fields: dict[str, Any] | None = None) -> str:
    """A config file of one table (a :class:`diffcdc.config.TableConfig`) under ``state``,
    with a gate that lets any change through, the ``[spark]`` settings, its state compaction
    and the further table ``fields`` given."""
    lines = [f"[diffcdc]\nstate = {json.dumps(state)}\n",
             "[quality]\nmin_row_ratio = 0.0\nmax_delete_ratio = 1.0\n"]
    if spark:
        lines.append("[spark]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in spark.items()))
    source = table.source
    if hasattr(source, "model_dump"):  # a source table (``{type = "jdbc", ...}``)
        source = {**source.model_dump(exclude_none=True, exclude_defaults=True), "type": source.type}
    compaction = table.state_compaction.model_dump(exclude_defaults=True)
    fields = {**({"state_compaction": compaction} if compaction else {}), **(fields or {})}
    lines.append(f"[tables.{json.dumps(table.name)}]\nsource = {toml_value(source)}\n"
                 f"keys = {json.dumps(list(table.keys))}\n"
                 + "".join(f"{k} = {toml_value(v)}\n" for k, v in fields.items()))
    for sink in table.sinks:
        body = sink.model_dump(exclude_none=True, exclude_defaults=True)
        body["type"] = sink.type
        lines.append(f"[[tables.{json.dumps(table.name)}.sinks]]")
        lines.extend(f"{key} = {toml_value(value)}" for key, value in body.items())
        lines.append("")
    return "\n".join(lines)
