"""Spark SQL text for expressions: quoted names, literals that hold any text, sorted maps.

diffcdc writes its per-column expressions as Spark SQL text (``selectExpr``, ``F.expr``)
rather than building them from ``Column`` objects. With PySpark's classic API every function,
literal, cast and alias of a ``Column`` is a call to the JVM (~0.1-0.3 ms each, measured), so
one column's fingerprint cost ~3.5 ms to build; text is parsed by Spark in one call per
expression (a steady small table's run: 5-14% faster, benchmarks/README.md).

The text must mean exactly what the ``Column`` would: names are backtick-quoted, strings are
written as their UTF-8 bytes (so no parser setting can change them), and the frames the
expressions run on have unqualified columns (every source reads them so), which makes
``column.field`` a struct field and never a table alias.
"""

from __future__ import annotations

from pyspark.sql import types as T

#: Lambda variables are named with this and their depth (reserved prefix: no snapshot
#: column has it, so a variable never hides a column).
_LAMBDA = "__diffcdc_x"


def quote(name: str) -> str:
    """Backtick-quote a column name (for SQL text and ``F.col``: names may hold dots, spaces)."""
    return "`" + name.replace("`", "``") + "`"


def text(value: str) -> str:
    """A string literal holding ``value`` exactly, whatever the parser's escaping settings:
    its UTF-8 bytes in hex, cast to a string (a constant once the query is planned)."""
    return f"CAST(X'{value.encode('utf-8').hex()}' AS STRING)"


def variable(depth: int) -> str:
    """The lambda variable of a higher-order function nested ``depth`` deep."""
    return f"{_LAMBDA}{depth}"


def sorted_entries(value: str, depth: int) -> str:
    """The entries of the map ``value`` as an array of (key, value) structs, sorted by key."""
    left, right = f"{variable(depth)}l", f"{variable(depth)}r"
    return (
        f"array_sort(map_entries({value}), ({left}, {right}) -> CASE WHEN {left}.`key` < "
        f"{right}.`key` THEN -1 WHEN {left}.`key` > {right}.`key` THEN 1 ELSE 0 END)"
    )


def sorted_maps(value: str, dtype: T.DataType, depth: int = 0) -> str:
    """``value`` with the entries of every map in it (at any depth) sorted by key: the same
    map always gives the same ``to_json`` text, whatever order its entries came in."""
    x = variable(depth)
    if isinstance(dtype, T.MapType):
        if has_map(dtype.valueType):
            inner = sorted_maps(f"{x}v", dtype.valueType, depth + 1)
            value = f"transform_values({value}, ({x}k, {x}v) -> {inner})"
        return f"map_from_entries({sorted_entries(value, depth)})"
    if isinstance(dtype, T.ArrayType) and has_map(dtype.elementType):
        return f"transform({value}, {x} -> {sorted_maps(x, dtype.elementType, depth + 1)})"
    if isinstance(dtype, T.StructType) and has_map(dtype):
        fields = ", ".join(
            f"{text(f.name)}, {sorted_maps(f'{value}.{quote(f.name)}', f.dataType, depth)}"
            for f in dtype.fields
        )
        return f"CASE WHEN {value} IS NOT NULL THEN named_struct({fields}) END"
    return value


def has_map(dtype: T.DataType) -> bool:
    """Whether ``dtype`` holds a map at any depth."""
    if isinstance(dtype, T.MapType):
        return True
    if isinstance(dtype, T.ArrayType):
        return has_map(dtype.elementType)
    if isinstance(dtype, T.StructType):
        return any(has_map(f.dataType) for f in dtype.fields)
    return False
