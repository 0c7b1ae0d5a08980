"""Rows with awkward values for every normalizer, fingerprinted on any PySpark (the 3.5
environment runs it in a subprocess: tests/test_normalize_spark35.py) and by the reference."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pyspark.sql import types as T

SCHEMA = T.StructType([
    T.StructField("id", T.IntegerType()), T.StructField("s", T.StringType()),
    T.StructField("c", T.StringType()), T.StructField("j", T.StringType()),
    T.StructField("d", T.DoubleType()), T.StructField("f", T.FloatType()),
    T.StructField("dec", T.DecimalType(12, 4)), T.StructField("wide", T.DecimalType(30, 6)),
])
RULES = {"s": ["trim", "empty_as_null"], "c": ["rtrim", "casefold"], "j": ["json"],
         "d": ["round:2"], "f": ["round:1"], "dec": ["round:2"], "wide": ["round:0"]}
ROWS = [
    # (float values exact in float32: the reference is given what Spark holds)
    (1, " \t a \r\n", "Straße  ", '{ "b": [1, 2.50], "a": "é" }', 2.675, 0.25, Decimal("1.2350"),
     Decimal("-2.500000")),
    (2, "   ", "ΟΔΟΣ", "{bad", 1.005, -0.375, Decimal("-1.2350"), Decimal("12345678901234567890.5")),
    (3, "", "İI", " [1, 2] ", float("nan"), float("inf"), None, Decimal("0.499999")),
    (4, None, "ǅ ﬁ Ω K", "1e400", -0.0, None, Decimal("99999999.9999"), None),
    (5, "x", "ᲐᎠＡ", '{"a":1,"a":2}', 4503599627370495.5, 2.0**80, Decimal("0.0050"),
     Decimal("-0.500000")),
]


def normalized_fingerprints(spark: Any) -> list[tuple[int, int]]:
    """The 128-bit fingerprints of :data:`ROWS` under :data:`RULES`, in ``id`` order."""
    from diffcdc.core.fingerprint import FP, FP_HI, fingerprint_exprs
    from diffcdc.core.normalize import Normalizers, register_functions

    normalize = Normalizers.parse(RULES)
    register_functions(spark, normalize)
    df = spark.createDataFrame(ROWS, SCHEMA)
    out = df.select("id", *fingerprint_exprs(df.schema, ["id"], [], 128, normalize)).orderBy("id")
    return [(r[FP], r[FP_HI]) for r in out.collect()]


def reference_fingerprints() -> list[tuple[int, ...]]:
    """The same, by the reference (:mod:`diffcdc.core.fingerprint_ref`)."""
    from diffcdc.core.fingerprint_ref import RowFingerprinter
    from diffcdc.core.normalize import Normalizers

    fingerprint = RowFingerprinter(SCHEMA, ["id"], (), 128, Normalizers.parse(RULES))
    return [fingerprint(dict(zip(SCHEMA.names, row))) for row in ROWS]
