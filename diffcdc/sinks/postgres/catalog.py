"""What the PostgreSQL catalog says of a table: its ``pg_class`` oid (a table dropped and
created again has another), its columns and their types as ``format_type`` prints them, and a
Spark type spelled that way (:mod:`diffcdc.sinks.postgres.types` makes the column types)."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from diffcdc.sinks.sql.records import Target

_TYPE_NAMES = {"timestamptz": "timestamp with time zone",
               "timestamp": "timestamp without time zone", "time": "time without time zone"}


def table_oid(cursor: Any, target: Target) -> int | None:
    """The ``pg_class`` oid of the table ``target`` (None: there is none)."""
    cursor.execute(sql.SQL(
        "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = {} AND c.relname = {} AND c.relkind IN ('r', 'p')").format(
        sql.Literal(target[0]), sql.Literal(target[1])))
    row = cursor.fetchone()
    return int(row[0]) if row else None


def column_types(cursor: Any, target: Target) -> dict[str, str]:
    """The table's columns, in order, and their types as PostgreSQL prints them
    (``numeric(12,2)``); none when there is no such table."""
    cursor.execute(sql.SQL(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = {} AND c.relname = {} AND c.relkind IN ('r', 'p') "
        "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum").format(
        sql.Literal(target[0]), sql.Literal(target[1])))
    return {str(n): str(t) for n, t in cursor.fetchall()}


def type_text(cursor: Any, kind: sql.Composable) -> str:
    """A type as :func:`~diffcdc.sinks.postgres.types.pg_type` makes it, spelled as the
    server's ``format_type`` shows it."""
    text = kind.as_string(cursor).replace(", ", ",")
    base, brackets = (text[:-2], "[]") if text.endswith("[]") else (text, "")
    return _TYPE_NAMES.get(base, base) + brackets
