"""The PostgreSQL sink's output in OpenLineage events: named per the naming spec
(``postgres://host:port`` and ``database.schema.table``), whether its server is given by URL or
by host/port/dbname (no Spark, no server)."""

from __future__ import annotations

from diffcdc.observe.naming import DatasetName
from diffcdc.sinks.postgres.config import PostgresSinkConfig
from diffcdc.sinks.postgres.plugin import PostgresPlugin
from diffcdc.sinks.table import SinkTable


def test_a_postgres_sink_is_named_by_its_server_database_schema_and_table():
    table = SinkTable(name="Orders", keys=("id",))
    by_url = PostgresSinkConfig.model_validate(
        {"type": "postgres", "url": "jdbc:postgresql://DB.example:5433/erp", "schema": "mirror"})
    assert PostgresPlugin.lineage_dataset(by_url, table) == \
        DatasetName("postgres://db.example:5433", "erp.mirror.Orders")
    by_fields = PostgresSinkConfig.model_validate(
        {"type": "postgres", "host": "pg", "dbname": "target", "table": "orders_copy"})
    assert PostgresPlugin.lineage_dataset(by_fields, table) == \
        DatasetName("postgres://pg:5432", "target.public.orders_copy")
