"""Normalizers in Spark equal the reference's, bit for bit, on awkward values (issue 41.4).

Each example is a batch of rows with a string, a double, a float and two decimal columns
(awkward values: blanks of every kind, case pairs Spark's ``lower()`` and Python's
``casefold()`` disagree on, JSON texts and near-JSON, NaN, -0.0, ±inf, halves, huge values)
and random rules on each. Spark reads the Parquet file and computes the fingerprint with the
rules (one job per example); the reference reads the same file with pyarrow, as a checker does
(also through the checker's fast path, decimals as bytes), and must give the same values.
"""

from __future__ import annotations

import math
import os
import tempfile
from decimal import Context, Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffcdc.core.fingerprint import FP, FP_HI, fingerprint_exprs
from diffcdc.core.fingerprint_ref import RowFingerprinter
from diffcdc.core.normalize import Normalizers, register_functions
from diffcdc.state.check_read import arrow_values
from tests.support.hypothesis_profiles import examples

#: Characters whose lower case is awkward: ß (no single lower), İ (two code points), final
#: sigma, Kelvin and Ohm signs, title-case digraphs, Georgian Mtavruli, Cherokee, fullwidth.
CASES = "AaZzßẞİIıΣσςΩΩKKǅǄǆᲐაᎠꭰＡａÅåﬁ"
BLANKS = " \t\n\r\f\v\u00a0\u2003\u3000"
JSONS = ['{"b": 1, "a": [1, 2.50, {"d": null, "c": "é"}]}', '{"a":[1,2.5,{"c":"é","d":null}],"b":1}',
         "[1, 2]", " [1,2] ", "1", "1.0", "1e0", '"x"', "{bad", "", "null", '{"a": 1, "a": 2}',
         '"\\ud800"', "NaN", "-0", "1e400", '{"ü": "\\u00fc"}']
STRINGS = st.one_of(
    st.text(alphabet=CASES + BLANKS + "xy{}\":,", max_size=8),
    st.sampled_from(JSONS),
    st.builds(lambda a, s, b: a + s + b, st.text(alphabet=BLANKS, max_size=3),
              st.sampled_from(JSONS), st.text(alphabet=BLANKS, max_size=3)),
)
DOUBLES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0.5, -0.5, 1.005, 2.675, 1.015, 0.125, 4503599627370495.5,
                     2.0**52, 1e15 + 0.5, 1e-7, 123456.785, math.nan, -math.inf]),
    st.integers(-10**6, 10**6).map(lambda i: i / 1000 + 0.0005),
)
FLOATS = DOUBLES.map(lambda x: x if not math.isfinite(x) else
                     float(pa.scalar(x, pa.float32()).as_py()) if abs(x) < 3e38 else math.inf)
DECIMAL = pa.decimal128(12, 4)
WIDE = pa.decimal128(30, 6)
STRING_RULES = st.lists(st.sampled_from(["json", "trim", "rtrim", "casefold", "empty_as_null"]),
                        unique=True, max_size=5)
SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("d", pa.float64()),
                    ("f", pa.float32()), ("dec", DECIMAL), ("wide", WIDE)])


def _decimals(digits: int, scale: int) -> st.SearchStrategy[Decimal]:
    bound = 10**digits - 1
    exact = Context(prec=60)

    def of(unscaled: int) -> Decimal:
        return Decimal(unscaled).scaleb(-scale, exact)

    halves = [5 * 10 ** (scale - 1) * sign * odd for sign in (1, -1) for odd in (1, 3, 5)]
    return st.one_of(st.integers(-bound, bound).map(of),
                     st.sampled_from([bound, -bound, *halves]).map(of))


@st.composite
def batches(draw):
    rows = draw(st.lists(st.fixed_dictionaries({
        "s": st.none() | STRINGS, "d": st.none() | DOUBLES, "f": st.none() | FLOATS,
        "dec": st.none() | _decimals(12, 4), "wide": st.none() | _decimals(30, 6),
    }), min_size=1, max_size=40))
    table = pa.Table.from_pylist([{"id": i, **r} for i, r in enumerate(rows)], schema=SCHEMA)
    spec = {}
    if rules := draw(STRING_RULES):
        spec["S"] = rules
    for column, top in (("d", 8), ("f", 3), ("dec", 5), ("wide", 8)):
        if draw(st.booleans()):
            spec[column] = [f"round:{draw(st.integers(0, top))}"]
    return table, Normalizers.parse(spec)


def _spark(spark, path: str, normalize: Normalizers) -> dict[int, tuple[int, int]]:
    register_functions(spark, normalize)
    df = spark.read.parquet(path)
    out = df.select("id", *fingerprint_exprs(df.schema, ["id"], [], 128, normalize)).collect()
    return {r["id"]: (r[FP], r[FP_HI]) for r in out}


@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=batches())
def test_normalized_fingerprints_equal_the_reference(spark, data):
    table, normalize = data
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "snapshot.parquet")
        pq.write_table(table, path)
        expected = _spark(spark, path, normalize)
        back = pq.read_table(path)
    reference = RowFingerprinter(back.schema, ["id"], (), 128, normalize)
    for row in back.to_pylist():
        assert reference(row) == expected[row["id"]], (row, normalize.describe())
    fast = zip(*[arrow_values(back.column(c).combine_chunks()) for c in ["id", *reference.columns]])
    assert {v[0]: reference.from_values(v[1:]) for v in fast} == expected


@pytest.mark.parametrize("rules, same, different", [
    (["rtrim"], ["AB", "AB  ", "AB "], ["AB\t", " AB", "ab"]),
    (["trim", "casefold"], ["Straße", " STRAßE\t", "straße\r\n"], ["STRASSE", "strasse"]),
    (["casefold"], ["ΟΔΟΣ", "οδος", "ΟΔΟς"], ["οδοσ"]),
    (["json"], ['{"b":1,"a":2}', ' { "a" : 2 , "b" : 1 } '], ['{"a":2}', '{"A":2,"b":1}']),
    (["trim", "empty_as_null"], [None, "", "   "], ["x"]),
])
def test_values_that_differ_only_by_what_the_rules_remove_hash_alike(spark, rules, same,
                                                                     different):
    normalize = Normalizers.parse({"v": rules})
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    values = [*same, *different]
    table = pa.Table.from_pylist([{"id": i, "v": v} for i, v in enumerate(values)], schema=schema)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "snapshot.parquet")
        pq.write_table(table, path)
        fps = _spark(spark, path, normalize)
    hashed = [fps[i] for i in range(len(values))]
    assert len(set(hashed[: len(same)])) == 1, rules
    assert all(h != hashed[0] for h in hashed[len(same):]), rules
