"""The Delta sink: one Delta commit per diffcdc version, whose change data feed is the diff."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from diffcdc.config import TableConfig
from diffcdc.errors import StorageError, TargetMismatch
from diffcdc.sinks.delta.feed import commit_of, feed_of, plain_types
from diffcdc.state.store import TableState
from tests.support.workspace import Workspace


def _ws(tmp_path, changelog: bool = True) -> Workspace:
    ws = Workspace(str(tmp_path), keys=("id",))
    sink = {"type": "delta", "path": str(tmp_path / "lake" / "t")}
    if changelog:
        sink["changelog_path"] = str(tmp_path / "lake" / "log")
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=[sink])
    return ws


def _app(ws: Workspace) -> str:
    """The application-transaction id of the Delta sink's current incarnation."""
    manifest = TableState(ws.state, "T").head().record.sinks["delta"].manifest
    return f"diffcdc:T:{manifest['incarnation']}"


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
    assert table.version() == 1 and table.transaction_version(_app(ws)) == 2
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
    assert {"_change_type", "_commit_version", "_commit_timestamp", "_diffcdc_version",
            "_diffcdc_incarnation"} <= set(log.column_names)
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
    with pytest.raises(TargetMismatch, match="did not publish to"):
        ws.run(spark)
    assert TableState(ws.state, "T").head() is None
    import shutil

    shutil.rmtree(path)
    ws.run(spark)
    shutil.rmtree(path)  # someone deletes the table: the next snapshot is refused
    ws.write("2.parquet", [{"id": 1, "v": "b"}])
    with pytest.raises(TargetMismatch, match="the Delta table is gone"):
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
    assert table.version() == 1 and table.transaction_version(_app(ws)) == 2
    assert [h["operation"] for h in table.history(1)] == ["WRITE"]
    live = sorted((r["id"], r["v"]) for r in plain_types(table.to_pyarrow_table()).to_pylist())
    assert live == [(2, "c"), (3, "d")]


# -- the target changed behind diffcdc's back ---------------------------------------------------

def _two_sinks(tmp_path, **options) -> Workspace:
    """A table with an Open Mirroring sink and a Delta sink (with changelog)."""
    ws = Workspace(str(tmp_path), keys=("id",))
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=[
        {"type": "open_mirroring", "landing": ws.landing},
        {"type": "delta", "path": str(tmp_path / "lake" / "t"),
         "changelog_path": str(tmp_path / "lake" / "log")},
    ], **options)
    return ws


def _live(path: str) -> list[tuple]:
    rows = plain_types(DeltaTable(path).to_pyarrow_table()).to_pylist()
    return sorted(tuple(r.values()) for r in rows)


def _rows(n: int, tag: str) -> list[dict]:
    return [{"id": i, "v": f"{tag}{i}"} for i in range(1, n + 1)]


def _foreign_append(path: str) -> None:
    write_deltalake(path, pa.table({"id": pa.array([99], pa.int64()), "v": ["x"]}), mode="append")


def _foreign_delete(path: str) -> None:
    DeltaTable(path).delete("id = 2")


def _restore(path: str) -> None:
    DeltaTable(path).restore(0)


def _cdf_off(path: str) -> None:
    DeltaTable(path).alter.set_table_properties({"delta.enableChangeDataFeed": "false"})


def _added_column(path: str) -> None:
    DeltaTable(path).alter.add_columns([__import__("deltalake").Field("z", "integer", nullable=True)])


@pytest.mark.parametrize("change, words", [
    (_foreign_append, "changed by another writer"),
    (_foreign_delete, "changed by another writer"),
    (_restore, "changed by another writer"),
    (_cdf_off, "change data feed was turned off"),
    (_added_column, "changed by another writer"),
])
def test_a_foreign_change_is_refused_for_that_sink_alone_and_reload_sink_recovers_it(
        spark, tmp_path, change, words):
    ws = _two_sinks(tmp_path)
    path = str(tmp_path / "lake" / "t")
    ws.write("1.parquet", _rows(4, "a"))
    ws.run(spark)
    ws.write("2.parquet", _rows(4, "b"))
    ws.run(spark)  # two Delta commits: RESTORE has a version to go back to
    change(path)
    ws.write("3.parquet", _rows(5, "c"))
    with pytest.raises(TargetMismatch, match=words) as refused:
        ws.run(spark)
    assert "sink delta" in str(refused.value)
    assert "diffcdc reload --table T --sink delta --yes" in str(refused.value)
    # the landing zone published version 3 all the same; the Delta table was left alone
    ws.assert_mirror_equals(spark, "3.parquet")
    head = TableState(ws.state, "T").head()
    assert head.version == 3 and head.unpublished == ["delta"]
    # a run without a fix keeps refusing it (never exit 0 with a table that differs)
    with pytest.raises(TargetMismatch, match=words):
        ws.run(spark)
    if change is _cdf_off:
        DeltaTable(path).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    report = ws.run(spark, reload=True, reload_sinks=("delta",))
    assert report.outcome == "ok" and report.snapshots[0].sinks["delta"]["rows"] == 5
    assert _live(path)[:5] == [(i, f"c{i}") for i in range(1, 6)] or _live(path) == [
        (i, f"c{i}", None) for i in range(1, 6)]
    assert TableState(ws.state, "T").requests.pending_reload() is None
    # the landing zone got the version as a diff (nothing changed), Delta a full image
    assert report.snapshots[0].sinks["open_mirroring"]["rows"] == 0
    ws.write("4.parquet", _rows(3, "d"))
    assert ws.run(spark).outcome == "ok"
    assert [r[:2] for r in _live(path)] == [(i, f"d{i}") for i in range(1, 4)]
    ws.assert_mirror_equals(spark, "4.parquet")


def _outage(monkeypatch) -> None:
    """The Delta sink's publishing fails like a store that does not answer (until undone)."""
    from diffcdc.sinks.delta.sink import DeltaSink

    def outage(self, *args, **kwargs):
        raise StorageError("the store does not answer", table="T")

    monkeypatch.setattr(DeltaSink, "publish", outage)


def test_a_table_deleted_with_a_version_unpublished_is_refused_not_rebuilt_from_a_diff(
        spark, tmp_path, monkeypatch):
    import shutil

    ws = _two_sinks(tmp_path)
    path = str(tmp_path / "lake" / "t")
    ws.write("1.parquet", _rows(20, "a"))
    ws.run(spark)
    ws.write("2.parquet", _rows(21, "a")[1:])  # delete 1, insert 21
    _outage(monkeypatch)
    with pytest.raises(StorageError, match="sink delta: the store does not answer"):
        ws.run(spark)
    assert TableState(ws.state, "T").head().unpublished == ["delta"]
    monkeypatch.undo()
    shutil.rmtree(path)  # someone cleans up the lake
    with pytest.raises(TargetMismatch, match="the Delta table is gone"):
        ws.run(spark)
    assert not os.path.exists(path)  # not rebuilt from version 2's change set alone
    ws.run(spark, reload=True, reload_sinks=("delta",))
    assert [r[:2] for r in _live(path)] == [(i, f"a{i}") for i in range(2, 22)]


def test_an_outage_of_one_sink_is_caught_up_in_order_while_the_other_publishes(
        spark, tmp_path, monkeypatch):
    ws = _two_sinks(tmp_path)
    path = str(tmp_path / "lake" / "t")
    ws.write("1.parquet", _rows(3, "a"))
    ws.run(spark)
    _outage(monkeypatch)
    for n, rows in ((2, _rows(4, "b")), (3, _rows(2, "c"))):
        ws.write(f"{n}.parquet", rows)
        with pytest.raises(StorageError) as failed:
            ws.run(spark, keep_versions=1)  # what the sink has yet to publish is kept
        assert failed.value.report.snapshots[0].sinks["delta"]["published"] is False
        ws.assert_mirror_equals(spark, f"{n}.parquet")
    assert [c.unpublished for c in TableState(ws.state, "T").commits()] == [[], ["delta"], ["delta"]]
    monkeypatch.undo()
    report = ws.run(spark)
    assert report.outcome == "ok" and report.resumed_versions == [2, 3]
    assert _live(path) == [(1, "c1"), (2, "c2")]
    assert [h.get("diffcdc.version") for h in DeltaTable(path).history()][:2] == ["3", "2"]


def test_a_new_state_on_an_old_table_does_not_inherit_its_versions(spark, tmp_path):
    ws = _ws(tmp_path, changelog=False)
    path = str(tmp_path / "lake" / "t")
    ws.write("1.parquet", _rows(3, "a"))
    ws.run(spark)
    ws.write("2.parquet", _rows(4, "b"))
    ws.run(spark)
    import shutil

    shutil.rmtree(ws.state)  # as 'diffcdc drop' leaves it, or a state lost
    os.remove(os.path.join(ws.source, "2.parquet"))
    with pytest.raises(TargetMismatch, match="did not publish to"):
        ws.run(spark)
    assert _live(path) == [(i, f"b{i}") for i in range(1, 5)]  # untouched
    report = ws.run(spark, reload=True, reload_sinks=("delta",))
    assert report.outcome == "ok"
    assert _live(path) == [(i, f"a{i}") for i in range(1, 4)]


def test_a_column_removed_under_removed_columns_null_becomes_null(spark, tmp_path):
    ws = _two_sinks(tmp_path, removed_columns="null")
    path = str(tmp_path / "lake" / "t")
    ws.write("1.parquet", [{"id": i, "v": f"a{i}", "c": i} for i in range(1, 4)])
    ws.run(spark)
    ws.write("2.parquet", [{"id": 1, "v": "b1"}, {"id": 3, "v": "a3"}, {"id": 4, "v": "n4"}])
    assert ws.run(spark).outcome == "ok"
    # the column is NULL in every row: its values changed to NULL (row 3 is an update)
    assert _live(path) == [(1, "b1", None), (3, "a3", None), (4, "n4", None)]
    ws.assert_mirror_equals(spark, "2.parquet", ignore=("c",))
    log = plain_types(DeltaTable(str(tmp_path / "lake" / "log")).to_pyarrow_table())
    assert set(log.column("_diffcdc_version").to_pylist()) == {1, 2}
    assert len(set(log.column("_diffcdc_incarnation").to_pylist())) == 1


def test_a_data_file_deleted_under_the_table_fails_only_the_delta_sink(spark, tmp_path):
    ws = _two_sinks(tmp_path)
    path = str(tmp_path / "lake" / "t")
    ws.write("1.parquet", _rows(6, "a"))
    ws.run(spark)
    for name in os.listdir(path):
        if name.endswith(".parquet"):
            os.remove(os.path.join(path, name))  # someone "cleans up" the table's files
    ws.write("2.parquet", _rows(6, "b"))
    with pytest.raises(TargetMismatch, match="sink delta: the Delta table lost 1 data file") as failed:
        ws.run(spark)
    message = str(failed.value)
    assert "\n" not in message and "diffcdc reload --table T --sink delta --yes" in message
    ws.assert_mirror_equals(spark, "2.parquet")  # the landing zone is not blocked
    ws.run(spark, reload=True, reload_sinks=("delta",))
    assert [r[:2] for r in _live(path)] == [(i, f"b{i}") for i in range(1, 7)]
