"""The PostgreSQL sink as the rest of diffcdc sees it (see :mod:`diffcdc.sinks.plugin`): its
password variable checked before Spark starts, its COPY tasks run on the executors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from diffcdc.extras import POSTGRES
from diffcdc.sinks.plugin import Capabilities, SinkPlugin
from diffcdc.sinks.postgres.config import PostgresSinkConfig
from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.observe.naming import DatasetName
    from diffcdc.sinks.base import Sink
    from diffcdc.state.store import TableState


class PostgresPlugin(SinkPlugin):
    """The ``postgres`` sink type: a table (or a history), one transaction per version."""

    type = "postgres"
    config = PostgresSinkConfig
    extra = POSTGRES
    capabilities = Capabilities(executor_modules=("diffcdc.sinks.postgres.copy",))

    @classmethod
    def build(cls, config: PostgresSinkConfig, table: SinkTable, state: TableState) -> Sink:
        from diffcdc.sinks.postgres.sink import PostgresSink  # psycopg loads only when used

        return PostgresSink(config.sink_id, table, config)

    @classmethod
    def lineage_dataset(cls, config: PostgresSinkConfig, table: SinkTable) -> DatasetName | None:
        """The target table, named per OpenLineage's naming spec for PostgreSQL."""
        from diffcdc.observe.naming import postgres_dataset

        host, port, dbname, _ = config.server()
        return postgres_dataset(host.lower(), port, dbname, config.db_schema,
                                config.table_name(table.name))

    @classmethod
    def check_secrets(cls, config: PostgresSinkConfig, table: str) -> None:
        config.password(table)

    @classmethod
    def status(cls, manifest: Mapping[str, Any]) -> dict[str, Any]:
        return {"target": manifest.get("target"), "server": manifest.get("server"),
                "mode": manifest.get("mode", "current")}
