"""The Avro writer schema of a table's messages, mapped from the change set's Spark schema.

Field order is the table's column order; in logical mode ``sys_op`` (``int``: 0 upsert,
1 delete) is appended last. Key columns are plain types (keys are never NULL); every other
column is a ``["null", T]`` union in logical mode (a delete carries only the key) and follows
the Spark column's nullability in standalone mode. Nested columns (struct, array, map,
variant) travel as JSON strings. The type mapping is documented in ``docs/kafka.md``.

Avro names must match ``[A-Za-z_][A-Za-z0-9_]*``. The target compares field order and types,
never names (spec §4), so a column name Avro cannot spell is sanitized (other characters
become ``_``, a leading digit gets a ``_``, clashes get ``_2``, ``_3``...). The original names
travel in the container's metadata (``diffcdc.columns``), which is how replay maps them back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from diffcdc.core.changeset import OP, OP_DELETE
from diffcdc.core.sql import quote, sorted_maps
from diffcdc.errors import SchemaChangeError
from diffcdc.sinks.kafka.binary import FieldPlan
from diffcdc.spark.compat import NESTED_TYPES

SYS_OP = "sys_op"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NESTED = NESTED_TYPES


@dataclass(frozen=True)
class AvroLayout:
    """The writer schema of a table's messages and how each field is encoded."""

    schema: dict[str, Any]  #: the Avro record schema (JSON-able)
    columns: list[str]  #: the table's column names, in field order (without ``sys_op``)
    plans: list[FieldPlan]  #: one per Avro field, ``sys_op`` included
    logical: bool


def _primitive(dtype: T.DataType) -> tuple[Any, str]:
    """``(avro type, encoding kind)`` for one Spark type (nullability aside)."""
    if isinstance(dtype, T.BooleanType):
        return "boolean", "boolean"
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType)):
        return "int", "int"
    if isinstance(dtype, T.LongType):
        return "long", "long"
    if isinstance(dtype, T.FloatType):
        return "float", "float"
    if isinstance(dtype, T.DoubleType):
        return "double", "double"
    if isinstance(dtype, T.DecimalType):
        logical = {"type": "bytes", "logicalType": "decimal"}
        return {**logical, "precision": dtype.precision, "scale": dtype.scale}, "decimal"
    if isinstance(dtype, (T.StringType, T.CharType, T.VarcharType)):
        return "string", "string"
    if isinstance(dtype, T.BinaryType):
        return "bytes", "bytes"
    if isinstance(dtype, T.DateType):
        return {"type": "int", "logicalType": "date"}, "int"
    if isinstance(dtype, T.TimestampType):
        return {"type": "long", "logicalType": "timestamp-micros"}, "long"
    if isinstance(dtype, T.TimestampNTZType):
        return {"type": "long", "logicalType": "local-timestamp-micros"}, "long"
    if isinstance(dtype, _NESTED):
        return "string", "string"  # JSON text, see to_publish_frame
    if isinstance(dtype, T.NullType):
        return "null", "null"
    raise TypeError(dtype.simpleString())


def avro_name(name: str) -> str:
    """``name`` as a valid Avro name (invalid characters → ``_``, no leading digit)."""
    clean = re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"
    return clean if _NAME_RE.match(clean) else "_" + clean


def avro_layout(
    schema: T.StructType, keys: tuple[str, ...] | list[str], record_name: str, *, logical: bool, table: str
) -> AvroLayout:
    """The Avro writer schema for a change set's ``schema`` (see the module docstring)."""
    key_set = {k.lower() for k in keys}
    taken: set[str] = {SYS_OP} if logical else set()
    fields: list[dict[str, Any]] = []
    plans: list[FieldPlan] = []
    for f in schema.fields:
        try:
            avro_type, kind = _primitive(f.dataType)
        except TypeError:
            raise SchemaChangeError(
                f"column {f.name} has type {f.dataType.simpleString()}, which has no Avro "
                "mapping in the Kafka sink",
                table=table,
                hint="cast the column in the extract (e.g. intervals to a long of microseconds), "
                "or exclude the table from the Kafka sink",
            ) from None
        name = avro_name(f.name)
        base, n = name, 2
        while name.lower() in taken:
            name, n = f"{base}_{n}", n + 1
        taken.add(name.lower())
        is_key = f.name.lower() in key_set
        nullable = kind != "null" and not is_key and (logical or f.nullable)
        fields.append({"name": name, "type": ["null", avro_type] if nullable else avro_type})
        plans.append(FieldPlan(kind, nullable))
    if logical:
        fields.append({"name": SYS_OP, "type": "int"})
        plans.append(FieldPlan("int", False))
    record = {"name": avro_name(record_name), "type": "record", "fields": fields}
    return AvroLayout(record, schema.fieldNames(), plans, logical)


def json_columns(df: DataFrame) -> DataFrame:
    """Nested columns (struct, array, map, variant) replaced by their JSON text, in place (map
    entries sorted by key at every depth, as in landing files: one map, one text)."""
    if not any(isinstance(f.dataType, _NESTED) for f in df.schema.fields):
        return df
    return df.selectExpr(
        *[
            f"to_json({sorted_maps(quote(f.name), f.dataType)}) AS {quote(f.name)}"
            if isinstance(f.dataType, _NESTED)
            else quote(f.name)
            for f in df.schema.fields
        ]
    )


def to_publish_frame(frame: DataFrame, layout: AvroLayout) -> DataFrame:
    """The change set's frame as the encoder reads it: field order, JSON for nested, ``sys_op``
    (SQL text: one call to the JVM, see :mod:`diffcdc.core.sql`)."""
    cols: list[str] = []
    types = {f.name: f.dataType for f in frame.schema.fields}
    for i, name in enumerate(layout.columns):
        col = quote(name)
        if isinstance(types[name], _NESTED):
            col = f"to_json({sorted_maps(col, types[name])})"
        cols.append(f"{col} AS c{i}")
    if layout.logical:
        cols.append(f"CAST(CASE WHEN {quote(OP)} = {OP_DELETE} THEN 1 ELSE 0 END AS INT) AS {SYS_OP}")
    return frame.selectExpr(*cols)
