"""The Delta sink's history mode (SCD type 2) and the snapshots' as-of times."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from diffcdc.config import TableConfig
from diffcdc.errors import ConfigError, InputRefused
from diffcdc.sinks.delta.feed import plain_types
from diffcdc.state.store import TableState
from tests.support.history import as_of, canonical, check_history, history_rows
from tests.support.workspace import Workspace

pytestmark = pytest.mark.slow
UTC = dt.timezone.utc
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
                    ("tags", pa.map_(pa.string(), pa.int64())), ("note", pa.string())])


def _ws(tmp_path, **sink) -> Workspace:
    ws = Workspace(str(tmp_path))
    entry = {"type": "delta", "name": "history", "path": str(tmp_path / "lake" / "h"),
             "mode": "scd2", **sink}
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=[entry],
                           snapshot_time="id:%Y-%m-%d")
    return ws


def _row(i: int, name: str, score: float | None = 1.0, tags=None, note: str | None = None):
    return {"id": i, "name": name, "score": score, "tags": tags, "note": note}


def _path(ws: Workspace) -> str:
    return ws.table.sinks[0].path  # type: ignore[union-attr]


SNAPSHOTS = [
    ("2026-01-01", [_row(1, "a"), _row(2, "b", tags=[("x", 1), ("y", 2)]), _row(3, "c")]),
    # 1 updated (name), 2 deleted, 4 inserted; 3's map NULL -> NULL (unchanged)
    ("2026-01-02", [_row(1, "a2"), _row(3, "c"), _row(4, "d")]),
    # 2 back after its delete; 3 score to NaN; 4 unchanged; 1 score to NULL and name back
    ("2026-01-03", [_row(1, "a", None), _row(2, "b"), _row(3, "c", float("nan")), _row(4, "d")]),
    # no change at all: a version without a Delta commit
    ("2026-01-04", [_row(1, "a", None), _row(2, "b"), _row(3, "c", float("nan")), _row(4, "d")]),
    # key change 4 -> 5; 3 NaN -> NaN (unchanged); 2's map entries in another order are new
    ("2026-01-05", [_row(1, "a", None), _row(2, "b", tags=[("y", 2), ("x", 1)]),
                    _row(3, "c", float("nan")), _row(5, "d")]),
]


def test_as_of_every_version_is_that_snapshot_with_its_changed_columns(spark, tmp_path):
    ws = _ws(tmp_path)
    for sid, rows in SNAPSHOTS:
        ws.write(f"{sid}.parquet", rows, SCHEMA)
        ws.run(spark)
    rows = history_rows(_path(ws))
    check_history(rows, ["id"])
    for version, (_, snapshot) in enumerate(SNAPSHOTS, start=1):
        assert canonical(as_of(rows, version)) == canonical(snapshot), version
    by = {(r["id"], r["__START_AT"]): r for r in rows}
    assert by[(1, 2)]["__CHANGED_COLUMNS"] == ["name"]
    assert by[(1, 3)]["__CHANGED_COLUMNS"] == ["name", "score"]
    assert by[(3, 3)]["__CHANGED_COLUMNS"] == ["score"]
    assert by[(2, 3)]["__CHANGED_COLUMNS"] is None  # back after a delete: a new start
    assert by[(2, 5)]["__CHANGED_COLUMNS"] == ["tags"]
    assert by[(2, 1)]["__END_AT"] == 2 and by[(4, 2)]["__END_AT"] == 5
    assert by[(5, 5)]["__CHANGED_COLUMNS"] is None and by[(5, 5)]["__END_AT"] is None
    # validity is the snapshots' own time, never the run's
    assert by[(1, 2)]["__VALID_FROM"] == dt.datetime(2026, 1, 2, tzinfo=UTC)
    assert by[(1, 2)]["__VALID_TO"] == dt.datetime(2026, 1, 3, tzinfo=UTC)
    commits = TableState(ws.state, "T").commits()
    assert [c.record.snapshot_time for c in commits][:2] == [
        "2026-01-01T00:00:00.000000Z", "2026-01-02T00:00:00.000000Z"]
    # one Delta commit per version with changes (version 4 had none), each with its version
    tagged = [h.get("diffcdc.version") for h in DeltaTable(_path(ws)).history()]
    assert sorted(int(v) for v in tagged if v) == [1, 2, 3, 5]
    # verify compares the current rows with the snapshot
    from diffcdc.engine.verify import verify_table

    (result,) = verify_table(spark, ws.table, ws.state,
                             os.path.join(ws.source, "2026-01-05.parquet")).values()
    assert result.identical, result.to_dict()


def test_a_change_only_in_untracked_columns_is_written_into_the_open_row(spark, tmp_path):
    ws = _ws(tmp_path, track_history_except_columns=["note"])
    ws.write("2026-01-01.parquet", [_row(1, "a", note="n1"), _row(2, "b", note="n1")], SCHEMA)
    ws.run(spark)
    # 1: only its note changes (in place); 2: name and note change (a new row, both listed)
    ws.write("2026-01-02.parquet", [_row(1, "a", note="n2"), _row(2, "b2", note="n2")], SCHEMA)
    ws.run(spark)
    rows = sorted(history_rows(_path(ws)), key=lambda r: (r["id"], r["__START_AT"]))
    assert [(r["id"], r["name"], r["note"], r["__START_AT"], r["__END_AT"],
             r["__CHANGED_COLUMNS"]) for r in rows] == [
        (1, "a", "n2", 1, None, None),
        (2, "b", "n1", 1, 2, None),
        (2, "b2", "n2", 2, None, ["name", "note"]),
    ]


def test_reload_and_rollback_append_to_the_history(spark, tmp_path):
    ws = _ws(tmp_path)
    first = [_row(1, "a"), _row(2, "b"), _row(3, "c")]
    ws.write("2026-01-01.parquet", first, SCHEMA)
    ws.run(spark)
    ws.write("2026-01-02.parquet", [_row(1, "a2"), _row(3, "c"), _row(4, "d")], SCHEMA)
    ws.run(spark)
    before = history_rows(_path(ws))
    # a reload of the history sink: a full image, compared with the open rows (nothing churns)
    ws.run(spark, reload=True, reload_sinks=("history",))
    reloaded = history_rows(_path(ws))
    assert canonical(reloaded) == canonical(before)
    assert len(DeltaTable(_path(ws)).history()) == 3  # the version is recorded: an empty commit
    # a rollback to version 1: a new version with version 1's rows, valid from the head's time
    ws.run(spark, rollback_to=1)
    rows = history_rows(_path(ws))
    check_history(rows, ["id"])
    head = TableState(ws.state, "T").head()
    assert head.record.snapshot_time == "2026-01-02T00:00:00.000000Z"
    assert canonical(as_of(rows, head.version)) == canonical(first)
    for version in range(1, head.version):  # the past is as it was
        assert canonical(as_of(rows, version)) == canonical(as_of(before, min(version, 2)))
    back = {r["id"]: r for r in rows if r["__START_AT"] == head.version}
    assert back[2]["__CHANGED_COLUMNS"] is None and back[1]["__CHANGED_COLUMNS"] == ["name"]
    assert back[1]["__VALID_FROM"] == dt.datetime(2026, 1, 2, tzinfo=UTC)
    # a reload after the rollback reads version 1's snapshot again: still from the head's time
    ws.run(spark, reload=True)
    head = TableState(ws.state, "T").head()
    assert head.record.snapshot_time == "2026-01-02T00:00:00.000000Z"
    rows = history_rows(_path(ws))
    check_history(rows, ["id"])
    assert canonical(as_of(rows, head.version)) == canonical(first)


def test_a_table_of_the_other_mode_is_refused_before_anything_is_published(spark, tmp_path):
    ws = _ws(tmp_path)
    ws.write("2026-01-01.parquet", [_row(1, "a")], SCHEMA)
    current = Workspace(str(tmp_path / "other"))
    current.table = TableConfig(name="T", source=ws.source, keys=["id"],
                                sinks=[{"type": "delta", "path": _path(ws)}])
    current.run(spark)  # a current-mode table at the history's path
    with pytest.raises(ConfigError, match="not a history table") as refused:
        ws.run(spark)
    assert refused.value.exit_code == 2 and "\n" not in str(refused.value)
    assert TableState(ws.state, "T").head() is None
    # the reverse: a history table where a current image is configured
    ws2 = _ws(tmp_path / "h2")
    ws2.write("2026-01-01.parquet", [_row(1, "a")], SCHEMA)
    ws2.run(spark)
    other = Workspace(str(tmp_path / "other2"))
    other.table = TableConfig(name="T", source=ws2.source, keys=["id"],
                              sinks=[{"type": "delta", "name": "history", "path": _path(ws2)}])
    versions = DeltaTable(_path(ws2)).version()
    with pytest.raises(ConfigError, match="is a history table"):
        other.run(spark)
    assert DeltaTable(_path(ws2)).version() == versions
    assert TableState(other.state, "T").head() is None


def test_a_snapshot_time_that_cannot_be_parsed_or_goes_back_is_refused(spark, tmp_path):
    ws = _ws(tmp_path)
    ws.write("2026-01-02.parquet", [_row(1, "a")], SCHEMA)
    ws.run(spark)
    ws.write("2026-13-01.parquet", [_row(1, "b")], SCHEMA)  # month 13
    with pytest.raises(InputRefused, match="does not match the snapshot_time format") as bad:
        ws.run(spark)
    assert bad.value.exit_code == 3 and "2026-13-01.parquet" in str(bad.value)
    os.remove(os.path.join(ws.source, "2026-13-01.parquet"))
    # sorts after 2026-01-02 ('1' > '0'), but is January 1st: before the last committed time
    ws.write("2026-01-1.parquet", [_row(1, "c")], SCHEMA)
    with pytest.raises(InputRefused, match="is before") as back:
        ws.run(spark)
    message = str(back.value)
    assert back.value.exit_code == 3 and "2026-01-1.parquet" in message
    assert "2026-01-02.parquet" in message and "\n" not in message
    head = TableState(ws.state, "T").head()
    assert head.version == 1
    assert len(history_rows(_path(ws))) == 1


def test_the_changelog_lists_the_changed_columns_of_each_update(spark, tmp_path):
    ws = Workspace(str(tmp_path))
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], exclude=["note"], sinks=[
        {"type": "delta", "path": str(tmp_path / "lake" / "t"),
         "changelog_path": str(tmp_path / "lake" / "log")}])
    ws.write("1.parquet", [_row(1, "a", note="x"), _row(2, "b"), _row(3, "c")], SCHEMA)
    ws.run(spark)
    ws.write("2.parquet", [_row(1, "a2", 2.0, note="y"), _row(2, "b", tags=[("k", 1)]),
                           _row(4, "d")], SCHEMA)
    ws.run(spark)
    log = plain_types(DeltaTable(str(tmp_path / "lake" / "log")).to_pyarrow_table()).to_pylist()
    got = sorted((r["_diffcdc_version"], r["_change_type"], r["id"], r["__CHANGED_COLUMNS"])
                 for r in log)
    assert got == [
        (1, "insert", 1, None), (1, "insert", 2, None), (1, "insert", 3, None),
        (2, "delete", 3, None), (2, "insert", 4, None),
        (2, "update_postimage", 1, ["name", "score"]),  # the excluded note is never listed
        (2, "update_postimage", 2, ["tags"]),
        (2, "update_preimage", 1, None), (2, "update_preimage", 2, None),
    ]


def test_a_dataframe_snapshot_records_the_time_it_is_given(spark, tmp_path):
    import diffcdc

    df = spark.createDataFrame([(1, "a")], "id long, name string")
    at = dt.datetime(2026, 3, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    path = str(tmp_path / "h")
    diffcdc.run_dataframe(df, table="T", keys=["id"], state=str(tmp_path / "state"),
                          sinks=[{"type": "delta", "path": path, "mode": "scd2"}],
                          snapshot_time=at, snapshot_id="0001")
    (row,) = history_rows(path)
    assert row["__VALID_FROM"] == dt.datetime(2026, 3, 1, 10, 30, tzinfo=UTC)
    assert TableState(str(tmp_path / "state"), "T").head().record.snapshot_time == (
        "2026-03-01T10:30:00.000000Z")


def test_a_history_that_lost_a_data_file_is_refused_with_how_to_restore_it(spark, tmp_path):
    from diffcdc.errors import TargetMismatch

    ws = _ws(tmp_path)
    ws.write("2026-01-01.parquet", [_row(1, "a"), _row(2, "b")], SCHEMA)
    ws.run(spark)
    (lost,) = DeltaTable(_path(ws)).file_uris()
    os.remove(lost)
    ws.write("2026-01-02.parquet", [_row(1, "a2"), _row(2, "b")], SCHEMA)
    with pytest.raises(TargetMismatch, match="lost 1 data file") as refused:
        ws.run(spark)
    assert "restore them" in str(refused.value) and "\n" not in str(refused.value)
    assert TableState(ws.state, "T").head().version == 1


def test_an_added_column_evolves_the_history(spark, tmp_path):
    ws = _ws(tmp_path)
    ws.write("2026-01-01.parquet", [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    ws.run(spark)
    # a column added: NULL for 1 (no change: an all-NULL value contributes nothing), set for 2
    second = [{"id": 1, "name": "a", "extra": None}, {"id": 2, "name": "b", "extra": 7}]
    ws.write("2026-01-02.parquet", second,
             pa.schema([("id", pa.int64()), ("name", pa.string()), ("extra", pa.int64())]))
    ws.run(spark)
    rows = history_rows(_path(ws))
    check_history(rows, ["id"])
    assert canonical(as_of(rows, 1), ["id", "name"]) == canonical(
        [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}], ["id", "name"])
    assert canonical(as_of(rows, 2)) == canonical(second)
    (opened,) = [r for r in rows if r["__START_AT"] == 2]
    assert opened["id"] == 2 and opened["__CHANGED_COLUMNS"] == ["extra"]
