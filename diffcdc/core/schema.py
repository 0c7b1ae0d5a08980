"""Schema checks between a snapshot and the table's committed schema (pure, no IO)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark.sql import types as T

from diffcdc.core.classify import RESERVED_PREFIX
from diffcdc.errors import InputRefused, KeyViolation, SchemaChangeError

_KEY_TYPES = (
    T.StringType,
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.DecimalType,
    T.DateType,
    T.TimestampType,
    T.TimestampNTZType,
    T.BooleanType,
    T.BinaryType,
)


#: Types no snapshot column may have (at any depth), with the way out for each: Spark cannot
#: hash a VARIANT (its fingerprint), and Spark's TIME is off by default (it cannot even write
#: it). Intervals are not here: a calendar interval is refused by the DataFrame source (no
#: Parquet copy holds one), day-time and year-month ones are stored and diffed, and each sink
#: refuses what it cannot write (Kafka: no Avro mapping).
_REFUSED_TYPES: tuple[tuple[str, str, str], ...] = (
    ("VariantType", "VARIANT, which Spark cannot hash (the change fingerprint)",
     "to_json(c) as a string"),
    ("TimeType", "TIME, which Spark does not support by default nor write to Parquet",
     "a string such as '13:45:00.000000'"),
)


def refused_type(dtype: T.DataType, path: str) -> tuple[str, str, str] | None:
    """(the column or nested field, the type's name, what to cast it to) of the first part
    of ``dtype`` diffcdc cannot fingerprint or publish, or None."""
    for class_name, label, cast in _REFUSED_TYPES:
        cls = getattr(T, class_name, None)  # TimeType and VariantType: Spark 4 only
        if cls is not None and isinstance(dtype, cls):
            return path, label, cast
    if isinstance(dtype, T.StructType):
        for f in dtype.fields:
            if found := refused_type(f.dataType, f"{path}.{f.name}"):
                return found
    if isinstance(dtype, T.ArrayType):
        return refused_type(dtype.elementType, f"{path}[]")
    if isinstance(dtype, T.MapType):
        return refused_type(dtype.keyType, f"{path} (map key)") or refused_type(
            dtype.valueType, f"{path} (map value)")
    return None


def check_column_types(schema: T.StructType, *, table: str | None, snapshot: str) -> None:
    """Refuse a column with a type of :data:`_REFUSED_TYPES` (at any depth), naming it."""
    for f in schema.fields:
        if refused := refused_type(f.dataType, f.name):
            where, label, cast = refused
            raise InputRefused(
                f"column {where!r} has type {label}",
                table=table,
                snapshot=snapshot,
                hint=f"cast it in the extract or the DataFrame to {cast}, or drop it",
            )


@dataclass(frozen=True)
class SchemaDiff:
    """How a snapshot's columns differ from the committed schema.

    Names match case-blind (no snapshot has two columns one name apart in case); a column
    whose spelling changed only in case is ``renamed``, a schema change like a removed one:
    every sink writes names as spelled (landing keyColumns, Delta and Avro fields are
    case-sensitive), so ``ID`` cannot silently continue ``id``.
    """

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    retyped: list[tuple[str, str, str]] = field(default_factory=list)  # name, old, new
    renamed: list[tuple[str, str]] = field(default_factory=list)  # old spelling, new spelling

    @property
    def compatible(self) -> bool:
        return not self.removed and not self.retyped and not self.renamed

    def describe(self, removed: bool = True) -> list[str]:
        """The incompatible changes, one phrase each (``removed``: list removed columns)."""
        parts = []
        if removed and self.removed:
            parts.append(f"removed {self.removed}")
        if self.renamed:
            parts.append("renamed in case " + ", ".join(f"{a!r}→{b!r}" for a, b in self.renamed))
        if self.retyped:
            parts.append("retyped " + ", ".join(f"{n} {a}→{b}" for n, a, b in self.retyped))
        return parts


def resolve_columns(
    schema: T.StructType, wanted: Sequence[str], *, what: str, table: str, snapshot: str
) -> list[str]:
    """Map configured column names to the snapshot's spelling (case-insensitive)."""
    by_lower = {f.name.lower(): f.name for f in schema.fields}
    missing = [c for c in wanted if c.lower() not in by_lower]
    if missing:
        raise KeyViolation(
            f"{what} column(s) {missing} not in the snapshot (columns: {schema.fieldNames()})",
            table=table,
            snapshot=snapshot,
            hint=f"fix the {what} setting or the extract",
        )
    return [by_lower[c.lower()] for c in wanted]


def check_snapshot_columns(
    schema: T.StructType,
    keys: Sequence[str],
    *,
    table: str,
    snapshot: str,
    reserved: Sequence[str] = (),
) -> None:
    """Refuse reserved or duplicate column names and key columns of unusable types.

    ``reserved`` names the columns the table's sinks add (``__rowMarker__``, ``sys_op`` ...).
    """
    seen: set[str] = set()
    taken = {r.lower() for r in reserved}
    for f in schema.fields:
        lower = f.name.lower()
        if lower in seen:
            raise SchemaChangeError(
                f"column {f.name!r} appears twice (names are compared case-insensitively)",
                table=table,
                snapshot=snapshot,
                hint="rename one of the columns in the extract",
            )
        seen.add(lower)
        if lower in taken or lower.startswith(RESERVED_PREFIX):
            raise SchemaChangeError(
                f"column {f.name!r} clashes with a column diffcdc adds",
                table=table,
                snapshot=snapshot,
                hint="rename or drop the column in the extract",
            )
    check_column_types(schema, table=table, snapshot=snapshot)
    types = {f.name: f.dataType for f in schema.fields}
    for k in keys:
        if not isinstance(types[k], _KEY_TYPES):
            raise KeyViolation(
                f"key column {k!r} has type {types[k].simpleString()}, which cannot be a key",
                table=table,
                snapshot=snapshot,
                hint="choose scalar key columns (string, integer, decimal, date, timestamp)",
            )


def diff_schema(old: T.StructType, new: T.StructType) -> SchemaDiff:
    """Columns added, removed and retyped from ``old`` to ``new`` (nullability ignored)."""
    old_by = {f.name.lower(): f for f in old.fields}
    new_by = {f.name.lower(): f for f in new.fields}
    added = [new_by[n].name for n in new_by if n not in old_by]
    removed = [old_by[n].name for n in old_by if n not in new_by]
    retyped = []
    renamed = sorted((old_by[n].name, new_by[n].name) for n in old_by.keys() & new_by.keys()
                     if old_by[n].name != new_by[n].name)
    for n in old_by.keys() & new_by.keys():
        before, after = old_by[n].dataType, new_by[n].dataType
        if isinstance(before, T.NullType) or isinstance(after, T.NullType):
            continue  # an all-NULL untyped column is compatible with anything
        if before.simpleString() != after.simpleString():  # simpleString omits nullability
            retyped.append((new_by[n].name, before.simpleString(), after.simpleString()))
    return SchemaDiff(sorted(added), sorted(removed), sorted(retyped), renamed)


def require_compatible(diff: SchemaDiff, *, table: str, snapshot: str) -> None:
    """Refuse removed, renamed or retyped columns (the default ``fail`` schema policy)."""
    if diff.compatible:
        return
    raise SchemaChangeError(
        "schema changed: " + "; ".join(diff.describe()),
        table=table,
        snapshot=snapshot,
        hint="restore the columns in the extract, or re-create the table with the new schema",
    )
