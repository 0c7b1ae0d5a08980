"""The PostgreSQL SQL of the sink's bookkeeping table (its rules and record:
:mod:`diffcdc.sinks.sql.bookkeeping`).

``<schema>._diffcdc_versions`` (in the target's schema) holds, per target table and version,
the sink's incarnation (a new one with every full image), the version's row counts, the
target's row count after it and the target's ``pg_class`` oid. Its primary key
``(target_table, version)`` makes a second apply of a version fail inside the transaction
that applies it, so a version is in the target once or not at all; the last row is what the
target checks compare the table with (:mod:`diffcdc.sinks.sql.target_check`).
"""

from __future__ import annotations

from psycopg import sql

from diffcdc.sinks.sql.bookkeeping import TABLE
from diffcdc.sinks.sql.records import Applied


def _table(schema: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(TABLE))


def schema_query(schema: str) -> sql.Composed:
    """Whether the schema exists: ``CREATE SCHEMA IF NOT EXISTS`` needs CREATE on the database
    even when the schema exists, which a user owning only its schema lacks."""
    return sql.SQL("SELECT count(*) FROM pg_namespace WHERE nspname = {}").format(
        sql.Literal(schema))


def create_statements(schema: str, *, schema_exists: bool = False) -> list[sql.Composed]:
    """The schema (unless ``schema_exists``) and the bookkeeping table, when missing."""
    return [
        *([] if schema_exists else [
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))]),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (target_table text NOT NULL, version bigint NOT NULL, "
            "incarnation text NOT NULL, sink_id text NOT NULL, diffcdc_table text NOT NULL, "
            "inserted bigint NOT NULL, updated bigint NOT NULL, deleted bigint NOT NULL, "
            "row_count bigint NOT NULL, table_oid bigint NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (target_table, version))").format(_table(schema)),
    ]


_COLUMNS = ("version", "incarnation", "sink_id", "inserted", "updated", "deleted", "row_count",
            "table_oid")


def last_query(schema: str, target_table: str) -> sql.Composed:
    """The newest row of ``target_table``."""
    return sql.SQL("SELECT {cols} FROM {t} WHERE target_table = {name} ORDER BY version DESC "
                   "LIMIT 1").format(cols=sql.SQL(", ").join(map(sql.Identifier, _COLUMNS)),
                                     t=_table(schema), name=sql.Literal(target_table))


def version_query(schema: str, target_table: str, version: int) -> sql.Composed:
    """The row of ``version`` of ``target_table``."""
    return sql.SQL("SELECT {cols} FROM {t} WHERE target_table = {name} AND version = {v}").format(
        cols=sql.SQL(", ").join(map(sql.Identifier, _COLUMNS)), t=_table(schema),
        name=sql.Literal(target_table), v=sql.Literal(version))


def insert(schema: str, target_table: str, diffcdc_table: str, row: Applied) -> sql.Composed:
    """The version's row (fails on the primary key when the version was applied already)."""
    values = (target_table, row.version, row.incarnation, row.sink_id, diffcdc_table,
              row.inserted, row.updated, row.deleted, row.row_count, row.table_oid)
    return sql.SQL(
        "INSERT INTO {t} (target_table, version, incarnation, sink_id, diffcdc_table, inserted, "
        "updated, deleted, row_count, table_oid) VALUES ({values})").format(
        t=_table(schema), values=sql.SQL(", ").join(map(sql.Literal, values)))


def forget(schema: str, target_table: str) -> sql.Composed:
    """Every row of ``target_table`` (a full image starts its record afresh, in its swap's
    transaction)."""
    return sql.SQL("DELETE FROM {t} WHERE target_table = {name}").format(
        t=_table(schema), name=sql.Literal(target_table))
