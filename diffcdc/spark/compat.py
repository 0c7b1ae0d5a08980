"""What differs between the PySpark versions diffcdc runs on (classic 3.5.x and 4.x): the one
place that knows, by asking the installed PySpark what it has (feature detection), never by
comparing version strings. Everything else in diffcdc calls these and stays version-blind.

* ``DataFrame.toArrow()`` is new in 4.0; on 3.5 the same Arrow batches come from the
  DataFrame's ``_collect_as_arrow`` (what 4.0's ``toArrow`` itself wraps).
* ``VariantType`` is new in 4.0: on 3.5 no column can be of it, so it is simply not among the
  nested types.
* ``CalendarIntervalType`` has a Python type from 4.0 on; on 3.5 a frame with such a column has
  no Python schema at all (``DataFrame.schema`` fails to parse it), so the JVM's schema says
  which column holds one.
* A failed Spark job reaches Python on 4.x as PySpark's own exception carrying the root cause
  (``[USER_RAISED_EXCEPTION] boom``); 3.5 leaves it a py4j ``Py4JJavaError`` whose text starts
  "An error occurred while calling o66.parquet." — :func:`error_text` gives its innermost cause.
* A file Spark cannot read: 4.x names it with the error class ``FAILED_READ_FILE``, 3.5 in
  words (:data:`FAILED_READ_FILE`).

Spark settings that only one version knows need nothing here: a session takes any
``spark.*`` key it does not know (3.5 ignores ``spark.sql.legacy.javaCharsets``, which 4.0
needs for CSV in charsets beyond its seven and 3.5 reads anyway).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

#: The variant type where this PySpark has one (4.0+), else None.
VARIANT_TYPE: type[T.DataType] | None = getattr(T, "VariantType", None)

#: The calendar interval type where this PySpark has one in Python (4.0+), else None.
CALENDAR_INTERVAL_TYPE: type[T.DataType] | None = getattr(T, "CalendarIntervalType", None)

#: How Spark says a task could not read an input file: 4.x's error class, 3.5's words.
FAILED_READ_FILE: tuple[str, ...] = ("FAILED_READ_FILE", "Encountered error while reading file")

#: Nested column types: struct, array, map and, where it exists, variant.
NESTED_TYPES: tuple[type[T.DataType], ...] = (T.StructType, T.ArrayType, T.MapType) + (
    (VARIANT_TYPE,) if VARIANT_TYPE is not None else ()
)


def to_arrow(df: DataFrame) -> pa.Table:
    """All rows of ``df`` as one Arrow table on the driver (``DataFrame.toArrow()``)."""
    native = getattr(df, "toArrow", None)
    if native is not None:
        return native()
    # PySpark 3.5: the batches toArrow() collects in 4.x, in the table's order, cast to the
    # schema PySpark gives the frame (as toArrow() does; also an empty frame keeps its columns).
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema)
    batches = df._collect_as_arrow()
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches(batches).cast(schema)


def calendar_interval_column(df: DataFrame) -> tuple[str, str] | None:
    """``(name, type)`` of the first column of ``df`` that holds a calendar interval at any depth
    (a type Parquet cannot store), or None."""
    if CALENDAR_INTERVAL_TYPE is not None:
        return next(((f.name, f.dataType.simpleString()) for f in df.schema.fields
                     if _holds_interval(f.dataType.jsonValue())), None)
    # PySpark 3.5: the JVM's schema, as JSON of the same form.
    fields = df._jdf.schema().fields()  # type: ignore[attr-defined]
    return next(((f.name(), f.dataType().simpleString()) for f in fields
                 if _holds_interval(json.loads(f.dataType().json()))), None)


def _holds_interval(data_type: Any) -> bool:
    """Whether a data type in Spark's JSON form is, or holds, a calendar interval."""
    if isinstance(data_type, str):
        return data_type == "interval"
    kind = data_type.get("type")
    if kind == "struct":
        return any(_holds_interval(f["type"]) for f in data_type["fields"])
    if kind == "array":
        return _holds_interval(data_type["elementType"])
    if kind == "map":
        return _holds_interval(data_type["keyType"]) or _holds_interval(data_type["valueType"])
    return False


def error_text(exc: BaseException) -> str:
    """The text of an exception, for a one-line error: for a JVM exception PySpark left as it
    was (a py4j ``Py4JJavaError``: on 3.5 every failed job), its innermost cause
    (``java.lang.RuntimeException: boom``); else ``str(exc)``."""
    cause = getattr(exc, "java_exception", None)
    if cause is None:
        return str(exc)
    try:
        for _ in range(20):
            inner = cause.getCause()
            if inner is None:
                break
            cause = inner
        return str(cause.toString())
    except Exception:  # noqa: BLE001 - the JVM may be gone: the Python text then
        return str(exc)
