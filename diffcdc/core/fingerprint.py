"""The row fingerprint: pure Spark expressions, no IO, no Python UDF.

The fingerprint decides what counts as "changed", so it is part of the data contract and is
versioned (:data:`FINGERPRINT_VERSION`); state records the version it was computed with.

Definition (version 1), precise enough to reimplement:

1. Columns taken: every column of the row except the key columns and the excluded columns,
   sorted by name (so column order in the snapshot does not matter).
2. Each column ``c`` with name ``n`` becomes one *element*: NULL when the value is NULL,
   otherwise the struct ``(n, canon(value))``. Spark's ``xxhash64(e1, e2, ...)`` folds the
   elements left to right (seed 42, each element's hash seeds the next) and skips NULL
   elements. A NULL therefore contributes nothing (an added all-NULL column changes no
   fingerprint), while the column name inside each element keeps ``(NULL, 'a')`` apart from
   ``('a', NULL)``. An empty string is a value (``''`` ≠ NULL).
3. ``canon`` per type:
   * byte/short/int/long → long (8 bytes); boolean → Spark's int 0/1;
   * float/double → double, with -0.0 → 0.0 and every NaN → the canonical NaN;
   * decimal(p, s) → Spark's hash of the decimal at its declared scale: the unscaled value as
     a long for p ≤ 18, else the unscaled value's big-endian two's-complement bytes. ``1.50``
     and ``1.5`` in one column are equal values; a column whose precision or scale changes is
     a schema change (refused or re-created), so values of different scales never meet;
   * string → UTF-8 bytes; binary → bytes;
   * date → days since 1970-01-01 (int); timestamp / timestamp_ntz → microseconds since the
     epoch, UTC (the session time zone is pinned to UTC);
   * struct → fields sorted by name, each field an element as in step 2 (recursive);
   * array → ``(size, [ (is_null, canon(x)) for x ])``: positions and NULL elements count,
     and ``[]`` differs from NULL;
   * map → its entries sorted by key, each ``(canon(key), is_null(value), canon(value))``,
     wrapped like an array;
   * void (all-NULL, untyped) → contributes nothing.
4. 64-bit mode: ``xxhash64`` of the elements → column ``__diffcdc_fp`` (long).
   128-bit mode: additionally ``xxhash64('diffcdc-fp-hi', elements...)`` → ``__diffcdc_fp_hi``; the
   pair is the fingerprint (for tables in the billions of rows).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

FINGERPRINT_VERSION = 1
FP = "__diffcdc_fp"
FP_HI = "__diffcdc_fp_hi"
_HI_SALT = "diffcdc-fp-hi"


def fingerprint_columns(bits: int) -> list[str]:
    """Names of the fingerprint columns for a width (64 or 128 bits)."""
    if bits == 64:
        return [FP]
    if bits == 128:
        return [FP, FP_HI]
    raise ValueError(f"fingerprint bits must be 64 or 128, not {bits}")


def hashed_columns(
    schema: T.StructType, keys: Sequence[str], exclude: Sequence[str]
) -> list[T.StructField]:
    """The columns that enter the fingerprint, in the canonical (name) order."""
    skip = {c.lower() for c in keys} | {c.lower() for c in exclude}
    fields = [f for f in schema.fields if f.name.lower() not in skip]
    return sorted(fields, key=lambda f: f.name)


def _element(name: str, value: Column, dtype: T.DataType) -> Column | None:
    """NULL when ``value`` is NULL, else struct(name, canon(value)); None for void columns."""
    if isinstance(dtype, T.NullType):
        return None
    pair = F.struct(F.lit(name).alias("n"), canon(value, dtype).alias("v"))
    return F.when(value.isNotNull(), pair)


def canon(value: Column, dtype: T.DataType) -> Column:
    """The canonical form of a non-NULL value of ``dtype`` (see the module docstring)."""
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return value.cast("long")
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        d = value.cast("double")
        return (
            F.when(F.isnan(d), F.lit(float("nan")))
            .when(d == F.lit(0.0), F.lit(0.0))
            .otherwise(d)
        )
    if isinstance(dtype, T.DateType):
        return F.unix_date(value)
    if isinstance(dtype, T.TimestampType):
        return F.unix_micros(value)
    if isinstance(dtype, T.TimestampNTZType):
        return F.unix_micros(value.cast("timestamp"))
    if isinstance(dtype, T.StructType):
        elements = [
            _element(f.name, value.getField(f.name), f.dataType)
            for f in sorted(dtype.fields, key=lambda f: f.name)
        ]
        kept = [e.alias(f"e{i}") for i, e in enumerate(elements) if e is not None]
        return F.struct(*kept) if kept else F.lit(0)
    if isinstance(dtype, T.ArrayType):
        element_type = dtype.elementType
        items = F.transform(
            value,
            lambda x: F.struct(x.isNull().alias("z"), _canon_or_null(x, element_type).alias("v")),
        )
        return F.struct(F.size(value).alias("size"), items.alias("items"))
    if isinstance(dtype, T.MapType):
        entries = F.array_sort(
            F.map_entries(value),
            lambda left, right: F.when(left["key"] < right["key"], -1)
            .when(left["key"] > right["key"], 1)
            .otherwise(0),
        )
        key_type, value_type = dtype.keyType, dtype.valueType
        items = F.transform(
            entries,
            lambda e: F.struct(
                canon(e["key"], key_type).alias("k"),
                e["value"].isNull().alias("z"),
                _canon_or_null(e["value"], value_type).alias("v"),
            ),
        )
        return F.struct(F.size(value).alias("size"), items.alias("items"))
    # string, binary, boolean and anything Spark can hash directly.
    return value


def _canon_or_null(value: Column, dtype: T.DataType) -> Column:
    if isinstance(dtype, T.NullType):
        return F.lit(None)
    return F.when(value.isNotNull(), canon(value, dtype))


def fingerprint_exprs(
    schema: T.StructType,
    keys: Sequence[str],
    exclude: Sequence[str] = (),
    bits: int = 64,
) -> list[Column]:
    """Spark expressions computing the fingerprint column(s) for rows of ``schema``."""
    fields = hashed_columns(schema, keys, exclude)
    candidates = (_element(f.name, F.col(quote(f.name)), f.dataType) for f in fields)
    elements = [e for e in candidates if e is not None]
    if not elements:
        # No hashed columns (the key is the whole row): every present row is "unchanged".
        elements = [F.lit(None).cast("string")]
    exprs = [F.xxhash64(*elements).alias(FP)]
    if bits == 128:
        exprs.append(F.xxhash64(F.lit(_HI_SALT), *elements).alias(FP_HI))
    elif bits != 64:
        raise ValueError(f"fingerprint bits must be 64 or 128, not {bits}")
    return exprs


def quote(name: str) -> str:
    """Backtick-quote a column name for ``F.col`` (names may contain dots or spaces)."""
    return "`" + name.replace("`", "``") + "`"
