"""The row fingerprint: null safety, order independence and per-type canonical forms."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from diffcdc.core.fingerprint import FP, FP_HI, fingerprint_exprs
from tests.support.fingerprint_golden import GOLDEN_FINGERPRINTS, GOLDEN_ROWS, GOLDEN_SCHEMA


def fps(spark, rows, schema, keys=("id",), exclude=(), bits=64):
    df = spark.createDataFrame(rows, schema)
    out = df.select("id", *fingerprint_exprs(df.schema, keys, exclude, bits)).orderBy("id").collect()
    return [r[FP] if bits == 64 else (r[FP], r[FP_HI]) for r in out]


def test_null_swap_and_null_vs_empty_string_differ(spark):
    a, b, c, d = fps(
        spark,
        [(1, None, "a"), (2, "a", None), (3, "", None), (4, None, None)],
        "id int, x string, y string",
    )
    assert a != b  # (NULL, 'a') vs ('a', NULL)
    assert b != c  # 'a' vs ''
    assert c != d  # '' vs NULL


def test_column_order_does_not_matter(spark):
    one = fps(spark, [(1, "a", 2)], "id int, x string, n int")
    two = spark.createDataFrame([(2, "a", 1)], "n int, x string, id int")
    other = two.select("id", *fingerprint_exprs(two.schema, ["id"])).collect()[0][FP]
    assert one == [other]


def test_added_all_null_column_changes_nothing(spark):
    before = fps(spark, [(1, "a")], "id int, x string")
    after = fps(spark, [(1, "a", None)], "id int, x string, extra double")
    untyped = spark.createDataFrame([(1, "a")], "id int, x string").selectExpr("id", "x", "null as z")
    void = untyped.select("id", *fingerprint_exprs(untyped.schema, ["id"])).collect()[0][FP]
    assert before == after == [void]


def test_excluded_and_key_columns_do_not_count(spark):
    a, b = fps(
        spark,
        [(1, "a", dt.datetime(2026, 1, 1)), (2, "a", dt.datetime(2026, 1, 2))],
        "id int, x string, audit timestamp",
        exclude=["AUDIT"],
    )
    assert a == b


@pytest.mark.parametrize(
    "schema, left, right",
    [
        ("d double", 0.0, -0.0),
        ("d double", float("nan"), float("nan")),
        ("d float", float("nan"), float("nan")),
        ("n int", 7, 7),
    ],
)
def test_equal_values_hash_equal(spark, schema, left, right):
    a, b = fps(spark, [(1, left), (2, right)], f"id int, {schema}")
    assert a == b


def test_integer_widening_and_decimal_values(spark):
    as_int = fps(spark, [(1, 5)], "id int, n int")
    as_long = fps(spark, [(1, 5)], "id int, n bigint")
    assert as_int == as_long
    same = fps(spark, [(1, Decimal("1.5")), (2, Decimal("1.50"))], "id int, n decimal(10,2)")
    assert same[0] == same[1]
    tiny = fps(spark, [(1, Decimal("0.0000001")), (2, Decimal("0.0000010"))], "id int, n decimal(20,7)")
    assert tiny[0] != tiny[1]
    wide = fps(spark, [(1, Decimal("12345678901234567890.5")), (2, Decimal("12345678901234567890.4"))],
               "id int, n decimal(38,1)")
    assert wide[0] != wide[1]


def test_distinct_values_hash_differently(spark):
    rows = [
        (1, 0.0, Decimal("100.00"), dt.date(2026, 1, 1), b"\x00", True),
        (2, 1e-300, Decimal("10.00"), dt.date(2026, 1, 2), b"\x00\x00", False),
        (3, float("inf"), Decimal("1.00"), dt.date(1969, 12, 31), b"", None),
    ]
    out = fps(spark, rows, "id int, d double, n decimal(10,2), day date, b binary, f boolean")
    assert len(set(out)) == 3


def test_timestamps_are_utc_instants(spark):
    utc = dt.timezone.utc
    plus2 = dt.timezone(dt.timedelta(hours=2))
    a, b, c = fps(
        spark,
        [
            (1, dt.datetime(2026, 1, 1, 12, tzinfo=utc)),
            (2, dt.datetime(2026, 1, 1, 14, tzinfo=plus2)),
            (3, dt.datetime(2026, 1, 1, 12, 0, 0, 1, tzinfo=utc)),
        ],
        "id int, t timestamp",
    )
    assert a == b != c


def test_nested_types_are_null_safe_and_ordered(spark):
    schema = T.StructType([
        T.StructField("id", T.IntegerType()),
        T.StructField("arr", T.ArrayType(T.StringType())),
        T.StructField("m", T.MapType(T.StringType(), T.IntegerType())),
        T.StructField("st", T.StructType([T.StructField("a", T.StringType()), T.StructField("b", T.StringType())])),
    ])
    rows = [
        (1, [None, "a"], {"x": 1, "y": 2}, ("a", None)),
        (2, ["a", None], {"y": 2, "x": 1}, (None, "a")),
        (3, [], {"x": 1, "y": None}, None),
        (4, None, {"x": 1}, ("a", None)),
    ]
    a, b, c, d = fps(spark, rows, schema)
    assert len({a, b, c, d}) == 4
    # the same map in another entry order is the same value
    one = fps(spark, [(1, None, {"x": 1, "y": 2}, None)], schema)
    two = fps(spark, [(1, None, {"y": 2, "x": 1}, None)], schema)
    assert one == two
    # [] and NULL differ; NULL element and missing element differ
    e, f = fps(spark, [(1, [], None, None), (2, None, None, None)], schema)
    assert e != f


def test_128_bit_mode_gives_two_independent_columns(spark):
    out = fps(spark, [(1, "a"), (2, "b")], "id int, x string", bits=128)
    assert out[0] != out[1]
    assert out[0][0] != out[0][1]
    assert [lo for lo, _ in out] == fps(spark, [(1, "a"), (2, "b")], "id int, x string")


def test_fingerprint_uses_no_python_udf(spark):
    df = spark.createDataFrame([(1, [1], {"a": 1}, (1, "x"))], "id int, a array<int>, m map<string,int>, s struct<p:int,q:string>")
    plan = df.select(*fingerprint_exprs(df.schema, ["id"], bits=128))._jdf.queryExecution().executedPlan().toString()
    assert "Python" not in plan and "BatchEval" not in plan and "ArrowEval" not in plan


@pytest.mark.spark35_smoke  # fingerprints are the same on every Spark version diffcdc runs on
@pytest.mark.parametrize("conf", [
    {},
    {"spark.sql.ansi.enforceReservedKeywords": "true"},
    {"spark.sql.parser.escapedStringLiterals": "true"},
    {"spark.sql.ansi.enabled": "false"},
], ids=["default", "reserved-keywords", "escaped-literals", "ansi-off"])
def test_fingerprints_of_every_type_are_pinned(spark, conf):
    """The fingerprint is a data contract: any change to these values is a new
    ``FINGERPRINT_VERSION``, never an edit of this list. The expressions are SQL text, so the
    parser settings a user's session may have must not change them either."""
    try:
        for key, value in conf.items():
            spark.conf.set(key, value)
        assert fps(spark, GOLDEN_ROWS, GOLDEN_SCHEMA, exclude=("skip",), bits=128) == GOLDEN_FINGERPRINTS
    finally:
        for key in conf:
            spark.conf.unset(key)
