"""docs/history.md's worked example, "a dbt-style history", run as written: its config, its
three snapshots, the history table it shows and its as-of query."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from diffcdc.config import TableConfig
from diffcdc.engine.verify import verify_table
from tests.support.history import history_rows
from tests.support.workspace import Workspace

pytestmark = pytest.mark.slow
UTC = dt.timezone.utc
MAX = 9223372036854775807
FAR = dt.datetime(9999, 12, 31, tzinfo=UTC)
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("city", pa.string())])


def _day(d: int) -> dt.datetime:
    return dt.datetime(2026, 1, d, tzinfo=UTC)


def test_the_dbt_style_history_of_docs_history_md(spark, tmp_path):
    ws = Workspace(str(tmp_path))
    path = str(tmp_path / "lake" / "customers_history")
    ws.table = TableConfig(name="Customers", source=ws.source, keys=["id"],
                           snapshot_time="id:%Y-%m-%d", sinks=[{
        "type": "delta", "name": "history", "path": path, "mode": "scd2", "deletes": "row",
        "history_columns": {"valid_from": "dbt_valid_from", "valid_to": "dbt_valid_to",
                            "deleted": "dbt_is_deleted", "start_at": "dbt_version_from",
                            "end_at": "dbt_version_to",
                            "changed_columns": "dbt_changed_columns"},
        "open_end": {"valid_to": "9999-12-31T00:00:00Z", "end_at": MAX}}])
    snapshots = {"2026-01-01": [(1, "Ann", "Oslo"), (2, "Bob", "Rome")],
                 "2026-01-02": [(1, "Ann", "Bergen")],
                 "2026-01-03": [(1, "Ann", "Bergen"), (2, "Bob", "Paris")]}
    for day, rows in snapshots.items():
        ws.write(f"{day}.parquet", [dict(zip(SCHEMA.names, r)) for r in rows], SCHEMA)
        ws.run(spark)
    got = sorted((r["id"], r["name"], r["city"], r["dbt_version_from"], r["dbt_version_to"],
                  r["dbt_valid_from"], r["dbt_valid_to"], r["dbt_changed_columns"],
                  r["dbt_is_deleted"]) for r in history_rows(path))
    assert got == [
        (1, "Ann", "Bergen", 2, MAX, _day(2), FAR, ["city"], False),
        (1, "Ann", "Oslo", 1, 2, _day(1), _day(2), None, False),
        (2, "Bob", "Paris", 3, MAX, _day(3), FAR, None, False),
        (2, "Bob", "Rome", 1, 2, _day(1), _day(2), None, False),
        (2, "Bob", "Rome", 2, 3, _day(2), _day(3), None, True),
    ]
    # the doc's as-of query by time (customer 2 is deleted then) and by version, as written
    # (Spark here has no Delta reader: the table's current files are the table)
    spark.read.parquet(*DeltaTable(path).file_uris()).createOrReplaceTempView("customers_history")
    by_time = spark.sql(
        "SELECT id, name, city FROM customers_history WHERE dbt_valid_from <= "
        "TIMESTAMP'2026-01-02 12:00:00Z' AND dbt_valid_to > TIMESTAMP'2026-01-02 12:00:00Z' "
        "AND NOT dbt_is_deleted").collect()
    assert [tuple(r) for r in by_time] == [(1, "Ann", "Bergen")]
    v = 2
    rows = DeltaTable(path).to_pyarrow_dataset().to_table(
        filter=(pc.field("dbt_version_from") <= v) & (pc.field("dbt_version_to") > v)
        & ~pc.field("dbt_is_deleted"))
    assert rows.select(["id", "name", "city"]).to_pylist() == [
        {"id": 1, "name": "Ann", "city": "Bergen"}]
    (result,) = verify_table(spark, ws.table, ws.state,
                             os.path.join(ws.source, "2026-01-03.parquet")).values()
    assert result.identical, result.to_dict()
