"""The Spark type of a Parquet/Arrow column, as Spark's Parquet reader sees it (no Spark needed).

The fingerprint is defined on Spark types (:mod:`diffcdc.core.fingerprint`); a checker that
reads files with pyarrow needs the Spark type each Arrow column becomes. The mapping follows
Spark's Parquet reader:

* signed integers keep their width; unsigned ones widen (uint8 → short, uint16 → int,
  uint32 → long) and uint64 becomes ``decimal(20,0)``;
* string types → string, binary types (also fixed-size) → binary;
* timestamps with a time zone → timestamp, without one → timestamp_ntz (both microseconds);
* lists (also large and fixed-size) → array, dictionary-encoded columns → their value type.

Types Spark cannot read from Parquet (float16, time, duration, nanosecond timestamps,
decimals wider than 38 digits, ...) raise :class:`TypeError`.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

_SIMPLE: dict[pa.DataType, T.DataType] = {
    pa.bool_(): T.BooleanType(),
    pa.int8(): T.ByteType(),
    pa.int16(): T.ShortType(),
    pa.int32(): T.IntegerType(),
    pa.int64(): T.LongType(),
    pa.uint8(): T.ShortType(),
    pa.uint16(): T.IntegerType(),
    pa.uint32(): T.LongType(),
    pa.uint64(): T.DecimalType(20, 0),
    pa.float32(): T.FloatType(),
    pa.float64(): T.DoubleType(),
    pa.string(): T.StringType(),
    pa.large_string(): T.StringType(),
    pa.binary(): T.BinaryType(),
    pa.large_binary(): T.BinaryType(),
    pa.date32(): T.DateType(),
    pa.date64(): T.DateType(),
    pa.null(): T.NullType(),
}


def spark_type(arrow_type: pa.DataType) -> T.DataType:
    """The Spark type a column of ``arrow_type`` has when Spark reads it from Parquet."""
    simple = _SIMPLE.get(arrow_type)
    if simple is not None:
        return simple
    t = pa.types
    if t.is_dictionary(arrow_type):
        return spark_type(arrow_type.value_type)
    if t.is_fixed_size_binary(arrow_type):
        return T.BinaryType()
    if t.is_decimal(arrow_type) and arrow_type.precision <= 38:
        return T.DecimalType(arrow_type.precision, arrow_type.scale)
    if t.is_timestamp(arrow_type) and arrow_type.unit != "ns":
        return T.TimestampType() if arrow_type.tz else T.TimestampNTZType()
    if t.is_map(arrow_type):
        return T.MapType(spark_type(arrow_type.key_type), spark_type(arrow_type.item_type))
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        return T.ArrayType(spark_type(arrow_type.value_type))
    if t.is_struct(arrow_type):
        return spark_schema(pa.schema(list(arrow_type)))
    raise TypeError(f"Spark cannot read a Parquet column of Arrow type {arrow_type}")


def spark_schema(schema: pa.Schema | T.StructType) -> T.StructType:
    """``schema`` as Spark types (a Spark schema is returned as it is)."""
    if isinstance(schema, T.StructType):
        return schema
    return T.StructType(
        [T.StructField(f.name, spark_type(f.type), f.nullable) for f in schema]
    )
