"""Every source type diffcdc has (:class:`~diffcdc.sources.plugin.SourcePlugin`): a folder (a
string ``source``), a JDBC table (``type = "jdbc"``) and a DataFrame handed over in Python."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffcdc.errors import UsageError
from diffcdc.sources.config import DataFrameSourceConfig, JdbcSourceConfig
from diffcdc.sources.plugin import SourcePlugin, SourceTable

if TYPE_CHECKING:
    from diffcdc.sources.base import Source


def _folder(table: SourceTable) -> Source:
    from diffcdc.sources.files import FolderSource
    from diffcdc.sources.snapshot_time import SnapshotTimeRule

    rule = SnapshotTimeRule.parse(table.snapshot_time) if table.snapshot_time else None
    return FolderSource(table.source, table.name, table.csv_infer_schema, table.csv_encoding,
                        rule)


def _jdbc(table: SourceTable) -> Source:
    from diffcdc.sources.jdbc import JdbcSource

    return JdbcSource(table.source, table.name)


def _dataframe(table: SourceTable) -> Source:
    raise UsageError(
        "this table's snapshots come from a DataFrame: run it with diffcdc.run_dataframe",
        table=table.name,
    )


def _jdbc_jars(config: JdbcSourceConfig) -> tuple[str, ...]:
    return (config.jar,) if config.jar else ()


def _jdbc_password(config: JdbcSourceConfig, table: str) -> None:
    config.password(table)


SOURCES: tuple[SourcePlugin, ...] = (
    SourcePlugin("folder", str, _folder),
    SourcePlugin("jdbc", JdbcSourceConfig, _jdbc, jars=_jdbc_jars, check_secrets=_jdbc_password),
    SourcePlugin("dataframe", DataFrameSourceConfig, _dataframe, in_file=False),
)

_BY_TYPE = {p.type: p for p in SOURCES}


def source_kind(value: Any) -> str | None:
    """The type of a ``source`` setting: ``folder`` for a string, else its ``type`` (None: not
    a registered one)."""
    if isinstance(value, str):
        return "folder"
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in _BY_TYPE and _BY_TYPE[kind].config is not str else None


def source_plugin(value: Any) -> SourcePlugin:
    """The plug-in of a validated ``source`` setting."""
    return _BY_TYPE[source_kind(value) or ""]


def build_source(table: SourceTable) -> Source:
    """The source a run of ``table`` reads."""
    return source_plugin(table.source).build(table)
