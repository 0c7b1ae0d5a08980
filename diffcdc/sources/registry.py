"""Every source type diffcdc knows: a type name → its plug-in
(:class:`~diffcdc.sources.plugin.SourcePlugin`). The engine and the commands reach sources here,
never a source module directly.

The built-in types — a folder (a string ``source``), a JDBC table (``type = "jdbc"``) and a
DataFrame handed over in Python — are named by module path (:mod:`diffcdc.sources.builtin`)
and loaded when first asked for; another package, or a test, registers its own with
:func:`register_source` (and :func:`unregister_source`, or :func:`registered_source` for a
block), checked as a sink plug-in is (:mod:`diffcdc.plugin_registry`). A table's ``source``
is validated against the types known when it is validated.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from diffcdc.errors import ConfigError, DiffcdcError, UsageError
from diffcdc.plugin_registry import PluginRegistry
from diffcdc.sources.plugin import SourceCapabilities, SourcePlugin, SourceTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from diffcdc.sources.base import Source

#: The built-in source types: type → ``module:class`` of its plug-in (loaded when first asked for).
BUILTIN: Mapping[str, str] = {
    "folder": "diffcdc.sources.builtin:FolderPlugin",
    "jdbc": "diffcdc.sources.builtin:JdbcPlugin",
    "dataframe": "diffcdc.sources.builtin:DataFramePlugin",
}


def _check_declarations(plugin: type[SourcePlugin], kind: str, name: str) -> None:
    """Refuse a plug-in whose declarations a run would trip over later: a config that is no
    pydantic model with a ``type`` (a string ``source`` is a folder's), capabilities or
    ``in_file`` of the wrong kind."""
    config = plugin.config
    if not issubclass(config, BaseModel) or "type" not in config.model_fields:
        raise UsageError(
            f"source plug-in {name}: its config {config.__name__} is not a pydantic model with "
            "a type field",
            hint="give it a model whose type is Literal[\"<the plug-in's type>\"] (see "
            "diffcdc.sources.config.JdbcSourceConfig)")
    capabilities = plugin.capabilities
    wrong = [field for field, value, kind_ in (
        ("capabilities", capabilities, SourceCapabilities),
        ("in_file", plugin.in_file, bool),
        ("run_with", plugin.run_with, str),
    ) if not isinstance(value, kind_)]
    if isinstance(capabilities, SourceCapabilities) and not (
            isinstance(capabilities.executor_modules, tuple)
            and all(isinstance(m, str) for m in capabilities.executor_modules)):
        wrong.append("capabilities.executor_modules")
    if isinstance(capabilities, SourceCapabilities) and not isinstance(
            capabilities.snapshot_times, bool):
        wrong.append("capabilities.snapshot_times")
    paths = plugin.path_fields
    if not (isinstance(paths, tuple) and all(
            isinstance(f, str) and f in config.model_fields for f in paths)):
        wrong.append("path_fields")
    if wrong:
        raise UsageError(f"source plug-in {name}: {', '.join(wrong)} of the wrong kind",
                         hint="capabilities: a diffcdc.sources.plugin.SourceCapabilities "
                         "(executor_modules: a tuple of module names; snapshot_times: True or "
                         "False); in_file: True or False; run_with: text; path_fields: a tuple "
                         "of its config's field names")


_SOURCES: PluginRegistry[SourcePlugin] = PluginRegistry("source", SourcePlugin, BUILTIN,
                                                         _check_declarations)


def register_source(plugin: type[SourcePlugin]) -> None:
    """Make a source type known (its package calls this once, when it is imported)."""
    _SOURCES.register(plugin)


def unregister_source(source_type: str) -> None:
    """Forget a source type :func:`register_source` made known (a built-in one stays)."""
    _SOURCES.unregister(source_type)


def registered_source(plugin: type[SourcePlugin]) -> AbstractContextManager[type[SourcePlugin]]:
    """``plugin`` registered for the block only (one registered before stays registered)."""
    return _SOURCES.registered(plugin)


def builtin_sources() -> tuple[type[SourcePlugin], ...]:
    """The built-in source types' plug-ins."""
    return _SOURCES.builtins()


def source_plugins() -> tuple[type[SourcePlugin], ...]:
    """Every source type known now: the built-in ones, then those :func:`register_source`
    made known (a table's ``source`` validates against these, when it is validated)."""
    return _SOURCES.known()


def source_type(value: Any) -> str | None:
    """The type a ``source`` setting names: ``folder`` for a string, else its ``type`` (None:
    it names none), known or not."""
    if isinstance(value, str):
        return "folder"
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) else None


def source_kind(value: Any) -> str | None:
    """The type of a ``source`` setting: ``folder`` for a string, else its ``type`` (None: not
    a registered one, or a folder's given as a table)."""
    kind = source_type(value)
    if kind is None or isinstance(value, str):
        return kind
    plugin = _SOURCES.get(kind)
    return kind if plugin is not None and plugin.config is not str else None


def source_plugin(value: Any) -> type[SourcePlugin]:
    """The plug-in of a validated ``source`` setting."""
    plugin = _SOURCES.get(source_kind(value) or "")
    if plugin is None:
        raise ConfigError(f"unknown source type {source_type(value)!r}",
                          hint="a source type registered with "
                          "diffcdc.sources.registry.register_source")
    return plugin


def build_source(table: SourceTable) -> Source:
    """The source a run of ``table`` reads; a plug-in's failure to build it is one line naming
    the plug-in and the table."""
    plugin = source_plugin(table.source)
    return _SOURCES.answer(plugin, f"build the source of table {table.name}",
                           lambda: plugin.build(table))


def source_folder(table: SourceTable) -> str | None:
    """The folder ``table``'s source reads its snapshots from (None: none); a plug-in's bug is
    one line naming it and the table."""
    plugin = source_plugin(table.source)
    folder = _SOURCES.answer(plugin, f"give the folder of the source of table {table.name}",
                             lambda: plugin.folder(table.source))
    if folder is not None and not (isinstance(folder, str) and folder.strip()):
        raise DiffcdcError(
            f"source type {plugin.type!r}: its plug-in {plugin.__qualname__} gave "
            f"{type(folder).__name__} {folder!r:.80} as the folder of the source of table "
            f"{table.name}, not a path or None",
            hint="fix the source plug-in's folder() to return the folder it reads, or None")
    return folder


def source_executor_modules(tables: Iterable[SourceTable]) -> tuple[str, ...]:
    """The modules the sources of ``tables`` run in Spark tasks on the executors."""
    plugins = dict.fromkeys(source_plugin(t.source) for t in tables)
    return tuple(dict.fromkeys(m for p in plugins for m in p.capabilities.executor_modules))


def source_jars(table: SourceTable) -> tuple[str, ...]:
    """The driver jars ``table``'s source needs on Spark's class path; a plug-in's bug is one
    line naming it and the table."""
    plugin = source_plugin(table.source)
    return tuple(_SOURCES.answer(plugin, f"give the jars of the source of table {table.name}",
                                 lambda: plugin.jars(table.source)))


def check_source_secrets(table: SourceTable) -> None:
    """Refuses (``ConfigError``) a secret ``table``'s source names that is not there; a
    plug-in's bug is one line naming it and the table."""
    plugin = source_plugin(table.source)
    _SOURCES.answer(plugin, f"check the secrets of the source of table {table.name}",
                    lambda: plugin.check_secrets(table.source, table.name))


def read_snapshot_at(spark: SparkSession, path: str, *, infer_csv: bool = False,
                     encoding: str = "utf-8") -> DataFrame:
    """The snapshot file or folder at ``path``, read as a folder source reads its entries
    (``diffcdc verify``'s snapshot to compare with)."""
    from diffcdc.sources.files import SnapshotEntry, read_snapshot

    kind = "csv" if path.lower().endswith(".csv") else "parquet"
    entry = SnapshotEntry(os.path.basename(path.rstrip("/")), path, kind)
    return read_snapshot(spark, entry, infer_csv=infer_csv, encoding=encoding)


def same_snapshot(path: str, recorded: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the snapshot file or folder at ``path`` is still the one whose identity a commit
    recorded (``verify --state``; :func:`diffcdc.sources.identity.same_files`)."""
    from diffcdc.sources.identity import same_files

    return same_files(path, recorded)
