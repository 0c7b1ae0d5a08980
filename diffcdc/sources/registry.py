"""The source of a configured table, by the type of its ``source`` setting."""

from __future__ import annotations

from typing import TYPE_CHECKING

from diffcdc.errors import UsageError
from diffcdc.sources.base import Source
from diffcdc.sources.config import JdbcSourceConfig
from diffcdc.sources.files import FolderSource

if TYPE_CHECKING:
    from diffcdc.config import TableConfig


def build_source(table: TableConfig) -> Source:
    """A folder source for a string ``source``, a JDBC source for ``type = "jdbc"``."""
    if isinstance(table.source, str):
        return FolderSource(table.source, table.name, table.csv_infer_schema, table.csv_encoding)
    if isinstance(table.source, JdbcSourceConfig):
        from diffcdc.sources.jdbc import JdbcSource

        return JdbcSource(table.source, table.name)
    raise UsageError(
        "this table's snapshots come from a DataFrame: run it with diffcdc.run_dataframe",
        table=table.name,
    )
