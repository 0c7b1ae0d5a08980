"""PostgreSQL as the SQL sink's :class:`~diffcdc.sinks.sql.dialect.Dialect`: psycopg, its
``psycopg.sql`` statements (:mod:`~diffcdc.sinks.postgres.apply_sql`,
:mod:`~diffcdc.sinks.postgres.history_sql`, :mod:`~diffcdc.sinks.postgres.bookkeeping`), the
catalog (:mod:`~diffcdc.sinks.postgres.catalog`), the types
(:mod:`~diffcdc.sinks.postgres.types`), COPY (:mod:`~diffcdc.sinks.postgres.copy`) and the
read for verify (:mod:`~diffcdc.sinks.postgres.replay`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from diffcdc.core.changeset import OP
from diffcdc.core.compare import Replayed
from diffcdc.core.history_layout import HistoryLayout
from diffcdc.errors import DiffcdcError
from diffcdc.sinks.postgres import apply_sql, bookkeeping, catalog, history_sql
from diffcdc.sinks.postgres import replay as pg_replay
from diffcdc.sinks.postgres.config import (
    PostgresSinkConfig,
    identifier_problem,
    own_table_problem,
)
from diffcdc.sinks.postgres.connection import PgConnection, connect, database_error
from diffcdc.sinks.postgres.copy import copy_into
from diffcdc.sinks.postgres.types import PART_COLUMN, check_identifier, column_defs, pg_type
from diffcdc.sinks.sql.dialect import DialectNames, Query
from diffcdc.sinks.sql.records import Applied, Statement, Target

NAMES = DialectNames(kind="postgres", title="PostgreSQL", identity="oid", bulk="COPY")


class PostgresDialect:
    """One PostgreSQL sink's server (its settings read, and the password resolved, when it
    first connects)."""

    names = NAMES
    #: :func:`~diffcdc.sinks.postgres.copy.copy_into`'s parallel, retry-safe load.
    work_columns = (PART_COLUMN,)

    def __init__(self, config: PostgresSinkConfig, table: str) -> None:
        self.config = config
        self.table = table
        self._conn: PgConnection | None = None

    # -- the server -------------------------------------------------------------------------
    def settings(self) -> PgConnection:
        if self._conn is None:
            self._conn = self.config.connection(self.table)
        return self._conn

    def connect(self, where: str) -> psycopg.Connection[Any]:
        return connect(self.settings(), where)

    def server_error(self, exc: BaseException, where: str, what: str, hint: str
                     ) -> DiffcdcError | None:
        if not isinstance(exc, psycopg.Error):
            return None
        return database_error(where, what, exc, hint)

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.errors.UniqueViolation)

    # -- names and types --------------------------------------------------------------------
    def table_name_problem(self, name: str) -> str | None:
        return identifier_problem(name) or own_table_problem(name)

    def check_columns(self, schema: T.StructType, where: str) -> None:
        for field in schema.fields:
            check_identifier(field.name, where)
        column_defs(schema, where)  # a type PostgreSQL cannot hold losslessly: refused

    def type_text(self, cursor: Any, spark_type: T.DataType, where: str) -> str:
        return catalog.type_text(cursor, pg_type(spark_type, where))

    # -- the catalog ------------------------------------------------------------------------
    def table_identity(self, cursor: Any, target: Target) -> int | None:
        return catalog.table_oid(cursor, target)

    def column_types(self, cursor: Any, target: Target) -> dict[str, str]:
        return catalog.column_types(cursor, target)

    # -- tables -----------------------------------------------------------------------------
    def create_staging(self, target: Target, schema: T.StructType, where: str) -> Query:
        return apply_sql.create_table(target, sql.SQL(", ").join([
            column_defs(schema, where), sql.SQL("{} integer").format(sql.Identifier(OP)),
            sql.SQL("{} integer").format(sql.Identifier(PART_COLUMN))]), unlogged=True)

    def create_image(self, target: Target, schema: T.StructType, where: str) -> Query:
        return apply_sql.create_table(target, sql.SQL(", ").join([
            column_defs(schema, where),
            sql.SQL("{} integer").format(sql.Identifier(PART_COLUMN))]))

    def finish_image(self, target: Target, keys: Sequence[str]) -> list[Query]:
        return [apply_sql.drop_column(target, PART_COLUMN), apply_sql.primary_key(target, keys)]

    def add_columns(self, target: Target, fields: Sequence[T.StructField], where: str
                    ) -> list[Query]:
        return apply_sql.add_column_statements(
            target, [(f.name, pg_type(f.dataType, f"{where}, column {f.name}")) for f in fields])

    def add_column_as(self, target: Target, column: str, kind: str) -> Query:
        return apply_sql.add_column_statements(target, [(column, sql.SQL(kind))])[0]

    def retype_when_null(self, target: Target, column: str, kind: str) -> Query:
        return sql.SQL("ALTER TABLE {t} ALTER COLUMN {c} TYPE {kind} USING NULL").format(
            t=apply_sql.table_id(target), c=sql.Identifier(column), kind=sql.SQL(kind))

    def drop_if_exists(self, target: Target) -> Query:
        return apply_sql.drop_if_exists(target)

    def lock(self, target: Target) -> Query:
        return apply_sql.lock_table(target)

    def count_rows(self, target: Target) -> Query:
        return apply_sql.count_rows(target)

    def count_not_null(self, target: Target, column: str) -> Query:
        return sql.SQL("SELECT count(*) FROM {t} WHERE {c} IS NOT NULL").format(
            t=apply_sql.table_id(target), c=sql.Identifier(column))

    def swap(self, target: Target, new: str, exists: bool) -> list[Query]:
        return list(apply_sql.swap_statements(target, new, exists))

    # -- the current image ------------------------------------------------------------------
    def apply_current(self, target: Target, staging: Target, columns: Sequence[str],
                      target_columns: Sequence[str], keys: Sequence[str], deleted: int,
                      updated: int, inserted: int) -> list[Statement]:
        return apply_sql.apply_statements(target, staging, columns, target_columns, keys,
                                          deleted, updated, inserted)

    # -- the history ------------------------------------------------------------------------
    def history_create(self, target: Target, schema: T.StructType, keys: Sequence[str],
                       layout: HistoryLayout) -> Query:
        return history_sql.history_create(target, schema, keys, layout)

    def history_layout_query(self, target: Target, start_at: str) -> Query:
        return history_sql.history_layout_query(target, start_at)

    def history_check(self, target: Target, staging: Target, keys: Sequence[str],
                      layout: HistoryLayout, snapshot_time: dt.datetime) -> Query:
        return history_sql.history_check(target, staging, keys, layout, snapshot_time)

    def history_apply(self, target: Target, staging: Target, columns: Sequence[str],
                      keys: Sequence[str], layout: HistoryLayout, version: int,
                      snapshot_time: dt.datetime, *, initial: bool, target_empty: bool,
                      compared: Sequence[str] | None, track_only: Sequence[str] | None,
                      track_except: Sequence[str]) -> list[Query]:
        return list(history_sql.history_apply(
            target, staging, columns, keys, layout, version, snapshot_time, initial=initial,
            target_empty=target_empty, compared=compared, track_only=track_only,
            track_except=track_except))

    # -- the bookkeeping table --------------------------------------------------------------
    def bookkeeping_schema_query(self, schema: str) -> Query:
        return bookkeeping.schema_query(schema)

    def bookkeeping_create(self, schema: str, *, schema_exists: bool) -> list[Query]:
        return list(bookkeeping.create_statements(schema, schema_exists=schema_exists))

    def bookkeeping_last(self, schema: str, target_table: str) -> Query:
        return bookkeeping.last_query(schema, target_table)

    def bookkeeping_version(self, schema: str, target_table: str, version: int) -> Query:
        return bookkeeping.version_query(schema, target_table, version)

    def bookkeeping_insert(self, schema: str, target_table: str, diffcdc_table: str,
                           row: Applied) -> Query:
        return bookkeeping.insert(schema, target_table, diffcdc_table, row)

    def bookkeeping_forget(self, schema: str, target_table: str) -> Query:
        return bookkeeping.forget(schema, target_table)

    # -- rows in and out --------------------------------------------------------------------
    def bulk_load(self, spark: SparkSession | None, staged: str, into: Target,
                  columns: Sequence[str], where: str) -> int:
        return copy_into(spark, staged, self.settings(), into, columns, where)

    def read_table(self, conn: Any, target: Target, keys: list[str],
                   layout: HistoryLayout | None, compared: T.StructType | None) -> Replayed:
        return pg_replay.read_table(conn, target, keys, layout, compared)
