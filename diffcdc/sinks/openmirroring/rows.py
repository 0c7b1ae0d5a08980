"""The rows of Open Mirroring data files (spec §1): column types, row markers, row order.

:func:`to_landing_columns` projects a snapshot to landing column types (complex types as JSON
text); :func:`landing_changes` puts a change set in landing order with ``__rowMarker__`` last.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT
from diffcdc.core.sql import quote, sorted_maps

#: The row-marker column, last in every incremental file, and its values (spec §1).
ROW_MARKER = "__rowMarker__"
MARKER_INSERT, MARKER_UPDATE, MARKER_DELETE, MARKER_UPSERT = 0, 1, 2, 4
_GRP = "__diffcdc_grp"


def to_landing_columns(df: DataFrame) -> DataFrame:
    """Project a snapshot to landing column types.

    Complex types are written as JSON strings (spec §1); map entries are sorted by key at
    every depth so the text is stable. Everything else (binary, decimal, date, timestamp)
    keeps its Spark type and so its Parquet logical type.
    """
    out = []
    for field in df.schema.fields:
        col = quote(field.name)
        if isinstance(field.dataType, (T.MapType, T.StructType, T.ArrayType)):
            stable = sorted_maps(col, field.dataType)
            out.append(f"CASE WHEN {col} IS NOT NULL THEN to_json({stable}) END AS {col}")
        else:
            out.append(col)
    return df.selectExpr(*out)


def landing_changes(
    changes: DataFrame,
    keys: Sequence[str],
    columns: Sequence[str],
    *,
    initial: bool,
    upsert: bool = False,
    single_partition: bool = False,
    one_task: bool = False,
) -> DataFrame:
    """A neutral change set (landing columns + OP) in landing order, with ``__rowMarker__`` last.

    The initial load has no marker column (the whole file is INSERT, as spec §1 recommends)
    and keeps the snapshot's own row order (deterministic for the same files; sorting a whole
    first load would cost a full shuffle for nothing). Otherwise deletes (key columns only)
    come first, then inserts and updates, each ordered by key. ``single_partition`` sorts a
    small change set in one task instead of a range shuffle (which needs a sampling pass);
    with ``one_task`` (a small table's diff, computed in one task) its partitions are merged
    where they are, without a shuffle (a Spark job of its own on a small table).
    With ``upsert`` (``isUpsertDefaultRowMarker``) inserts and updates carry UPSERT (4).
    """
    cols = [quote(c) for c in columns]
    if initial:
        return changes.selectExpr(*cols)
    marker = (
        f"CASE WHEN {OP} = {OP_DELETE} THEN {MARKER_DELETE} "
        f"WHEN {OP} = {OP_INSERT} THEN {MARKER_UPSERT if upsert else MARKER_INSERT} "
        f"ELSE {MARKER_UPSERT if upsert else MARKER_UPDATE} END"
    )
    combined = changes.selectExpr(
        *cols,
        f"{marker} AS {ROW_MARKER}",
        f"CASE WHEN {OP} = {OP_DELETE} THEN 0 ELSE 1 END AS {_GRP}",
    )
    key_cols = [quote(k) for k in keys]
    if one_task:
        ordered = combined.coalesce(1).sortWithinPartitions(_GRP, *key_cols)
    elif single_partition:
        ordered = combined.repartition(1).sortWithinPartitions(_GRP, *key_cols)
    else:
        ordered = combined.orderBy(_GRP, *key_cols)
    return ordered.drop(_GRP)
