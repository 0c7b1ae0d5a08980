"""Paths as Spark takes them: escaped for its readers' glob patterns, absolute for a Spark
Connect server, and a Parquet folder Spark just wrote read back with its schema."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from diffcdc.spark.session import is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

_GLOB_CHARS = re.compile(r"([\\\[\]{}*?])")


def literal_path(path: str) -> str:
    """``path`` escaped for Spark's readers, which expand Hadoop glob patterns in paths.

    Without it a snapshot named ``000[2].parquet`` is read as ``0002.parquet`` and a name with
    ``{a,b}`` is "not found". Writers take paths literally and need no escaping.
    """
    return _GLOB_CHARS.sub(r"\\\1", path)


def spark_path(spark: SparkSession, path: str) -> str:
    """``path`` as Spark's driver must be given it. A Spark Connect server resolves a relative
    path against its own working folder, not this process's: a relative local path goes to it
    absolute (a classic driver is this process, and a relative path may mean the default file
    system's home folder there, so it is left as it is)."""
    from diffcdc.storage.registry import scheme

    if is_connect(spark) and not scheme(path) and not os.path.isabs(path):
        return os.path.abspath(path)
    return path


def read_written(spark: SparkSession, path: str, schema: StructType) -> DataFrame:
    """The Parquet folder ``path`` that a frame of ``schema`` was just written to, read back.

    Spark reads the schema a writer gives as nullable all through, so it is given here as such:
    left to itself, Spark runs a job to read a footer for it (~40-80 ms of a small table's run).
    """
    return spark.read.schema(_nullable(schema)).parquet(literal_path(spark_path(spark, path)))


def _nullable(data_type: DataType) -> Any:
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, StructType):
        return StructType(
            [StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in data_type.fields]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type

