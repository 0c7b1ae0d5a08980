"""diffcdc/spark/compat.py: the PySpark 3.5 paths give what 4.x's own calls give.

On 4.x these run the 3.5 path beside the native one; in the smoke tier they run on 3.5 itself.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from diffcdc.spark import compat as spark_compat
from diffcdc.spark.compat import _holds_interval, error_text, to_arrow


class _Throwable:
    def __init__(self, text: str, cause: _Throwable | None = None, gone: bool = False):
        self.text, self.cause, self.gone = text, cause, gone

    def getCause(self):  # the Java methods' names
        if self.gone:
            raise ConnectionError("the JVM is gone")
        return self.cause

    def toString(self):
        return self.text


class _Py4JError(Exception):
    def __init__(self, text: str, java: _Throwable):
        super().__init__(text)
        self.java_exception = java


def test_error_text_gives_a_failed_jobs_innermost_cause():
    root = _Throwable("java.lang.RuntimeException: boom")
    job = _Throwable("org.apache.spark.SparkException: Job aborted", _Throwable("x: task", root))
    assert error_text(_Py4JError("An error occurred while calling o66.parquet.", job)) == (
        "java.lang.RuntimeException: boom")
    # PySpark's own exceptions, and a JVM that is gone: the exception's own text
    assert error_text(ValueError("[USER_RAISED_EXCEPTION] boom")) == "[USER_RAISED_EXCEPTION] boom"
    gone = _Py4JError("An error occurred while calling o1.x.", _Throwable("t", gone=True))
    assert error_text(gone) == "An error occurred while calling o1.x."


def test_calendar_intervals_are_found_at_any_depth_of_a_schemas_json():
    assert _holds_interval("interval")
    assert not _holds_interval("long") and not _holds_interval("interval day to second")
    nested = {"type": "array", "containsNull": True, "elementType": {
        "type": "struct", "fields": [{"name": "i", "type": "interval", "nullable": True,
                                      "metadata": {}}]}}
    assert _holds_interval(nested)
    assert _holds_interval({"type": "map", "keyType": "string", "valueType": nested,
                            "valueContainsNull": True})
    assert not _holds_interval({"type": "struct", "fields": []})


@pytest.mark.spark35_smoke
def test_to_arrow_gives_every_row_and_an_empty_frames_columns(spark):
    """4.x: ``DataFrame.toArrow()``; 3.5: the batches of ``_collect_as_arrow`` (run there by the
    smoke tier, where every contract run's verify compares through it too)."""
    import pyarrow as pa

    utc = dt.timezone.utc
    df = spark.createDataFrame(
        [(1, "a", Decimal("1.50"), dt.datetime(2026, 1, 1, 12, tzinfo=utc), dt.date(2026, 1, 2),
          [1, None], {"k": 2}, (3, "s"), b"\x00"),
         (2, None, None, None, None, None, None, None, None)],
        "id long, s string, d decimal(10,2), ts timestamp, day date, a array<int>, "
        "m map<string,int>, st struct<x:int,y:string>, b binary",
    ).orderBy("id")
    table = to_arrow(df)
    assert table.column_names == df.columns and table.schema.field("ts").type == pa.timestamp("us", "UTC")
    assert table.to_pylist() == [
        {"id": 1, "s": "a", "d": Decimal("1.50"), "ts": dt.datetime(2026, 1, 1, 12, tzinfo=utc),
         "day": dt.date(2026, 1, 2), "a": [1, None], "m": [("k", 2)], "st": {"x": 3, "y": "s"},
         "b": b"\x00"},
        {"id": 2, **{c: None for c in df.columns[1:]}},
    ]
    empty = to_arrow(df.where("id < 0"))
    assert empty.num_rows == 0 and empty.schema.equals(table.schema)
    variant = spark_compat.VARIANT_TYPE  # 4.x: a nested type; 3.5: none
    assert variant is None or variant in spark_compat.NESTED_TYPES
