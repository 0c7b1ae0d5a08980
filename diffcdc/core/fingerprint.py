"""The row fingerprint: pure Spark SQL expressions, no IO, no Python UDF.

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
5. Normalizers (:mod:`diffcdc.core.normalize`, per table and top-level column) replace a
   column's value by its normalized one before step 2: the element is NULL when the
   normalized value is (``empty_as_null``), and ``canon`` takes the normalized value's type
   (a decimal rounded to fewer digits than its scale: ``decimal(p - s + 1 + N, N)``).
   Without rules a column is hashed as above, so a table without normalizers keeps its
   fingerprints.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from diffcdc.core.normalize import NO_RULES, Normalizers, normalized_sql, normalized_type
from diffcdc.core.sql import quote, sorted_entries, text, variable

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


def _element(name: str, value: str, dtype: T.DataType, depth: int) -> str | None:
    """NULL when ``value`` is NULL, else struct(name, canon(value)); None for void columns."""
    if isinstance(dtype, T.NullType):
        return None
    pair = f"named_struct('n', {text(name)}, 'v', {canon(value, dtype, depth)})"
    return f"CASE WHEN {value} IS NOT NULL THEN {pair} END"


def _normalized_element(f: T.StructField, normalize: Normalizers) -> str | None:
    """A top-level column's element, its value normalized by its rules (if any)."""
    rules = normalize.get(f.name)
    value = normalized_sql(quote(f.name), rules, f.dataType)
    dtype = normalized_type(rules, f.dataType)
    if rules is not None and any(r.name == "json" for r in rules.rules):
        # the element names its value twice: through a lambda the Python UDF runs once a row
        x = variable(0)
        return f"element_at(transform(array({value}), {x} -> {_element(f.name, x, dtype, 1)}), 1)"
    return _element(f.name, value, dtype, 0)


def canon(value: str, dtype: T.DataType, depth: int = 0) -> str:
    """The canonical form of a non-NULL value of ``dtype`` (see the module docstring), as
    Spark SQL over the expression ``value``; ``depth`` names the lambda variables apart."""
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return f"CAST({value} AS BIGINT)"
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        d = f"CAST({value} AS DOUBLE)"
        return f"CASE WHEN isnan({d}) THEN CAST('NaN' AS DOUBLE) WHEN {d} = 0.0D THEN 0.0D ELSE {d} END"
    if isinstance(dtype, T.DateType):
        return f"unix_date({value})"
    if isinstance(dtype, T.TimestampType):
        return f"unix_micros({value})"
    if isinstance(dtype, T.TimestampNTZType):
        return f"unix_micros(CAST({value} AS TIMESTAMP))"
    if isinstance(dtype, T.StructType):
        elements = [
            _element(f.name, f"{value}.{quote(f.name)}", f.dataType, depth)
            for f in sorted(dtype.fields, key=lambda f: f.name)
        ]
        kept = [e for e in elements if e is not None]
        if not kept:
            return "0"
        return "named_struct(" + ", ".join(f"'e{i}', {e}" for i, e in enumerate(kept)) + ")"
    x = variable(depth)
    if isinstance(dtype, T.ArrayType):
        item = f"named_struct('z', {x} IS NULL, 'v', {_canon_or_null(x, dtype.elementType, depth + 1)})"
        return f"named_struct('size', size({value}), 'items', transform({value}, {x} -> {item}))"
    if isinstance(dtype, T.MapType):
        entries = sorted_entries(value, depth)
        item = (
            f"named_struct('k', {canon(f'{x}.`key`', dtype.keyType, depth + 1)}, "
            f"'z', {x}.`value` IS NULL, 'v', {_canon_or_null(f'{x}.`value`', dtype.valueType, depth + 1)})"
        )
        return f"named_struct('size', size({value}), 'items', transform({entries}, {x} -> {item}))"
    # string, binary, boolean and anything Spark can hash directly.
    return value


def _canon_or_null(value: str, dtype: T.DataType, depth: int) -> str:
    if isinstance(dtype, T.NullType):
        return "NULL"
    return f"CASE WHEN {value} IS NOT NULL THEN {canon(value, dtype, depth)} END"


def fingerprint_exprs(
    schema: T.StructType,
    keys: Sequence[str],
    exclude: Sequence[str] = (),
    bits: int = 64,
    normalize: Normalizers = NO_RULES,
) -> list[Column]:
    """Spark expressions computing the fingerprint column(s) for rows of ``schema``.

    Each is one Spark SQL expression, parsed by Spark in a single call (see
    :mod:`diffcdc.core.sql`); the frame's columns must be unqualified. With ``normalize``
    rules their columns are hashed normalized (a ``json`` rule needs
    :func:`diffcdc.core.normalize.register_functions` called on the frame's session).
    """
    fields = hashed_columns(schema, keys, exclude)
    candidates = (_normalized_element(f, normalize) for f in fields)
    elements = [e for e in candidates if e is not None]
    if not elements:
        # No hashed columns (the key is the whole row): every present row is "unchanged".
        elements = ["CAST(NULL AS STRING)"]
    if bits not in (64, 128):
        raise ValueError(f"fingerprint bits must be 64 or 128, not {bits}")
    exprs = [F.expr(f"xxhash64({', '.join(elements)})").alias(FP)]
    if bits == 128:
        exprs.append(F.expr(f"xxhash64({text(_HI_SALT)}, {', '.join(elements)})").alias(FP_HI))
    return exprs
