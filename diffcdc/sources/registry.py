"""Every source type diffcdc has (:class:`~diffcdc.sources.plugin.SourcePlugin`): a folder (a
string ``source``), a JDBC table (``type = "jdbc"``) and a DataFrame handed over in Python. The
engine and the commands reach sources here, never a source module directly."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from diffcdc.errors import UsageError
from diffcdc.sources.config import DataFrameSourceConfig, JdbcSourceConfig
from diffcdc.sources.plugin import SourceCapabilities, SourcePlugin, SourceTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from diffcdc.sources.base import Source


class FolderPlugin(SourcePlugin):
    """Snapshots as entries of a folder (:mod:`diffcdc.sources.files`)."""

    type = "folder"
    config = str
    capabilities = SourceCapabilities(lists_waiting=True, reads_again=True)

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
            "this table's snapshots come from a DataFrame: run it with diffcdc.run_dataframe",
            table=table.name,
        )


SOURCES: tuple[type[SourcePlugin], ...] = (FolderPlugin, JdbcPlugin, DataFramePlugin)

_BY_TYPE = {p.type: p for p in SOURCES}


def source_kind(value: Any) -> str | None:
    """The type of a ``source`` setting: ``folder`` for a string, else its ``type`` (None: not
    a registered one)."""
    if isinstance(value, str):
        return "folder"
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in _BY_TYPE and _BY_TYPE[kind].config is not str else None


def source_plugin(value: Any) -> type[SourcePlugin]:
    """The plug-in of a validated ``source`` setting."""
    return _BY_TYPE[source_kind(value) or ""]


def build_source(table: SourceTable) -> Source:
    """The source a run of ``table`` reads."""
    return source_plugin(table.source).build(table)


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
