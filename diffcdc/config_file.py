"""The config file: TOML read, relative paths resolved, validated into a :class:`RunConfig`.

The config file is TOML: Python reads it with the standard library (no extra dependency),
values are typed (no YAML surprises such as ``no`` becoming ``false`` or ``0123`` an octal),
comments are allowed, and ``[tables.Name]`` sections read naturally::

    [diffcdc]
    state = "state"            # state root (relative paths: relative to this file)
    landing = "landing"        # default landing root for every table
    keep_versions = 10

    [spark]
    master = "local[*]"
    conf = { "spark.driver.memory" = "4g" }

    [quality]                  # the data-quality gate, for every table
    max_delete_ratio = 0.2

    [defaults]                 # any table field, applied to every table
    codec = "zstd"

    [tables.Employees]
    source = "snapshots/employees"
    keys = ["EmployeeID"]
    exclude = ["ExtractedAt"]
    quality = { max_delete_ratio = 0.5 }   # replaces the global setting for this table

Every error names the file, the table and the field.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pydantic import ValidationError

from diffcdc.config import RunConfig
from diffcdc.config_errors import error_from_validation
from diffcdc.errors import ConfigError
from diffcdc.extras_check import check_config
from diffcdc.sinks.openmirroring.shorthand import TABLE_LEVEL
from diffcdc.sinks.registry import sink_plugin
from diffcdc.sources.registry import source_kind, source_plugin
from diffcdc.state.root import StateRoot

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def load_config(path: str) -> RunConfig:
    """Read and validate a TOML config file; relative paths are relative to the file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise ConfigError("config file not found", path=path) from None
    except IsADirectoryError:
        raise ConfigError("the config file is a folder", path=path,
                          hint="give the TOML file itself (--config FILE)") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror or exc}", path=path,
                          hint="check the file's permissions") from None
    try:
        # A byte order mark (Windows editors write one) is no TOML error: it is left out.
        raw = tomllib.loads(data.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start}): TOML files are UTF-8",
                          path=path, hint="save the file as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    base = os.path.dirname(os.path.abspath(path))
    sections = ["diffcdc", "spark", "quality", "defaults", *TABLE_LEVEL.sections, "tables",
                "lineage", "metrics"]
    unknown = set(raw) - set(sections)
    if unknown:
        raise ConfigError(
            f"unknown section(s) {sorted(unknown)}; expected {', '.join(sections)}",
            path=path,
        )
    top = dict(raw.get("diffcdc", {}))
    global_defaults = {k: top.pop(k) for k in TABLE_LEVEL.global_fields if top.get(k) is not None}
    defaults = dict(raw.get("defaults", {}))
    for key, value in global_defaults.items():  # [diffcdc] landing: every table's landing root
        defaults.setdefault(key, value)
    for section in TABLE_LEVEL.sections:  # [partner] is database level: every table the same
        if section in raw:
            defaults.setdefault(section, raw[section])
    tables_raw = raw.get("tables", {})
    if not isinstance(tables_raw, dict) or not tables_raw:
        raise ConfigError("no [tables.<Name>] section", path=path, hint="define at least one table")
    names = list(tables_raw)
    tables = []
    for name, body in tables_raw.items():
        if not isinstance(body, dict):
            raise ConfigError(f"table {name}: expected a [tables.{name}] section", path=path)
        merged = {**defaults, **body, "name": name}
        kind = source_kind(merged.get("source"))
        plugin = source_plugin(merged["source"]) if kind is not None else None
        if plugin is not None and not plugin.in_file:
            raise ConfigError(
                f"table {name}: a {kind} source is handed over in Python "
                f"({plugin.run_with}), not configured in a file",
                path=path,
            )
        if "source" in merged:
            merged["source"] = _resolve_source_paths(base, merged["source"])
        for key in TABLE_LEVEL.path_fields:
            if isinstance(merged.get(key), str):
                merged[key] = _resolve(base, merged[key])
        if isinstance(merged.get("sinks"), list):
            merged["sinks"] = [_resolve_sink_paths(base, s) for s in merged["sinks"]]
        if isinstance(merged.get("quality"), dict):
            merged["quality"] = _resolve_quality_paths(base, merged["quality"])
        tables.append(merged)
    state = top.pop("state", "state")
    state = _resolve(base, state) if isinstance(state, str) else state  # else: a field error
    if isinstance(top.get("state_data"), str):
        top["state_data"] = _resolve(base, top["state_data"])
    try:
        config = RunConfig(
            state=state,
            spark=raw.get("spark", {}),
            quality=_resolve_quality_paths(base, raw.get("quality", {})),
            tables=tables,
            source_file=os.path.abspath(path),
            **_observe_sections(base, raw),
            **top,
        )
    except ValidationError as exc:
        flat = {n for n, body in tables_raw.items() if "sinks" not in body}
        raise error_from_validation(exc, path, names, flat) from None
    check_config(config)  # a sink's or the gate's library missing: its extra, before Spark
    # state, state_data and state_options fit together
    StateRoot(config.state, config.state_data, config.state_options, config_file=path)
    return config


def _observe_sections(base: str, raw: dict[str, Any]) -> dict[str, Any]:
    """``[lineage]`` and ``[metrics]`` as given (the metrics file relative to the config)."""
    out = {k: raw[k] for k in ("lineage", "metrics") if k in raw}
    metrics = out.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("file"), str):
        out["metrics"] = {**metrics, "file": _resolve(base, metrics["file"])}
    return out


def _resolve_source_paths(base: str, source: Any) -> Any:
    """A source's local paths relative to the config file: a folder's (a string ``source``) or
    the fields its type's plug-in names (none for a type not known, refused later)."""
    if isinstance(source, str):
        return _resolve(base, source)
    if not isinstance(source, dict) or source_kind(source) is None:
        return source
    plugin = source_plugin(source)
    return {k: _resolve(base, v) if k in plugin.path_fields and isinstance(v, str) else v
            for k, v in source.items()}


def _resolve_sink_paths(base: str, sink: Any) -> Any:
    """A sink's local paths relative to the config file: the fields its type's plug-in names
    (``landing``, ``path``, ``changelog_path`` ...; none for a type not known, refused later)."""
    plugin = sink_plugin(sink["type"]) if isinstance(sink, dict) and isinstance(
        sink.get("type"), str) else None
    if plugin is None:
        return sink
    return {k: _resolve(base, v) if k in plugin.path_fields and isinstance(v, str) else v
            for k, v in sink.items()}


def _resolve_quality_paths(base: str, section: Any) -> Any:
    if not isinstance(section, dict):
        return section
    out = dict(section)
    for key in ("expectation_suite", "data_docs_dir"):
        if isinstance(out.get(key), str):
            out[key] = _resolve(base, out[key])
    return out


def _resolve(base: str, value: str) -> str:
    if not value.strip() or "://" in value or os.path.isabs(value):  # blank: a field error
        return value
    return os.path.normpath(os.path.join(base, value))
