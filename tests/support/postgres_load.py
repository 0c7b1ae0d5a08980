"""Shared code of the PostgreSQL loading tests (tests/test_postgres_load.py) and their child
processes: rows of awkward values and types, what PostgreSQL must hold of them (read back with
psql's text output, an independent reader), and a Spark Connect client without Java that runs
``copy_into`` (``python -m tests.support.postgres_load JOB.json``) and prints the rows loaded
as one JSON line.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import sys
from typing import Any

from pyspark.sql import types as T

UTC = dt.timezone.utc

SCHEMA = T.StructType([
    T.StructField("k", T.IntegerType()),
    T.StructField('we "ird" name.', T.StringType()),
    T.StructField("d", T.DoubleType()),
    T.StructField("f", T.FloatType()),
    T.StructField("dec", T.DecimalType(38, 10)),
    T.StructField("ts", T.TimestampType()),
    T.StructField("ntz", T.TimestampNTZType()),
    T.StructField("day", T.DateType()),
    T.StructField("bin", T.BinaryType()),
    T.StructField("arr", T.ArrayType(T.StringType())),
    T.StructField("st", T.StructType([T.StructField("a.b", T.LongType()),
                                      T.StructField("x y", T.ArrayType(T.DoubleType()))])),
    T.StructField("m", T.MapType(T.IntegerType(), T.StringType())),
    T.StructField("ragged", T.ArrayType(T.ArrayType(T.IntegerType()))),
    T.StructField("b", T.BooleanType()),
    T.StructField("s", T.ShortType()),
])

ROWS: list[tuple[Any, ...]] = [
    (1, "", float("nan"), float("-inf"),
     decimal.Decimal("-1234567890123456789012345678.0123456789"),
     dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
     dt.date(1, 1, 1), b"\x00\x01\xff", ['a"b', None, "", "NULL", "x\\y", "{,}"],
     {"a.b": 5, "x y": [float("nan"), 1e308]}, {1: "one", 2: None}, [[1, 2], [3], None, []],
     True, -32768),
    (2, None, -0.0, 0.1, None, None, None, None, None, None, None, None, None, None, None),
    (3, 'a\nb,c\r\n"q"\\N', 5e-324, 3.4028235e38, decimal.Decimal("0"),
     dt.datetime(2020, 5, 6, 7, 8, 9, 123456, tzinfo=UTC), dt.datetime(2020, 5, 6),
     dt.date(2024, 2, 29), b"", [], {"a.b": None, "x y": None}, {}, [], False, 0),
]

#: Each row as PostgreSQL prints it (``::text``, NULL as ``<null>``), column by column: the
#: values it must hold, written out by hand (jsonb prints its keys shortest first, a number
#: in full; row 3's date is the day before 0001-01-01, made by :func:`frame_of`).
EXPECTED = {
    1: ["1", "", "NaN", "-Infinity", "-1234567890123456789012345678.0123456789",
        "0001-01-01 00:00:00+00", "9999-12-31 23:59:59.999999", "0001-01-01", "\\x0001ff",
        '{"a\\"b",NULL,"","NULL","x\\\\y","{,}"}',
        '{"a.b": 5, "x y": ["NaN", 1' + "0" * 308 + ']}',
        '[[1, "one"], [2, null]]', "[[1, 2], [3], null, []]", "true", "-32768"],
    2: ["2", "<null>", "-0", "0.1", *["<null>"] * 11],
    3: ["3", 'a\nb,c\r\n"q"\\N', "5e-324", "3.4028235e+38", "0.0000000000",
        "2020-05-06 07:08:09.123456+00", "2020-05-06 00:00:00", "0001-12-31 BC", "\\x", "{}",
        '{"a.b": null, "x y": null}', "[]", "[]", "false", "0"],
}


def frame_of(spark: Any) -> Any:
    """``ROWS`` as a DataFrame of ``SCHEMA``, row 3's date moved to 1 BC (Python has none)."""
    from pyspark.sql import functions as F

    frame = spark.createDataFrame(ROWS, SCHEMA)
    return frame.withColumn("day", F.when(F.col("k") == 3, F.expr(
        "date_add(DATE'0001-01-01', -1)")).otherwise(F.col("day")))


def read_text(server: Any, table: str) -> dict[int, list[str]]:
    """The table's rows as psql's text of each column (``\\pset null <null>``), by ``k``."""
    from tests.support.postgres_server import PostgresServer

    assert isinstance(server, PostgresServer)
    columns = ", ".join(f'"{f.name.replace(chr(34), chr(34) * 2)}"::text' for f in SCHEMA.fields)
    query = (f"SET TimeZone = 'UTC'; SELECT json_agg(json_build_array({columns}) ORDER BY k)::text "
             f"FROM {table}")
    rows = json.loads(server.sql(query) or "[]")
    return {int(r[0]): ["<null>" if v is None else v for v in r] for r in rows}


def main(path: str) -> int:
    """A Spark Connect client: stage ``ROWS`` through the server and ``copy_into`` the job's
    two tables (from the staged files, and from the DataFrame)."""
    from pyspark.sql import SparkSession

    from diffcdc.sinks.postgres.connection import PgConnection
    from diffcdc.sinks.postgres.copy import copy_into

    with open(path, encoding="utf-8") as f:
        job = json.load(f)
    spark = SparkSession.builder.remote(job["remote"]).getOrCreate()
    conn = PgConnection(**job["conn"])
    frame = frame_of(spark)
    frame.repartition(2).write.parquet(job["folder"])
    loaded = [copy_into(spark, job["folder"], conn, ("public", job["tables"][0]),
                        SCHEMA.fieldNames(), "sink pg"),
              copy_into(spark, frame.repartition(2), conn, ("public", job["tables"][1]),
                        SCHEMA.fieldNames(), "sink pg")]
    print(json.dumps({"loaded": loaded, "spark": spark.version}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
