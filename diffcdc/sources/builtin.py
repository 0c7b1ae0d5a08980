"""The built-in source types' plug-ins: a folder (a string ``source``), a JDBC table
(``type = "jdbc"``) and a DataFrame handed over in Python. :mod:`diffcdc.sources.registry`
names them by module path; importing this module is cheap (no Spark: a source's code loads in
its plug-in's ``build``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from diffcdc.errors import UsageError
from diffcdc.sources.config import DataFrameSourceConfig, JdbcSourceConfig
from diffcdc.sources.plugin import SourceCapabilities, SourcePlugin, SourceTable

if TYPE_CHECKING:
    from diffcdc.sources.base import Source


class FolderPlugin(SourcePlugin):
    """Snapshots as entries of a folder (:mod:`diffcdc.sources.files`)."""

    type = "folder"
    config = str
    capabilities = SourceCapabilities(lists_waiting=True, reads_again=True, snapshot_times=True)

    @classmethod
    def folder(cls, config: str) -> str:
        return config

    @classmethod
    def build(cls, table: SourceTable) -> Source:
        from diffcdc.sources.files import FolderSource
        from diffcdc.sources.snapshot_time import SnapshotTimeRule

        rule = SnapshotTimeRule.parse(table.snapshot_time) if table.snapshot_time else None
        return FolderSource(table.source, table.name, table.csv_infer_schema, table.csv_encoding,
                            rule)


class JdbcPlugin(SourcePlugin):
    """A database table read over JDBC (:mod:`diffcdc.sources.jdbc`)."""

    type = "jdbc"
    config = JdbcSourceConfig

    @classmethod
    def build(cls, table: SourceTable) -> Source:
        from diffcdc.sources.jdbc import JdbcSource

        return JdbcSource(table.source, table.name)

    @classmethod
    def jars(cls, config: JdbcSourceConfig) -> tuple[str, ...]:
        return (config.jar,) if config.jar else ()

    @classmethod
    def check_secrets(cls, config: JdbcSourceConfig, table: str) -> None:
        config.password(table)


class DataFramePlugin(SourcePlugin):
    """A DataFrame handed over in Python (:mod:`diffcdc.sources.dataframe`)."""

    type = "dataframe"
    config = DataFrameSourceConfig
    in_file = False

    @classmethod
    def build(cls, table: SourceTable) -> Source:
        raise UsageError(
            f"this table's snapshots come from a DataFrame: run it with {cls.run_with}",
            table=table.name,
        )
