"""How MariaDB / MySQL columns are read so that no value changes (pure: no IO, no Spark).

Spark's MySQL dialect (a ``jdbc:mysql:`` URL; MariaDB's Connector/J takes it) changes values
without an error: DECIMAL(65,30) becomes decimal(38,3), a zero date ``0000-00-00`` NULL and
``2026-00-15`` 2025-12-15, TIME a timestamp, BIT(8) a sign-extended number, SET/ENUM and
CHAR padded to their width, YEAR a date, TINYINT(1) a boolean (2 → true; the driver property
``tinyInt1isBit=false``, set by :func:`diffcdc.sources.jdbc_session.connection_properties`,
reads it as the number). :func:`plan_mysql` reads:

* DATE, DATETIME, TIMESTAMP as their text (``CAST(c AS CHAR)``, the session in UTC), turned
  into a date / timestamp by Spark and checked value by value: a zero date or a zero month or
  day fails the read in one line (Spark's ``raise_error``), naming the column and the value;
* TIME, CHAR / ENUM / SET as their text (unpadded), BIT(n) and YEAR as their number;
* a DECIMAL wider than 38 digits refused unless ``wide_numeric`` / ``column_types`` read it as
  ``"string"`` (checked decimals need PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Mapping

from diffcdc.errors import ConfigError
from diffcdc.sources.jdbc_types import (
    MARK,
    MAX_PRECISION,
    Column,
    ReadPlan,
    check_column_types,
    db_type,
    refuse,
    string_hint,
)

_NUMERIC_TYPES = {2, 3}
_CHAR = 1
_TIME = 92
_BINARY_BITS = {-2, -3}  # BIT(n), n > 1, comes as (VAR)BINARY
_BIT = -7


def quote(name: str) -> str:
    """A MariaDB / MySQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def _spark_literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def session_statement(lock_timeout: float) -> str:
    """The statement every connection of a read runs first: UTC (TIMESTAMP read as its UTC
    text) and the metadata-lock wait bound (0: MariaDB's maximum, a year)."""
    seconds = max(1, int(round(lock_timeout))) if lock_timeout else 31_536_000
    return f"SET SESSION time_zone = '+00:00', lock_wait_timeout = {seconds}"


def plan_mysql(
    columns: list[Column], relation: str, wide_numeric: str, column_types: Mapping[str, str],
    table: str,
) -> ReadPlan:
    """The wrapping query and the Spark expressions (see the module docstring)."""
    check_column_types(columns, column_types, table)
    items: list[str] = []
    spark: list[str] = []
    changed = False
    for column in columns:
        col = quote(column.name)
        expr, check = _column(column, wide_numeric, (column_types.get(column.name) or "").strip(),
                              table)
        items.append(f"{expr} AS {col}" if expr else col)
        spark.append(check or col)
        changed = changed or expr is not None or check is not None
    if not changed:
        return ReadPlan(relation)
    return ReadPlan(f"(SELECT {', '.join(items)} FROM {relation}) diffcdc_read",
                    spark_select=tuple(spark))


def _column(column: Column, wide_numeric: str, wanted: str, table: str) -> tuple[str | None, str | None]:
    """(the database expression, the Spark expression) of one column; None: as it is."""
    col = quote(column.name)
    name = column.type_name.upper()
    as_text = f"CAST({col} AS CHAR)"
    if wanted.lower() == "string":
        return as_text, None
    if wanted:
        raise ConfigError(
            f"column {column.name}: a decimal checked value by value needs PostgreSQL",
            table=table, hint=string_hint(column),
        )
    if column.jdbc_type in _NUMERIC_TYPES:
        if 0 < column.precision <= MAX_PRECISION and 0 <= column.scale <= column.precision:
            return None, None
        if wide_numeric == "string":
            return as_text, None
        if wide_numeric == "decimal":
            raise ConfigError(
                f"column {column.name}: a decimal checked value by value needs PostgreSQL",
                table=table, hint=string_hint(column),
            )
        raise refuse(column, table, "wider than Spark's decimal (38 digits)",
                     f'choose column_types = {{ {column.name} = "string" }} or wide_numeric = '
                     '"string" in the table\'s source (docs/sources.md)')
    if name == "YEAR":
        return f"CAST({col} AS SIGNED)", None
    if name == "DATE":
        return as_text, _moment(column, "yyyy-MM-dd", "date")
    if name in ("DATETIME", "TIMESTAMP"):
        fraction = "." + "S" * column.scale if 0 < column.scale <= 6 else ""
        return as_text, _moment(column, "yyyy-MM-dd HH:mm:ss" + fraction, "timestamp")
    if column.jdbc_type in (_TIME, _CHAR):  # TIME; CHAR, ENUM, SET: unpadded
        return as_text, None
    if name == "BIT" and column.jdbc_type in _BINARY_BITS:
        return f"CAST({col} AS UNSIGNED)", None
    if name.startswith("TINYINT") and column.jdbc_type == _BIT:  # tinyInt1isBit ignored
        return f"CAST({col} AS SIGNED)", None
    return None, None


def _moment(column: Column, pattern: str, kind: str) -> str:
    """Spark: the text as a date / timestamp when it is one exactly, else the read fails."""
    col = quote(column.name)
    parsed = f"try_to_timestamp({col}, '{pattern}')"
    value = f"to_date({parsed})" if kind == "date" else parsed
    message = (f"{MARK}: column {column.name} ({db_type(column)}) holds a value Spark's {kind} "
               "cannot hold exactly: ")
    fail = f"raise_error(concat({_spark_literal(message)}, {col}, ' :{MARK}'))"
    return (f"CASE WHEN {col} IS NULL THEN NULL "
            f"WHEN date_format({value}, '{pattern}') = {col} THEN {value} ELSE {fail} END AS {col}")
