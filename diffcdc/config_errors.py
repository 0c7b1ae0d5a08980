"""Validation problems in words: every problem of a config file on one line, each with its
table and field, unknown names first with the field probably meant (a misspelt field is
usually why a required one is missing), and the value given when its type is wrong."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from diffcdc.errors import ConfigError
from diffcdc.sinks.openmirroring.shorthand import TABLE_LEVEL
from diffcdc.sinks.registry import sink_plugins


def _sink_models() -> dict[str, type[BaseModel]]:
    """The sink models by their ``type`` (the union's tag in a validation error's location):
    the sink types known now, registered ones included."""
    return {p.type: p.config for p in sink_plugins()}


def _location(
    loc: tuple[Any, ...], tables: list[str], flat: set[str] = frozenset(), sink: str = ""
) -> str:
    """``table T, field F`` for a validation error's location (``table T, sink S`` for an
    error of a whole sink, ``sink`` being its name or position).

    ``flat`` names the tables configured without ``sinks``: their sink's fields are at table
    level, so an error in their one sink is reported under the field's own name.
    """
    parts = list(loc)
    if (
        len(parts) >= 5
        and parts[0] == "tables"
        and isinstance(parts[1], int)
        and parts[2] == "sinks"
        and parts[1] < len(tables)
        and tables[parts[1]] in flat
    ):
        parts = parts[:2] + parts[5 if parts[4] == TABLE_LEVEL.type else 4:]
    if len(parts) >= 2 and parts[0] == "tables" and isinstance(parts[1], int):
        name = tables[parts[1]] if parts[1] < len(tables) else str(parts[1])
        if len(parts) == 4 and parts[2] == "sinks" and isinstance(parts[3], int) and sink:
            return f"table {name}, sink {sink}"  # the sink as a whole (its ``type``)
        rest = ".".join(str(p) for p in parts[2:])
        return f"table {name}" + (f", field {rest}" if rest else "")
    return "field " + ".".join(str(p) for p in parts) if parts else ""


#: How a value's type is called in a TOML file.
_TOML_TYPES = {str: "text", bool: "true/false", int: "an integer", float: "a number",
               list: "a list", dict: "a table"}


def describe_error(error: Mapping[str, Any], fields: Collection[str] = ()) -> str:
    """One validation problem in words: the message, what was given, a likely intended name.

    ``fields`` are the names valid at the error's place: an unknown field name is matched
    against them (``kyes`` → did you mean ``keys``?).
    """
    kind = error.get("type", "")
    value = error.get("input")
    if kind in ("union_tag_not_found", "union_tag_invalid"):  # a sink's ``type``
        valid = ", ".join(repr(t) for t in _sink_models())
        if kind == "union_tag_invalid":
            given = (error.get("ctx") or {}).get("tag")
            return f"unknown sink type {given!r}; give type = one of {valid}"
        return f"the sink has no `type`; give type = one of {valid}"
    if kind == "extra_forbidden":
        name = str(error["loc"][-1]) if error.get("loc") else ""
        close = difflib.get_close_matches(name, list(fields), n=1, cutoff=0.6)
        return "unknown field" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "missing":
        return "required, not given"
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if kind.endswith("_type") or kind in ("literal_error", "enum"):
        given = _TOML_TYPES.get(type(value))
        if given is not None and not isinstance(value, (dict, list)):
            message += f" (got {value!r}, {given})"
        elif given is not None:
            message += f" (got {given})"
    return message


def _field_names(loc: Sequence[Any]) -> list[str]:
    """The field names valid at ``loc`` (its last part excluded), for name suggestions."""
    from diffcdc.config import RunConfig, SparkSettings, TableConfig
    from diffcdc.core.quality_config import QualityConfig

    names = set(RunConfig.model_fields)
    sink_models = _sink_models()
    for part in loc[:-1]:
        if isinstance(part, int) or part not in names and part not in sink_models:
            continue
        if part == "tables":
            names = set(TableConfig.model_fields) | set(TABLE_LEVEL.fields)
        elif part == "quality":
            names = set(QualityConfig.model_fields)
        elif part == "spark":
            names = set(SparkSettings.model_fields)
        elif part == "sinks":
            names = set(TABLE_LEVEL.config.model_fields)
        elif part in sink_models:
            names = set(sink_models[part].model_fields)
    return sorted(names)


def _sink_label(error: Mapping[str, Any]) -> str:
    """How a whole sink an error is about is called: its ``name``, else its position (#1...)."""
    loc = tuple(error.get("loc") or ())
    if len(loc) != 4 or loc[2] != "sinks" or not isinstance(loc[3], int):
        return ""
    value = error.get("input")
    name = value.get("name") if isinstance(value, dict) else None
    return repr(name) if isinstance(name, str) and name else f"#{loc[3] + 1}"


def error_from_validation(
    exc: ValidationError, path: str, tables: list[str], flat: set[str] = frozenset()
) -> ConfigError:
    """Every problem, each with its table and field, on one line (unknown names first: a
    misspelt field is usually why a required one is missing)."""
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    problems = []
    for error in errors:
        where = _location(tuple(error["loc"]), tables, flat, _sink_label(error))
        what = describe_error(error, _field_names(error["loc"]))
        problems.append(f"{where}: {what}" if where else what)
    return ConfigError("; ".join(dict.fromkeys(problems)), path=path,
                       hint="fix the config file and run again")
