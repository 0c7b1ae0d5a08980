"""The rows of Open Mirroring data files (spec §1): column types, row markers, row order.

:func:`to_landing_columns` projects a snapshot to landing column types (complex types as JSON
text); :func:`landing_changes` puts a change set in landing order with ``__rowMarker__`` last.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from diffcdc.core.fingerprint import quote
from diffcdc.sinks.base import OP, OP_DELETE, OP_INSERT

#: The row-marker column, last in every incremental file, and its values (spec §1).
ROW_MARKER = "__rowMarker__"
MARKER_INSERT, MARKER_UPDATE, MARKER_DELETE, MARKER_UPSERT = 0, 1, 2, 4
_GRP = "__diffcdc_grp"


def _stable(col: Column, dtype: T.DataType) -> Column:
    """``col`` with the entries of every map (at any depth) sorted by key."""
    if isinstance(dtype, T.MapType):
        value = col
        if _has_map(dtype.valueType):
            value = F.transform_values(col, lambda _k, v: _stable(v, dtype.valueType))
        return F.map_from_entries(
            F.array_sort(
                F.map_entries(value),
                lambda left, right: F.when(left["key"] < right["key"], -1)
                .when(left["key"] > right["key"], 1)
                .otherwise(0),
            )
        )
    if isinstance(dtype, T.ArrayType) and _has_map(dtype.elementType):
        return F.transform(col, lambda x: _stable(x, dtype.elementType))
    if isinstance(dtype, T.StructType) and _has_map(dtype):
        return F.when(
            col.isNotNull(),
            F.struct(*[_stable(col[f.name], f.dataType).alias(f.name) for f in dtype.fields]),
        )
    return col


def _has_map(dtype: T.DataType) -> bool:
    if isinstance(dtype, T.MapType):
        return True
    if isinstance(dtype, T.ArrayType):
        return _has_map(dtype.elementType)
    if isinstance(dtype, T.StructType):
        return any(_has_map(f.dataType) for f in dtype.fields)
    return False


def to_landing_columns(df: DataFrame) -> DataFrame:
    """Project a snapshot to landing column types.

    Complex types are written as JSON strings (spec §1); map entries are sorted by key at
    every depth so the text is stable. Everything else (binary, decimal, date, timestamp)
    keeps its Spark type and so its Parquet logical type.
    """
    out = []
    for field in df.schema.fields:
        col = F.col(quote(field.name))
        if isinstance(field.dataType, (T.MapType, T.StructType, T.ArrayType)):
            out.append(
                F.when(col.isNotNull(), F.to_json(_stable(col, field.dataType))).alias(field.name)
            )
        else:
            out.append(col)
    return df.select(*out)


def landing_changes(
    changes: DataFrame,
    keys: Sequence[str],
    columns: Sequence[str],
    *,
    initial: bool,
    upsert: bool = False,
    single_partition: bool = False,
) -> DataFrame:
    """A neutral change set (landing columns + OP) in landing order, with ``__rowMarker__`` last.

    The initial load has no marker column (the whole file is INSERT, as spec §1 recommends)
    and keeps the snapshot's own row order (deterministic for the same files; sorting a whole
    first load would cost a full shuffle for nothing). Otherwise deletes (key columns only)
    come first, then inserts and updates, each ordered by key. ``single_partition`` sorts a
    small change set in one task instead of a range shuffle (which needs a sampling pass).
    With ``upsert`` (``isUpsertDefaultRowMarker``) inserts and updates carry UPSERT (4).
    """
    if initial:
        return changes.select(*[F.col(quote(c)) for c in columns])
    op = F.col(OP)
    marker = (
        F.when(op == OP_DELETE, F.lit(MARKER_DELETE))
        .when(op == OP_INSERT, F.lit(MARKER_UPSERT if upsert else MARKER_INSERT))
        .otherwise(F.lit(MARKER_UPSERT if upsert else MARKER_UPDATE))
    )
    combined = changes.select(
        *[F.col(quote(c)) for c in columns],
        marker.alias(ROW_MARKER),
        F.when(op == OP_DELETE, 0).otherwise(1).alias(_GRP),
    )
    key_cols = [F.col(quote(k)) for k in keys]
    if single_partition:
        ordered = combined.repartition(1).sortWithinPartitions(_GRP, *key_cols)
    else:
        ordered = combined.orderBy(_GRP, *key_cols)
    return ordered.drop(_GRP)

