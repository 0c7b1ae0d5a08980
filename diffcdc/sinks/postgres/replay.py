"""Reading a PostgreSQL sink's table back for ``diffcdc verify``.

Values come back in binary (a ``real`` exactly the float32 it holds, ``numeric`` as Decimal,
``timestamptz`` as an aware UTC time, ``timestamp`` naive, arrays of scalars as lists). The
columns PostgreSQL holds as jsonb (structs, maps, arrays of nested values:
:func:`diffcdc.sinks.postgres.types.is_json`) are compared as parsed JSON on both sides, since
jsonb keeps neither key order nor a number's spelling: the table's jsonb read as text, the
snapshot's value written as the sink writes it (:func:`~diffcdc.sinks.postgres.types.json_value`),
both parsed and made one comparable value by the column's Spark type (:func:`canonical`:
objects by key, a map's entries in any order, numbers by value).
"""

from __future__ import annotations

import decimal
import json
from typing import Any

from psycopg import sql
from pyspark.sql import types as T

from diffcdc.core.compare import Replayed
from diffcdc.core.history_layout import HistoryLayout
from diffcdc.sinks.postgres.apply_sql import table_id
from diffcdc.sinks.postgres.types import is_json, json_value
from diffcdc.sinks.sql.records import Target

_EXACT = decimal.Context(prec=80)


def canonical(value: Any, dtype: T.DataType | None) -> Any:
    """A parsed jsonb value as one comparable value, by its Spark type (None: untyped)."""
    if value is None:
        return None
    if isinstance(dtype, T.StructType) and isinstance(value, dict):
        types = {f.name: f.dataType for f in dtype.fields}
        return ("{}", *sorted((k, canonical(v, types.get(k))) for k, v in value.items()))
    if isinstance(dtype, T.MapType):
        pairs = value.items() if isinstance(value, dict) else (
            (p[0], p[1]) for p in value if isinstance(p, list) and len(p) == 2)
        return ("map", *sorted(((canonical(k, dtype.keyType), canonical(v, dtype.valueType))
                                for k, v in pairs), key=repr))
    if isinstance(value, list):
        element = dtype.elementType if isinstance(dtype, T.ArrayType) else None
        return ("[]", *(canonical(v, element) for v in value))
    if isinstance(value, dict):
        return ("{}", *sorted((k, canonical(v, None)) for k, v in value.items()))
    if isinstance(value, decimal.Decimal):
        return value.normalize(_EXACT) if value.is_finite() else str(value)
    return value


def parse(text: str | None, dtype: T.DataType | None) -> Any:
    """A jsonb text as :func:`canonical` makes it."""
    if text is None:
        return None
    return canonical(json.loads(text, parse_float=decimal.Decimal, parse_int=decimal.Decimal),
                     dtype)


def _arrow_type(dtype: T.DataType) -> Any:
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(dtype)


def _column_types(cursor: Any, target: Target) -> list[tuple[str, str]]:
    cursor.execute(sql.SQL(
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = to_regclass({}) AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum").format(sql.Literal(table_id(target).as_string(cursor))))
    return [(str(n), str(t)) for n, t in cursor.fetchall()]


def read_table(conn: Any, target: Target, keys: list[str], layout: HistoryLayout | None,
               compared: T.StructType | None) -> Replayed:
    """Every row of the table (a history: its live open rows, without its own columns); an
    absent table replays as no rows. ``compared``: the schema of the snapshot it is compared
    with (its nested columns' types)."""
    with conn.cursor() as cursor:
        cursor.execute(sql.SQL("SELECT to_regclass({}) IS NOT NULL").format(
            sql.Literal(table_id(target).as_string(cursor))))
        if not cursor.fetchone()[0]:
            return Replayed(keys, [], [], units=0)
        types = _column_types(cursor, target)
    hidden = set(layout.columns) if layout is not None else set()
    columns = [(n, t) for n, t in types if n not in hidden]
    select = sql.SQL(", ").join(
        sql.SQL("{}::text").format(sql.Identifier(n)) if t == "jsonb" else sql.Identifier(n)
        for n, t in columns)
    query = sql.SQL("SELECT {cols} FROM {t}").format(cols=select, t=table_id(target))
    if layout is not None:
        live = sql.SQL(layout.open_sql(quote=lambda c: sql.Identifier(c).as_string(conn)))
        if layout.deleted is not None:
            live = sql.SQL("{} AND NOT coalesce({}, false)").format(
                live, sql.Identifier(layout.deleted))
        query = sql.SQL("{} WHERE {}").format(query, live)
    names = [n for n, _ in columns]
    spark_types = {f.name: f.dataType for f in (compared.fields if compared else ())}
    json_columns = {n: spark_types.get(n) for n, t in columns if t == "jsonb"}
    with conn.cursor(binary=True) as cursor:
        cursor.execute(query)
        rows = [dict(zip(names, values)) for values in cursor.fetchall()]
    for row in rows:
        for name, dtype in json_columns.items():
            row[name] = parse(row[name], dtype)
    arrow = {n: _arrow_type(d) for n, d in json_columns.items()
             if d is not None and is_json(d)}

    def normalize(row: dict[str, Any]) -> dict[str, Any]:
        """A snapshot row's nested values as the sink writes them, parsed."""
        out = dict(row)
        for name, kind in arrow.items():
            if name in out:
                value = out[name]
                out[name] = None if value is None else parse(json_value(value, kind),
                                                             json_columns[name])
        return out

    return Replayed(keys, names, rows, units=1, normalize=normalize if arrow else None)
