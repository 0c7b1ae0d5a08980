"""A PostgreSQL table kept equal to the snapshots, one transaction per diffcdc version: the
dialect-neutral SQL sink (:mod:`diffcdc.sinks.sql.sink`: stage as Parquet, COPY into a staging
table, one transaction applying the version and recording its bookkeeping row, full images
swapped in, the target checks) with the PostgreSQL dialect
(:class:`~diffcdc.sinks.postgres.dialect.PostgresDialect`)."""

from __future__ import annotations

from diffcdc.sinks.base import SinkTable
from diffcdc.sinks.postgres.config import PostgresSinkConfig
from diffcdc.sinks.postgres.dialect import PostgresDialect
from diffcdc.sinks.sql.sink import SqlSink


class PostgresSink(SqlSink):
    """The table ``schema.table`` on the configured PostgreSQL server."""

    type = "postgres"
    config: PostgresSinkConfig

    def __init__(self, sink_id: str, table: SinkTable, config: PostgresSinkConfig) -> None:
        super().__init__(sink_id, table, config, PostgresDialect(config, table.name))
