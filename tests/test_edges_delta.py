"""Issue 38, the Delta sinks' part: a history given a copy of an open row, harmless foreign
commits (table properties, compaction), snapshot times in the future, a column retyped under
``schema_policy = "recreate"``, and the Delta sinks' messages."""

from __future__ import annotations

import datetime as dt
import os
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from diffcdc.config import TableConfig
from diffcdc.errors import InputRefused, TargetMismatch
from diffcdc.state.store import TableState
from tests.support.history import as_of, canonical, check_history, history_rows
from tests.support.workspace import Workspace

pytestmark = pytest.mark.slow
UTC = dt.timezone.utc
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
FUTURE = dt.datetime(2099, 1, 1, tzinfo=UTC).timestamp()


def _rows(*pairs: tuple[int, str]) -> list[dict]:
    return [{"id": i, "name": n} for i, n in pairs]


def _history_ws(tmp_path, **table) -> Workspace:
    ws = Workspace(str(tmp_path))
    entry = {"type": "delta", "name": "history", "path": str(tmp_path / "lake" / "h"),
             "mode": "scd2"}
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=[entry], **table)
    return ws


def _path(ws: Workspace) -> str:
    return ws.table.sinks[0].path  # type: ignore[union-attr]


def _touch(path: str, when: float) -> None:
    os.utime(path, (when, when))


# -- case 3: snapshot times in the future -------------------------------------------------


def test_a_snapshot_time_in_the_future_is_refused_and_the_table_goes_on_once_fixed(
        spark, tmp_path):
    ws = _history_ws(tmp_path)
    ws.write("1.parquet", _rows((1, "a"), (2, "b")), SCHEMA)
    ws.run(spark)
    _touch(ws.write("2.parquet", _rows((1, "a2"), (2, "b")), SCHEMA), FUTURE)
    before = history_rows(_path(ws))
    for _ in range(2):
        with pytest.raises(InputRefused, match="past the run's clock") as refused:
            ws.run(spark)
        message = str(refused.value)
        assert refused.value.exit_code == 3 and "\n" not in message
        assert "2.parquet" in message and "2099-01-01T00:00:00.000000Z" in message
        assert "snapshot_time_ahead" in message
    assert TableState(ws.state, "T").head().version == 1
    assert canonical(history_rows(_path(ws))) == canonical(before)
    _touch(os.path.join(ws.source, "2.parquet"), time.time())  # the file's time corrected
    ws.run(spark)
    rows = history_rows(_path(ws))
    check_history(rows, ["id"])
    assert canonical(as_of(rows, 2)) == canonical(_rows((1, "a2"), (2, "b")))
    # a clock a little ahead (within snapshot_time_ahead) is taken as it is
    ahead = time.time() + 600
    _touch(ws.write("3.parquet", _rows((1, "a3"), (2, "b")), SCHEMA), ahead)
    ws.run(spark)
    assert TableState(ws.state, "T").head().version == 3


def _stuck(spark, tmp_path, **table) -> Workspace:
    """A table whose version 2 was committed with the time 2099 (as before such times were
    refused): run with an unlimited snapshot_time_ahead, then the default one again."""
    ws = _history_ws(tmp_path, snapshot_time_ahead=10**10, **table)
    ws.write("1.parquet", _rows((1, "a"), (2, "b")), SCHEMA)
    ws.run(spark)
    _touch(ws.write("2.parquet", _rows((1, "a2"), (2, "b")), SCHEMA), FUTURE)
    ws.run(spark)
    assert TableState(ws.state, "T").head().record.snapshot_time.startswith("2099")
    ws.table = ws.table.model_copy(update={"snapshot_time_ahead": 3600})
    return ws


def test_a_history_committed_with_a_future_time_is_refused_alone_and_restore_reload_mends_it(
        spark, tmp_path):
    ws = _stuck(spark, tmp_path)
    ws.write("3.parquet", _rows((1, "a3"), (3, "c")), SCHEMA)
    # the table goes on (the 2099 time is not the head's time any more), but the history holds
    # rows valid from 2099: closing them at today's time would make them valid backwards
    with pytest.raises(TargetMismatch, match="rows valid from 2099") as refused:
        ws.run(spark)
    message = str(refused.value)
    assert "RESTORE" in message and "diffcdc reload --table T --sink history --yes" in message
    assert "\n" not in message
    head = TableState(ws.state, "T").head()
    assert head.version == 3 and not head.record.snapshot_time.startswith("2099")
    assert head.unpublished == ["history"]
    # the way out: RESTORE the history to before the 2099 rows, then reload the sink
    DeltaTable(_path(ws)).restore(0)
    ws.run(spark, reload=True, reload_sinks=("history",))
    rows = history_rows(_path(ws))
    check_history(rows, ["id"])
    head = TableState(ws.state, "T").head()
    assert canonical(as_of(rows, head.version)) == canonical(_rows((1, "a3"), (3, "c")))
    assert all(r["__VALID_FROM"].year < 2099 for r in rows)
    ws.write("4.parquet", _rows((1, "a4"), (3, "c")), SCHEMA)
    ws.run(spark)
    rows = history_rows(_path(ws))
    check_history(rows, ["id"])
    assert canonical(as_of(rows, head.version + 1)) == canonical(_rows((1, "a4"), (3, "c")))


def test_a_rollback_or_reload_after_a_future_head_takes_a_time_that_is_not_in_the_future(
        spark, tmp_path):
    ws = Workspace(str(tmp_path), snapshot_time_ahead=10**10)
    ws.write("1.parquet", _rows((1, "a"), (2, "b")), SCHEMA)
    ws.run(spark)
    first = TableState(ws.state, "T").head().record.snapshot_time
    _touch(ws.write("2.parquet", _rows((1, "a2")), SCHEMA), FUTURE)
    ws.run(spark)
    ws.table = ws.table.model_copy(update={"snapshot_time_ahead": 3600})
    ws.run(spark, rollback_to=1)
    head = TableState(ws.state, "T").head()
    assert head.version == 3 and head.record.snapshot_time == first
    ws.assert_mirror_equals(spark, "1.parquet")
    ws.run(spark, reload=True)
    assert TableState(ws.state, "T").head().record.snapshot_time == first
    # a later snapshot is no longer "before" the 2099 time
    ws.write("3.parquet", _rows((1, "a3")), SCHEMA)
    ws.run(spark)
    ws.assert_mirror_equals(spark, "3.parquet")


# -- case 1: a history given a copy of an open row ----------------------------------------


def _open_rows_of(path: str, ids: list[int]) -> pa.Table:
    import pyarrow.compute as pc

    data = DeltaTable(path).to_pyarrow_table()
    data = data.filter(pc.is_null(data.column("__END_AT")))
    return data.filter(pc.is_in(data.column("id"), pa.array(ids)))


def test_a_reload_of_a_history_with_a_copied_open_row_removes_the_copies_and_ends_exact(
        spark, tmp_path):
    from diffcdc.engine.verify import verify_table

    ws = _history_ws(tmp_path, snapshot_time="id:%Y-%m-%d")
    snapshots = [_rows((1, "a"), (2, "b"), (3, "c")), _rows((1, "a2"), (2, "b"), (3, "c"))]
    for day, rows in enumerate(snapshots, start=1):
        ws.write(f"2026-01-0{day}.parquet", rows, SCHEMA)
        ws.run(spark)
    # another writer appends exact copies of two open rows
    write_deltalake(_path(ws), _open_rows_of(_path(ws), [1, 3]), mode="append")
    ws.write("2026-01-03.parquet", _rows((1, "a2"), (2, "b2")), SCHEMA)  # 3 deleted
    for _ in range(2):
        with pytest.raises(TargetMismatch, match="changed by another writer"):
            ws.run(spark)
    ws.run(spark, reload=True, reload_sinks=("history",))
    rows = history_rows(_path(ws))
    check_history(rows, ["id"])  # the copies are gone: every rule holds, the past included
    head = TableState(ws.state, "T").head()
    for version, snapshot in enumerate(snapshots, start=1):
        assert canonical(as_of(rows, version)) == canonical(snapshot), version
    assert canonical(as_of(rows, head.version)) == canonical(_rows((1, "a2"), (2, "b2")))
    results = verify_table(spark, ws.table, ws.state,
                           os.path.join(ws.source, "2026-01-03.parquet"))
    assert results["history"].identical, results["history"].to_dict()
    ws.write("2026-01-04.parquet", _rows((1, "a4"), (2, "b2"), (3, "c")), SCHEMA)
    ws.run(spark)
    rows = history_rows(_path(ws))
    check_history(rows, ["id"])
    assert canonical(as_of(rows, head.version + 1)) == canonical(
        _rows((1, "a4"), (2, "b2"), (3, "c")))
    # an open row that differs from the key's own: which one diffcdc wrote cannot be told
    before = DeltaTable(_path(ws)).version()
    changed = _open_rows_of(_path(ws), [2])
    changed = changed.set_column(changed.schema.get_field_index("name"), "name",
                                 pa.array(["x"], changed.schema.field("name").type))
    write_deltalake(_path(ws), changed, mode="append")
    with pytest.raises(TargetMismatch, match="several open rows that differ") as refused:
        ws.run(spark, reload=True, reload_sinks=("history",))
    assert "RESTORE" in str(refused.value) and "id=2" in str(refused.value)
    DeltaTable(_path(ws)).restore(before)
    ws.run(spark, reload=True, reload_sinks=("history",))
    rows = history_rows(_path(ws))
    check_history(rows, ["id"])
    assert canonical(as_of(rows, TableState(ws.state, "T").head().version)) == canonical(
        _rows((1, "a4"), (2, "b2"), (3, "c")))


# -- case 2: foreign commits that change neither data nor schema ---------------------------


def _delta_ws(tmp_path, mode: str) -> Workspace:
    ws = Workspace(str(tmp_path))
    entry = {"type": "delta", "name": "delta", "path": str(tmp_path / "lake" / "t"),
             "mode": mode}
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=[entry])
    return ws


@pytest.mark.parametrize("mode", ["current", "scd2"])
def test_table_properties_and_compaction_by_another_writer_are_harmless(spark, tmp_path, mode):
    from deltalake import CommitProperties

    from diffcdc.engine.verify import verify_table

    ws = _delta_ws(tmp_path, mode)
    path = _path(ws)
    snapshots = [_rows((1, "a"), (2, "b")), _rows((1, "a"), (2, "b"), (3, "c")),  # an insert
                 _rows((1, "a3"), (3, "c"), (4, "d")), _rows((1, "a4"), (4, "d"))]

    def run(n: int) -> None:
        ws.write(f"{n}.parquet", snapshots[n - 1], SCHEMA)
        ws.run(spark)
        results = verify_table(spark, ws.table, ws.state, os.path.join(ws.source, f"{n}.parquet"))
        assert results["delta"].identical, results["delta"].to_dict()

    run(1)
    run(2)
    table = DeltaTable(path)
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 60 days",
                                      "delta.checkpointInterval": "5"})
    assert table.optimize.compact().get("numFilesRemoved")  # files rewritten, no data change
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    run(3)  # exact, not refused
    assert DeltaTable(path).metadata().configuration["delta.checkpointInterval"] == "5"
    # a property that makes diffcdc's commits fail is refused before the version's commit
    DeltaTable(path).alter.set_table_properties({"delta.appendOnly": "true"})
    ws.write("4.parquet", snapshots[3], SCHEMA)
    with pytest.raises(TargetMismatch, match="append-only") as refused:
        ws.run(spark)
    assert "set delta.appendOnly back to false" in str(refused.value)
    assert TableState(ws.state, "T").head().version == 3
    DeltaTable(path).alter.set_table_properties({"delta.appendOnly": "false"})
    if mode == "scd2":
        rows = history_rows(path)
        check_history(rows, ["id"])
        for version, snapshot in enumerate(snapshots[:3], start=1):
            assert canonical(as_of(rows, version)) == canonical(snapshot), version
    # a commit that only looks like diffcdc's (its commit info copied, no application
    # transaction) with a data change is another writer's
    ours = next(h for h in DeltaTable(path).history() if "diffcdc.version" in h)
    info = {k: str(v) for k, v in ours.items() if k.startswith("diffcdc.")}
    foreign = DeltaTable(path).to_pyarrow_table().slice(0, 1)
    write_deltalake(path, foreign, mode="append",
                    commit_properties=CommitProperties(custom_metadata=info))
    with pytest.raises(TargetMismatch, match="changed by another writer") as refused:
        ws.run(spark)
    assert "WRITE" in str(refused.value)
    ws.run(spark, reload=True, reload_sinks=("delta",))
    # a schema change is not harmless, even without data
    DeltaTable(path).alter.add_columns(
        [__import__("deltalake").Field("extra", "string", nullable=True)])
    ws.write("5.parquet", snapshots[0], SCHEMA)
    with pytest.raises(TargetMismatch, match=r"changed by another writer.*ADD COLUMN"):
        ws.run(spark)


# -- case 4: a column retyped under schema_policy = "recreate" -----------------------------

SCORED = pa.schema([("id", pa.int64()), ("score", pa.float64())])
RETYPED = pa.schema([("id", pa.int64()), ("score", pa.string())])


@pytest.mark.parametrize("values", [["1.5", "2"], ["1.5", "abc"]], ids=["castable", "uncastable"])
def test_a_retyped_column_is_refused_by_the_history_alone_and_followed_by_the_image(
        spark, tmp_path, values):
    """A re-creation that retypes a column the history holds is committed; the history refuses
    it before writing anything (never a cast to the old type, never a failure after its own
    commit), the current image takes the new type, and a history moved away starts anew."""
    import shutil

    from diffcdc.engine.verify import verify_table
    from diffcdc.errors import DiffcdcError

    ws = Workspace(str(tmp_path))
    lake = tmp_path / "lake"
    sinks = [{"type": "delta", "name": "history", "path": str(lake / "h"), "mode": "scd2"},
             {"type": "delta", "name": "delta", "path": str(lake / "t")}]
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=sinks,
                           schema_policy="recreate")
    ws.write("1.parquet", [{"id": 1, "score": 1.0}, {"id": 2, "score": 2.5}], SCORED)
    ws.run(spark)
    before = DeltaTable(str(lake / "h")).version()
    ws.write("2.parquet", [{"id": 1, "score": values[0]}, {"id": 2, "score": values[1]}],
             RETYPED)
    for _ in range(2):  # the run, then the history's backlog on the next
        with pytest.raises(DiffcdcError, match="cannot hold") as refused:
            ws.run(spark)
        message = str(refused.value)
        assert refused.value.exit_code == 1 and "\n" not in message
        assert "sink history" in message and "move the history" in message
    assert TableState(ws.state, "T").head().version == 2
    assert DeltaTable(str(lake / "h")).version() == before
    assert pa.schema(DeltaTable(str(lake / "t")).schema().to_arrow()).field("score").type == pa.string()
    # the way out: the history moved away (it stays readable there); a new one starts at 2
    shutil.move(str(lake / "h"), str(lake / "h-old"))
    ws.run(spark)
    results = verify_table(spark, ws.table, ws.state, os.path.join(ws.source, "2.parquet"))
    assert all(r.identical for r in results.values()), {k: r.to_dict() for k, r in results.items()}
    for path in (lake / "h", lake / "t"):  # the new type, never a cast to the old one
        assert pa.schema(DeltaTable(str(path)).schema().to_arrow()).field("score").type == pa.string()
    rows = history_rows(str(lake / "h"))
    assert sorted(r["score"] for r in rows) == sorted(values)


def test_a_retyped_column_is_refused_by_the_changelog_before_it_writes(spark, tmp_path):
    from diffcdc.errors import DiffcdcError

    ws = Workspace(str(tmp_path))
    lake = tmp_path / "lake"
    ws.table = TableConfig(
        name="T", source=ws.source, keys=["id"], schema_policy="recreate",
        sinks=[{"type": "delta", "path": str(lake / "t"), "changelog_path": str(lake / "log")}])
    ws.write("1.parquet", [{"id": 1, "score": 1.0}], SCORED)
    ws.run(spark)
    logged = DeltaTable(str(lake / "log")).version()
    ws.write("2.parquet", [{"id": 1, "score": "x"}], RETYPED)
    with pytest.raises(DiffcdcError, match="changelog at .* cannot hold") as no:
        ws.run(spark)
    assert "move the changelog" in str(no.value) and TableState(ws.state, "T").head().version == 2
    assert DeltaTable(str(lake / "log")).version() == logged
