"""The fingerprint golden rows: every type, names that need quoting, NULLs, NaN and -0.0, and
their pinned fingerprints. tests/test_fingerprint.py checks them on the PySpark it runs on (also
PySpark 3.5, in the smoke tier), tests/test_spark35.py in a PySpark 3.5 process beside 4.x."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from pyspark.sql import types as T

UTC = dt.timezone.utc
#: Every type, names that need quoting or escaping, NULLs, NaN and -0.0: the fingerprints of
#: these rows are pinned below (state written by any earlier diffcdc must keep matching).
GOLDEN_SCHEMA = T.StructType([
    T.StructField("id", T.IntegerType()),
    T.StructField("skip", T.StringType()),
    T.StructField("b", T.ByteType()), T.StructField("s", T.ShortType()),
    T.StructField("i", T.IntegerType()), T.StructField("l", T.LongType()),
    T.StructField("flag", T.BooleanType()),
    T.StructField("f", T.FloatType()), T.StructField("d", T.DoubleType()),
    T.StructField("dec", T.DecimalType(5, 2)), T.StructField("big dec", T.DecimalType(30, 4)),
    T.StructField("it's", T.StringType()), T.StructField("back\\slash", T.StringType()),
    T.StructField("tick`name", T.BinaryType()), T.StructField("dot.é😀", T.DateType()),
    T.StructField("ts", T.TimestampType()), T.StructField("ntz", T.TimestampNTZType()),
    T.StructField("st", T.StructType([
        T.StructField("z", T.IntegerType()), T.StructField("a'b", T.StringType()),
        T.StructField("n", T.NullType()),
    ])),
    T.StructField("arr", T.ArrayType(T.DoubleType())),
    T.StructField("m", T.MapType(T.StringType(), T.ArrayType(T.IntegerType()))),
    T.StructField("dm", T.MapType(T.DecimalType(5, 2), T.StringType())),
    T.StructField("void", T.NullType()),
])
GOLDEN_ROWS = [
    (1, "x", 1, -2, 3, -(2**62), True, 1.5, -0.0, Decimal("1.50"), Decimal("-12345678901234567890.1234"),
     "", "a\\'b\n", b"\x00\xff", dt.date(1969, 12, 31), dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
     dt.datetime(2026, 11, 23, 12, 30), (7, "q", None), [float("nan"), None, 0.0],
     {"k": [1, None], "j": None, "": []}, {Decimal("0.10"): "a", Decimal("-3.00"): None}, None),
    (2, None, None, None, None, None, False, float("nan"), float("inf"), None, None,
     None, "😀", b"", None, None, None, None, [], {}, None, None),
    (3, "y", -128, 32767, -(2**31), 2**63 - 1, None, -0.0, float("-inf"), Decimal("-999.99"),
     Decimal("0.0001"), "it's", None, None, dt.date(9999, 12, 31), dt.datetime(1900, 1, 1, tzinfo=UTC),
     dt.datetime(1, 1, 1), (None, None, None), None, None, None, None),
]
GOLDEN_FINGERPRINTS = [  # computed by the Column-built expressions of diffcdc <= 14b8a26
    (-2116965139842280781, 4223673195495020821),
    (6319282393992488027, -681239635367931940),
    (9188888930224860959, -40307043239605078),
]


def golden_fingerprints(spark: Any) -> list[tuple[int, int]]:
    """The 128-bit fingerprints of :data:`GOLDEN_ROWS` (``skip`` excluded) in ``id`` order."""
    from diffcdc.core.fingerprint import FP, FP_HI, fingerprint_exprs

    df = spark.createDataFrame(GOLDEN_ROWS, GOLDEN_SCHEMA)
    out = df.select("id", *fingerprint_exprs(df.schema, ["id"], ["skip"], 128)).orderBy("id")
    return [(r[FP], r[FP_HI]) for r in out.collect()]
