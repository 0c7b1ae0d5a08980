"""A Parquet snapshot's Spark schema from its footer, read in this process: no Spark job.

Left to itself, ``spark.read.parquet`` runs a Spark job to read one file's footer for the
schema (Spark's ``mergeSchemasInParallel``, even for a single file): on a small table that job
is one of a handful. The footers are read here anyway (:func:`~diffcdc.sources.files.check_parquet_footers`),
so when every data file has the same schema the reader is given it: the schema Spark itself
makes of a footer (``ParquetFileFormat.readSchemaFromFooter`` with the session's settings, on a
classic session), or, on Spark Connect (no JVM here), the Spark schema a Spark writer stored in
the footer. Anything else (files that differ, summary files, a footer Spark's classes cannot
read here) returns None and Spark infers the schema as before.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from diffcdc.spark.per_session import PerSession
from diffcdc.spark.session import is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

#: The footer key under which Spark's writer stores the Spark schema (``ParquetReadSupport``).
SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
#: Summary files Spark reads the schema from before any data file (then it is left to Spark).
SUMMARY_FILES = ("_metadata", "_common_metadata")

_PARQUET = "org.apache.spark.sql.execution.datasources.parquet"
#: Per classic session, while it lives: the classes used (Py4J looks each package step up
#: through every jar). Not keyed by ``id()`` (issue 40: nothing kept for a stopped session).
_CLASSES: PerSession[dict[str, Any]] = PerSession()


def footer_schema(spark: SparkSession, path: str, spark_json: bytes | None) -> StructType | None:
    """The schema Spark reads the Parquet file at ``path`` (as Spark's reader is given it) with,
    or None to leave it to Spark. ``spark_json``: the footer's :data:`SPARK_SCHEMA_KEY` value."""
    from pyspark.sql.types import StructType

    if is_connect(spark):
        if spark_json is None:
            return None
        try:
            return StructType.fromJson(json.loads(spark_json))
        except (ValueError, KeyError, TypeError):  # a schema this client cannot parse
            return None
    from py4j.protocol import Py4JError

    try:
        jvm = spark._jvm  # type: ignore[attr-defined]
        classes = _CLASSES.get_or_make(spark, lambda: _classes(jvm))
        session = spark._jsparkSession  # type: ignore[attr-defined]
        hadoop_path = classes["Path"](path)
        footer = classes["Footer"](hadoop_path, classes["ParquetFileReader"].readFooter(
            session.sessionState().newHadoopConf(), hadoop_path))
        converter = classes["Converter"](session.sessionState().conf())
        text = classes["ParquetFileFormat"].readSchemaFromFooter(footer, converter).json()
    except Py4JError:  # another Spark's classes: Spark infers the schema itself
        return None
    return StructType.fromJson(json.loads(text))


def _classes(jvm: Any) -> dict[str, Any]:
    return {
        "Path": jvm.org.apache.hadoop.fs.Path,
        "Footer": jvm.org.apache.parquet.hadoop.Footer,
        "ParquetFileReader": jvm.org.apache.parquet.hadoop.ParquetFileReader,
        "ParquetFileFormat": getattr(jvm, f"{_PARQUET}.ParquetFileFormat"),
        "Converter": getattr(jvm, f"{_PARQUET}.ParquetToSparkSchemaConverter"),
    }
