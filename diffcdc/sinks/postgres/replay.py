"""Reading a PostgreSQL sink's table back for ``diffcdc verify``.

Values come back in binary (a ``real`` exactly the float32 it holds, ``numeric`` as Decimal,
``timestamptz`` as an aware UTC time, ``timestamp`` naive). Structs and maps are ``jsonb`` in
the table; on both sides of the comparison they are compared as parsed JSON (objects by key,
numbers by value), since jsonb keeps neither key order nor a number's spelling: the snapshot's
nested columns are made JSON text by Spark (:func:`comparable`), the table's jsonb is read as
text, and :func:`canonical_json` makes both one comparable value.
"""

from __future__ import annotations

import decimal
import json
from typing import Any

from psycopg import sql
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from diffcdc.core.compare import Replayed
from diffcdc.core.history_layout import HistoryLayout
from diffcdc.core.sql import quote, sorted_maps
from diffcdc.sinks.postgres.apply_sql import Target, table_id

#: PostgreSQL types read as JSON text (an array of them as an array of texts).
JSON_TYPES = {"jsonb": "text", "json": "text", "_jsonb": "text[]", "_json": "text[]"}


def holds_json(dtype: T.DataType) -> bool:
    """Whether a Spark type is (or holds) a struct or a map: PostgreSQL keeps it as jsonb."""
    if isinstance(dtype, (T.StructType, T.MapType)):
        return True
    if isinstance(dtype, T.ArrayType):
        return holds_json(dtype.elementType)
    return False


def comparable(snapshot: DataFrame) -> DataFrame:
    """The snapshot with its struct and map columns (also inside arrays) as JSON text."""
    if not any(holds_json(f.dataType) for f in snapshot.schema.fields):
        return snapshot
    return snapshot.selectExpr(*[
        f"to_json({sorted_maps(quote(f.name), f.dataType)}) AS {quote(f.name)}"
        if holds_json(f.dataType) else quote(f.name) for f in snapshot.schema.fields])


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((str(k), _canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, decimal.Decimal):
        return value.normalize(decimal.Context(prec=80)) if value.is_finite() else str(value)
    return value


def canonical_json(text: Any) -> Any:
    """A JSON text (or a list of them: a jsonb[] column) as one comparable value."""
    if text is None:
        return None
    if isinstance(text, list):
        return ("[]", *(canonical_json(t) for t in text))
    parsed = json.loads(text, parse_float=decimal.Decimal, parse_int=decimal.Decimal)
    if isinstance(parsed, list):  # an array of structs held as one jsonb: as a jsonb[]
        return ("[]", *(_canonical(v) for v in parsed))
    return _canonical(parsed)


def _column_types(cursor: Any, target: Target) -> list[tuple[str, str]]:
    cursor.execute(sql.SQL(
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = to_regclass({}) AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum").format(sql.Literal(table_id(target).as_string(cursor))))
    return [(str(n), str(t)) for n, t in cursor.fetchall()]


def read_table(conn: Any, target: Target, keys: list[str], layout: HistoryLayout | None
               ) -> Replayed:
    """Every row of the table (a history: its live open rows, without its own columns); an
    absent table replays as no rows."""
    with conn.cursor() as cursor:
        cursor.execute(sql.SQL("SELECT to_regclass({}) IS NOT NULL").format(
            sql.Literal(table_id(target).as_string(cursor))))
        if not cursor.fetchone()[0]:
            return Replayed(keys, [], [], units=0)
        types = _column_types(cursor, target)
    hidden = set(layout.columns) if layout is not None else set()
    columns = [(n, t) for n, t in types if n not in hidden]
    select = sql.SQL(", ").join(
        sql.SQL("{}::{}").format(sql.Identifier(n), sql.SQL(JSON_TYPES[t])) if t in JSON_TYPES
        else sql.Identifier(n) for n, t in columns)
    query = sql.SQL("SELECT {cols} FROM {t}").format(cols=select, t=table_id(target))
    if layout is not None:
        live = sql.SQL(layout.open_sql(quote=lambda c: sql.Identifier(c).as_string(conn)))
        if layout.deleted is not None:
            live = sql.SQL("{} AND NOT coalesce({}, false)").format(
                live, sql.Identifier(layout.deleted))
        query = sql.SQL("{} WHERE {}").format(query, live)
    names = [n for n, _ in columns]
    json_columns = {n for n, t in columns if t in JSON_TYPES}
    with conn.cursor(binary=True) as cursor:
        cursor.execute(query)
        rows = [dict(zip(names, values)) for values in cursor.fetchall()]
    for row in rows:
        for name in json_columns:
            row[name] = canonical_json(row[name])

    def normalize(row: dict[str, Any]) -> dict[str, Any]:
        return {c: canonical_json(v) if c in json_columns and isinstance(v, (str, list)) else v
                for c, v in row.items()}

    return Replayed(keys, names, rows, units=1, normalize=normalize if json_columns else None)
