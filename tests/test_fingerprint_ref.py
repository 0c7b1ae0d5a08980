"""The pure-Python fingerprint equals Spark's, bit for bit, on random schemas and rows.

Each example is a random Arrow schema (every type Spark reads from Parquet, nested, NULLs
anywhere) and a batch of rows, written to Parquet. Spark reads the file and computes the
fingerprint expressions (one job per example); the reference reads the same file with pyarrow
(``to_pylist()``, as a checker does) and must produce the same 64- and 128-bit values.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffcdc.core.arrow_types import spark_schema
from diffcdc.core.fingerprint import FP, FP_HI, fingerprint_exprs
from diffcdc.core.fingerprint_ref import RowFingerprinter, fingerprint_ref, java_bytes
from diffcdc.state.check_read import arrow_values, snapshot_batches
from tests.support.hypothesis_profiles import examples

UTC = dt.timezone.utc
ATOMIC = [
    pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(),
    pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
    pa.float32(), pa.float64(), pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
    pa.binary(3), pa.date32(),
    pa.timestamp("us", tz="UTC"), pa.timestamp("us", tz="Europe/Paris"), pa.timestamp("ms"),
    pa.timestamp("us"),
]
MAP_KEYS = [pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.date32(), pa.bool_(), pa.decimal128(5, 2)]
NESTED_VECTORIZED = "spark.sql.parquet.enableNestedColumnVectorizedReader"
NAMES = st.text(alphabet="abAB_é. 9'`\\😀", min_size=1, max_size=5)


def decimal_types() -> st.SearchStrategy[pa.DataType]:
    return st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(lambda s: pa.decimal128(p, s)))


def fields(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[list[pa.Field]]:
    pairs = st.lists(st.tuples(NAMES, children), min_size=1, max_size=4, unique_by=lambda p: p[0].lower())
    return pairs.map(lambda ps: [pa.field(n, t) for n, t in ps])


def arrow_types() -> st.SearchStrategy[pa.DataType]:
    atomic = st.sampled_from(ATOMIC) | decimal_types()
    return st.recursive(
        atomic,
        lambda children: st.one_of(
            children.map(pa.list_),
            st.tuples(st.sampled_from(MAP_KEYS), children).map(lambda kv: pa.map_(*kv)),
            fields(children).map(pa.struct),
        ),
        max_leaves=5,
    )


def present(t: pa.DataType) -> st.SearchStrategy[Any]:
    """Non-NULL values of ``t`` (edge values included by the strategies)."""
    if t == pa.bool_():
        return st.booleans()
    if pa.types.is_integer(t):
        bits = t.bit_width
        if pa.types.is_unsigned_integer(t):
            return st.integers(0, 2**bits - 1)
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if pa.types.is_floating(t):
        return st.floats(width=t.bit_width)
    if pa.types.is_decimal(t):
        limit = 10**t.precision - 1
        return st.integers(-limit, limit).map(lambda u: Decimal(f"{u}E-{t.scale}"))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return st.text(max_size=6)
    if pa.types.is_fixed_size_binary(t):
        return st.binary(min_size=t.byte_width, max_size=t.byte_width)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return st.binary(max_size=6)
    if pa.types.is_date(t):
        return st.dates()
    if pa.types.is_timestamp(t):
        if t.tz is None:
            moments = st.datetimes()
        else:
            moments = st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9000, 1, 1), timezones=st.just(UTC))
        step = 1000 if t.unit == "ms" else 1
        return moments.map(lambda m: m.replace(microsecond=m.microsecond // step * step))
    if pa.types.is_list(t):
        return st.lists(values(t.value_type), max_size=4)
    if pa.types.is_map(t):
        return st.lists(st.tuples(present(t.key_type), values(t.item_type)), max_size=4)
    if pa.types.is_struct(t):
        return st.fixed_dictionaries({f.name: values(f.type) for f in t})
    raise AssertionError(t)


def values(t: pa.DataType) -> st.SearchStrategy[Any]:
    return st.none() | present(t)


@st.composite
def tables(draw: st.DrawFn) -> tuple[pa.Table, list[str], list[str]]:
    """A table with an ``id`` key (sometimes with a second key column) and random columns, plus
    the key and exclude lists."""
    columns = draw(fields(arrow_types()).filter(lambda fs: all(f.name.lower() != "id" for f in fs)))
    schema = pa.schema([pa.field("id", pa.int64()), *columns])
    rows = draw(st.lists(st.fixed_dictionaries({f.name: values(f.type) for f in columns}), min_size=1, max_size=60))
    table = pa.Table.from_pylist([{"id": i, **r} for i, r in enumerate(rows)], schema=schema)
    names = [f.name for f in columns]
    exclude = draw(st.lists(st.sampled_from(names), max_size=1).map(lambda xs: [x.upper() for x in xs]))
    others = [n for n in names if n.upper() not in exclude]
    second = draw(st.lists(st.sampled_from(others), max_size=1)) if others else []
    return table, [draw(st.sampled_from(["id", "ID"])), *second], exclude


def spark_fingerprints(spark, path: str, keys: list[str], exclude: list[str]) -> dict[int, tuple[int, int]]:
    # Spark 4.3's vectorized reader of nested Parquet columns fails on arrays with NULL elements
    # when a projection walks them (ArrayIndexOutOfBoundsException: list<bigint> with off-heap
    # vectors, diffcdc's default; list<list<list<bigint>>> with either). The reference is
    # compared with the row-based nested reader, which decodes them correctly.
    previous = spark.conf.get(NESTED_VECTORIZED)
    spark.conf.set(NESTED_VECTORIZED, "false")
    try:
        df = spark.read.parquet(path)
        out = df.select("id", *fingerprint_exprs(df.schema, keys, exclude, 128)).collect()
    finally:
        spark.conf.set(NESTED_VECTORIZED, previous)
    return {r["id"]: (r[FP], r[FP_HI]) for r in out}


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(data=tables())
def test_reference_equals_spark_bit_for_bit(spark, data):
    table, keys, exclude = data
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "snapshot.parquet")
        pq.write_table(table, path)
        expected = spark_fingerprints(spark, path, keys, exclude)
        assert spark.read.parquet(path).schema.simpleString() == spark_schema(table.schema).simpleString()
        back = pq.read_table(path)
    wide = RowFingerprinter(back.schema, keys, exclude, 128)
    narrow = RowFingerprinter(back.schema, keys, exclude, 64)
    for row in back.to_pylist():
        lo, hi = expected[row["id"]]
        assert (wide(row), narrow(row)) == ((lo, hi), (lo,)), row
    # the checker's fast path: timestamps, dates and decimals pre-converted column-wise
    fast = zip(*[arrow_values(back.column(c).combine_chunks()) for c in ["id", *wide.columns]])
    assert {v[0]: wide.from_values(v[1:]) for v in fast} == expected


def test_edge_values_and_every_input_form(spark, tmp_path):
    schema = pa.schema([
        ("id", pa.int64()), ("u64", pa.uint64()), ("f", pa.float32()), ("d", pa.float64()),
        ("big", pa.decimal128(38, 5)), ("s", pa.string()), ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="Europe/Paris")), ("m", pa.map_(pa.float64(), pa.string())),
        ("st", pa.struct([("z", pa.int32()), ("a", pa.list_(pa.float64()))])),
    ])
    rows = [
        {"id": 1, "u64": 2**64 - 1, "f": -0.0, "d": float("nan"), "big": Decimal("-128"), "s": "",
         "day": dt.date(1, 1, 1), "ts": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
         "m": [(float("nan"), "n"), (-0.0, "z"), (-1.0, None)], "st": {"z": None, "a": [None, -0.0]}},
        {"id": 2, "big": Decimal("-0.00128"), "m": [], "st": {"z": 1, "a": []}},
        {"id": 3},
    ]
    path = str(tmp_path / "edge.parquet")
    pq.write_table(pa.Table.from_pylist(rows, schema), path)
    expected = spark_fingerprints(spark, path, ["id"], [])
    spark_types = spark.read.parquet(path).schema
    for row in pq.read_table(path).to_pylist():
        assert fingerprint_ref(row, schema, ["id"], [], 128) == expected[row["id"]]
        # a Spark schema works too, and maps may be given as dicts
        as_dict = {**row, "m": dict(row["m"]) if row["m"] is not None else None}
        assert fingerprint_ref(as_dict, spark_types, ["id"], [], 64) == expected[row["id"]][:1]
    assert expected[3] == (42, fingerprint_ref({}, schema, ["id"], [], 128)[1])  # no value: the seed


def test_legacy_int96_timestamps_read_as_spark_reads_them(spark, tmp_path):
    moments = [dt.datetime(1900, 1, 1, tzinfo=UTC), dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC), None]
    table = pa.table({"id": [1, 2, 3], "ts": pa.array(moments, pa.timestamp("us", tz="UTC"))})
    path = str(tmp_path / "int96.parquet")
    pq.write_table(table, path, use_deprecated_int96_timestamps=True)
    expected = spark_fingerprints(spark, path, ["id"], [])
    (batch,) = snapshot_batches(path, "parquet", ["id", "ts"])
    assert batch.schema.field("ts").type == pa.timestamp("us")
    for row in batch.to_pylist():
        assert fingerprint_ref(row, batch.schema, ["id"], [], 128) == expected[row["id"]]


@pytest.mark.parametrize("arrow_type", [pa.decimal128(18, 3), pa.decimal128(38, 10), pa.timestamp("ms"), pa.date32()])
def test_fast_column_values_hash_like_python_objects_in_sliced_arrays(arrow_type):
    if pa.types.is_decimal(arrow_type):
        limit = 10**arrow_type.precision - 1
        items = [Decimal(f"{u}E-{arrow_type.scale}") for u in (limit, -limit, 0, -1, 2**63 % limit)]
    elif pa.types.is_date(arrow_type):
        items = [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1)]
    else:
        items = [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999000), dt.datetime(1969, 12, 31, 23)]
    column = pa.array([None, *items, None, *items], arrow_type).slice(2)
    hasher = RowFingerprinter(pa.schema([("id", pa.int8()), ("v", arrow_type)]), ["id"])
    fast = [hasher.from_values([v]) for v in arrow_values(column)]
    assert fast == [hasher.from_values([v]) for v in column.to_pylist()]
    assert arrow_values(column)[len(items) - 1] is None


def test_java_big_integer_bytes():
    assert [java_bytes(v).hex() for v in (0, -1, 127, 128, -128, -129, 255, 2**63)] == [
        "00", "ff", "7f", "0080", "80", "ff7f", "00ff", "008000000000000000",
    ]
