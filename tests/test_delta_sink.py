"""The Delta sink: one Delta commit per diffcdc version, whose change data feed is the diff."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from diffcdc.config import TableConfig
from diffcdc.errors import TargetMismatch
from diffcdc.sinks.delta.feed import commit_of, feed_of, plain_types
from diffcdc.state.store import TableState
from tests.helpers import Workspace


def _ws(tmp_path, changelog: bool = True) -> Workspace:
    ws = Workspace(str(tmp_path), keys=("id",))
    sink = {"type": "delta", "path": str(tmp_path / "lake" / "t")}
    if changelog:
        sink["changelog_path"] = str(tmp_path / "lake" / "log")
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=[sink])
    return ws


def _feed(path: str, version: int) -> list[tuple]:
    table = DeltaTable(path)
    rows = feed_of(table, commit_of(table, version)).to_pylist()
    return sorted((r["_change_type"], r["id"], r["v"]) for r in rows)


def test_each_version_is_one_commit_whose_feed_is_the_diff(spark, tmp_path):
    ws = _ws(tmp_path)
    path = str(tmp_path / "lake" / "t")
    ws.write("1.parquet", [{"id": i, "v": f"a{i}"} for i in range(1, 5)])
    ws.run(spark)
    assert DeltaTable(path).metadata().configuration["delta.enableChangeDataFeed"] == "true"
    assert _feed(path, 1) == [("insert", i, f"a{i}") for i in range(1, 5)]
    # update 1, delete 2, key change 3 -> 7, insert 9
    ws.write("2.parquet", [{"id": 1, "v": "b1"}, {"id": 4, "v": "a4"}, {"id": 7, "v": "a3"},
                           {"id": 9, "v": "n9"}])
    ws.run(spark)
    assert _feed(path, 2) == sorted([
        ("update_preimage", 1, "a1"), ("update_postimage", 1, "b1"),
        ("delete", 2, "a2"), ("delete", 3, "a3"), ("insert", 7, "a3"), ("insert", 9, "n9")])
    table = DeltaTable(path)
    assert table.version() == 1 and table.transaction_version("diffcdc:T") == 2
    meta = table.history(1)[0]
    assert (meta["diffcdc.table"], meta["diffcdc.version"], meta["diffcdc.snapshot_id"]) == (
        "T", "2", "2.parquet")
    # an unchanged snapshot commits in diffcdc but makes no Delta commit
    ws.write("3.parquet", [{"id": 1, "v": "b1"}, {"id": 4, "v": "a4"}, {"id": 7, "v": "a3"},
                           {"id": 9, "v": "n9"}])
    ws.run(spark)
    assert DeltaTable(path).version() == 1
    assert TableState(ws.state, "T").head().version == 3
    live = sorted((r["id"], r["v"]) for r in plain_types(DeltaTable(path).to_pyarrow_table()).to_pylist())
    assert live == [(1, "b1"), (4, "a4"), (7, "a3"), (9, "n9")]
    # the changelog keeps every feed row as ordinary columns
    log = plain_types(DeltaTable(str(tmp_path / "lake" / "log")).to_pyarrow_table())
    assert {"_change_type", "_commit_version", "_commit_timestamp"} <= set(log.column_names)
    assert log.num_rows == 4 + 6


def test_publishing_again_is_a_no_op_and_an_added_column_evolves(spark, tmp_path):
    ws = _ws(tmp_path, changelog=False)
    path = str(tmp_path / "lake" / "t")
    ws.write("1.parquet", [{"id": 1, "v": "a"}])
    ws.run(spark)
    from diffcdc.engine.context import sink_history, staging_dir
    from diffcdc.sinks.base import SinkTable
    from diffcdc.sinks.delta.sink import DeltaSink

    state = TableState(ws.state, "T")
    head = state.head()
    sink = DeltaSink("delta", SinkTable("T", ("id",)), ws.table.sinks[0])
    sink.publish(1, head.record.sinks["delta"].manifest, staging_dir(state, head.record, "delta"),
                 sink_history(state.commits(), "delta"))
    assert DeltaTable(path).version() == 0 and sink.is_published(1, head.record.sinks["delta"].manifest)
    ws.write("2.parquet", pa.table({"id": [1, 2], "v": ["a", "b"], "extra": [None, 5]}))
    ws.run(spark)
    rows = plain_types(DeltaTable(path).to_pyarrow_table()).to_pylist()
    assert sorted((r["id"], r["v"], r["extra"]) for r in rows) == [(1, "a", None), (2, "b", 5)]


def test_a_foreign_or_lost_table_is_refused_before_the_commit(spark, tmp_path):
    ws = _ws(tmp_path, changelog=False)
    path = str(tmp_path / "lake" / "t")
    write_deltalake(path, pa.table({"id": [1], "v": ["x"]}))
    ws.write("1.parquet", [{"id": 1, "v": "a"}])
    with pytest.raises(TargetMismatch, match="did not write"):
        ws.run(spark)
    assert TableState(ws.state, "T").head() is None
    import shutil

    shutil.rmtree(path)
    ws.run(spark)
    shutil.rmtree(path)  # someone deletes the table: the next snapshot is refused
    ws.write("2.parquet", [{"id": 1, "v": "b"}])
    with pytest.raises(TargetMismatch, match="lost commits"):
        ws.run(spark)
    assert TableState(ws.state, "T").head().version == 1 and not os.path.exists(path)


def test_a_reload_overwrites_the_table_in_one_commit(spark, tmp_path):
    ws = _ws(tmp_path, changelog=False)
    path = str(tmp_path / "lake" / "t")
    ws.write("1.parquet", [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
    ws.run(spark)
    ws.write("2.parquet", [{"id": 2, "v": "c"}, {"id": 3, "v": "d"}])
    report = ws.run(spark, reload=True)
    assert report.snapshots[0].recreated
    table = DeltaTable(path)
    assert table.version() == 1 and table.transaction_version("diffcdc:T") == 2
    assert [h["operation"] for h in table.history(1)] == ["WRITE"]
    live = sorted((r["id"], r["v"]) for r in plain_types(table.to_pyarrow_table()).to_pylist())
    assert live == [(2, "c"), (3, "d")]
