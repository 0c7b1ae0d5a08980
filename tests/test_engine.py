"""The engine end to end, in process, on the shared SparkSession."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.errors import (
    ConcurrentRunError,
    ConfigError,
    InputRefused,
    KeyViolation,
    LandingZoneMismatch,
    LateSnapshotError,
    SchemaChangeError,
)
from diffcdc.state.store import TableState
from tests.support.workspace import Workspace, next_sequence

EMP = pa.schema([("EmployeeID", pa.string()), ("Location", pa.string()), ("Email", pa.string())])


def emp(*rows):
    return [dict(zip(["EmployeeID", "Location", "Email"], r)) for r in rows]


@pytest.fixture
def ws(tmp_path):
    return Workspace(str(tmp_path), table="Employees", keys=("EmployeeID",))


def test_initial_load_then_changes_with_markers(spark, ws):
    ws.write("2026-11-19.parquet", emp(("E1", "Bellevue", "a@x"), ("E2", None, "b@x"), ("E3", "Redmond", None)), EMP)
    report = ws.run(spark)
    assert [s.inserted for s in report.snapshots] == [3]
    assert ws.data_files() == ["00000000000000000001.parquet"]
    first = pq.read_table(os.path.join(ws.folder, "00000000000000000001.parquet"))
    assert first.column_names == ["EmployeeID", "Location", "Email"]  # initial load: no marker
    with open(os.path.join(ws.folder, "_metadata.json")) as handle:
        meta = json.load(handle)
    assert meta == {"keyColumns": ["EmployeeID"]}

    # E1 re-keyed to E9, E2 NULL swap, E3 deleted, E4 new
    ws.write("2026-11-20.parquet", emp(("E9", "Bellevue", "a@x"), ("E2", "b@x", None), ("E4", "", "d@x")), EMP)
    report = ws.run(spark)
    (snap,) = report.snapshots
    assert (snap.inserted, snap.updated, snap.deleted) == (2, 1, 2)
    rows = ws.landing_rows("00000000000000000002.parquet")
    assert list(rows[0]) == ["EmployeeID", "Location", "Email", "__rowMarker__"]
    assert [(r["EmployeeID"], r["__rowMarker__"]) for r in rows] == [
        ("E1", 2), ("E3", 2), ("E2", 1), ("E4", 0), ("E9", 0)
    ]
    assert rows[0]["Location"] is None and rows[0]["Email"] is None  # DELETE: key only
    assert rows[2] == {"EmployeeID": "E2", "Location": "b@x", "Email": None, "__rowMarker__": 1}
    ws.assert_mirror_equals(spark, "2026-11-20.parquet")


def test_no_changes_publishes_nothing_but_commits(spark, ws):
    ws.write("1.parquet", emp(("E1", "a", None)), EMP)
    ws.run(spark)
    ws.write("2.parquet", pa.Table.from_pylist(emp(("E1", "a", None)), EMP).select(["Email", "EmployeeID", "Location"]))
    report = ws.run(spark)
    assert report.snapshots[0].files == [] and report.snapshots[0].unchanged == 1
    assert ws.data_files() == ["00000000000000000001.parquet"]
    head = TableState(ws.state, "Employees").head()
    assert head.snapshot_id == "2.parquet" and next_sequence(head) == 2 and head.published
    assert ws.run(spark).outcome == "nothing to do"


def test_null_vs_empty_string_is_a_change(spark, ws):
    ws.write("1.parquet", emp(("E1", None, "x")), EMP)
    ws.run(spark)
    ws.write("2.parquet", emp(("E1", "", "x")), EMP)
    assert ws.run(spark).snapshots[0].updated == 1


def test_late_snapshot_is_refused_and_nothing_changes(spark, ws):
    ws.write("2026-11-20.parquet", emp(("E1", "a", None)), EMP)
    ws.run(spark)
    ws.write("2026-11-19.parquet", emp(("E1", "b", None)), EMP)
    ws.write("2026-11-21.parquet", emp(("E1", "c", None)), EMP)
    before = ws.snapshot_state()
    with pytest.raises(LateSnapshotError) as err:
        ws.run(spark)
    assert err.value.exit_code == 3 and "2026-11-19.parquet" in str(err.value)
    assert ws.snapshot_state() == before


@pytest.mark.parametrize(
    "rows, message",
    [
        (emp(("E1", "a", None), ("E1", "b", None), ("E2", "c", None)), "E1"),
        (emp(("E1", "a", None), (None, "b", None)), "NULL"),
    ],
    ids=["duplicate", "null"],
)
def test_bad_keys_refused_then_clean_run(spark, ws, rows, message):
    ws.write("1.parquet", emp(("E1", "a", None)), EMP)
    ws.run(spark)
    before = ws.snapshot_state()
    ws.write("2.parquet", rows, EMP)
    with pytest.raises(InputRefused) as err:
        ws.run(spark)
    assert err.value.exit_code == 3 and message in str(err.value) and "2.parquet" in str(err.value)
    assert ws.snapshot_state() == before
    assert TableState(ws.state, "Employees").reports.last()["outcome"] == "failed"
    ws.write("2.parquet", emp(("E1", "z", None)), EMP)  # the fixed extract replaces the bad one
    assert ws.run(spark).snapshots[0].updated == 1
    ws.assert_mirror_equals(spark, "2.parquet")


def test_composite_keys_and_key_change(spark, tmp_path):
    ws = Workspace(str(tmp_path), table="Depts", keys=("Company", "Code"))
    schema = pa.schema([("Company", pa.string()), ("Code", pa.int32()), ("Name", pa.string())])
    ws.write("1.parquet", [{"Company": "C1", "Code": 1, "Name": "a"}, {"Company": "C2", "Code": 1, "Name": "b"}], schema)
    ws.run(spark)
    ws.write("2.parquet", [{"Company": "C1", "Code": 2, "Name": "a"}, {"Company": "C2", "Code": 1, "Name": "b"}], schema)
    rows = ws.landing_rows(ws.run(spark).snapshots[0].files[0])
    assert [(r["Company"], r["Code"], r["__rowMarker__"]) for r in rows] == [("C1", 1, 2), ("C1", 2, 0)]


def test_schema_changes(spark, ws):
    ws.write("1.parquet", emp(("E1", "a", None), ("E2", "b", "x")), EMP)
    ws.run(spark)
    # an added all-NULL column changes nothing; an added column with a value is an update
    wider = pa.schema([*EMP, ("Phone", pa.string())])
    ws.write("2.parquet", [{**r, "Phone": None} for r in emp(("E1", "a", None), ("E2", "b", "x"))], wider)
    assert ws.run(spark).snapshots[0].updated == 0
    ws.write("3.parquet", [{**r, "Phone": p} for r, p in zip(emp(("E1", "a", None), ("E2", "b", "x")), [None, "555"])], wider)
    snap = ws.run(spark).snapshots[0]
    assert snap.updated == 1
    assert ws.landing_rows(snap.files[0])[0]["Phone"] == "555"
    ws.assert_mirror_equals(spark, "3.parquet")
    # a removed column is refused by default
    before = ws.snapshot_state()
    ws.write("4.parquet", emp(("E1", "a", None)), EMP)
    with pytest.raises(SchemaChangeError) as err:
        ws.run(spark)
    assert "Phone" in str(err.value) and err.value.exit_code == 3
    assert ws.snapshot_state() == before


def test_retyped_and_reserved_columns_refused(spark, ws):
    ws.write("1.parquet", emp(("E1", "a", None)), EMP)
    ws.run(spark)
    ws.write("2.parquet", [{"EmployeeID": "E1", "Location": 1, "Email": None}],
             pa.schema([("EmployeeID", pa.string()), ("Location", pa.int64()), ("Email", pa.string())]))
    with pytest.raises(SchemaChangeError, match="Location"):
        ws.run(spark)
    os.remove(os.path.join(ws.source, "2.parquet"))
    ws.write("2.parquet", [{"EmployeeID": "E1", "Location": "a", "Email": None, "__rowMarker__": 1}])
    with pytest.raises(SchemaChangeError, match="__rowMarker__"):
        ws.run(spark)


def test_excluded_columns_do_not_trigger_updates_but_are_published(spark, tmp_path):
    ws = Workspace(str(tmp_path), keys=("id",), exclude=["audit"])
    ws.write("1.parquet", [{"id": 1, "v": "a", "audit": "mon"}, {"id": 2, "v": "b", "audit": "mon"}])
    ws.run(spark)
    ws.write("2.parquet", [{"id": 1, "v": "a", "audit": "tue"}, {"id": 2, "v": "c", "audit": "tue"}])
    snap = ws.run(spark).snapshots[0]
    assert snap.updated == 1
    assert ws.landing_rows(snap.files[0]) == [{"id": 2, "v": "c", "audit": "tue", "__rowMarker__": 1}]


def test_csv_and_folder_sources(spark, tmp_path):
    ws = Workspace(str(tmp_path), keys=("id",))
    with open(os.path.join(ws.source, "01.csv"), "w") as handle:
        handle.write('id,name\n1,"Smith, J"\n2,\n3,"line\nbreak"\n')
    os.makedirs(os.path.join(ws.source, "02"))
    for i, rows in enumerate([[{"id": "1", "name": "Smith, J"}], [{"id": "3", "name": "changed"}]]):
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(ws.source, "02", f"part-{i}.parquet"))
    report = ws.run(spark)
    assert [(s.inserted, s.updated, s.deleted) for s in report.snapshots] == [(3, 0, 0), (0, 1, 1)]
    ws.assert_mirror_equals(spark, "02")


def test_max_rows_per_file_and_codec(spark, tmp_path):
    ws = Workspace(str(tmp_path), keys=("id",), max_rows_per_file=3, codec="zstd")
    ws.write("1.parquet", [{"id": i, "v": i} for i in range(10)])
    files = ws.run(spark).snapshots[0].files
    assert len(files) >= 4 and files == ws.data_files()
    counts = [pq.ParquetFile(os.path.join(ws.folder, f)).metadata.num_rows for f in files]
    assert sum(counts) == 10 and max(counts) <= 3
    ids = [r["id"] for f in files for r in ws.landing_rows(f)]
    assert ids == sorted(ids)  # deterministic order across files
    meta = pq.ParquetFile(os.path.join(ws.folder, files[0])).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"


@pytest.mark.parametrize("content", [b"", b"PAR1 this is not parquet at all PAR1"], ids=["empty", "corrupt"])
def test_empty_or_corrupt_file_refused(spark, ws, content):
    ws.write("1.parquet", emp(("E1", "a", None)), EMP)
    ws.run(spark)
    before = ws.snapshot_state()
    with open(os.path.join(ws.source, "2.parquet"), "wb") as handle:
        handle.write(content)
    with pytest.raises(InputRefused) as err:
        ws.run(spark)
    assert err.value.exit_code == 3 and "2.parquet" in str(err.value)
    assert "\n" not in str(err.value)
    assert ws.snapshot_state() == before


def test_unsafe_table_names_rejected(tmp_path):
    for name in ["..", "a/b", "a\\b", "", "bad\x07name", "_hidden", "."]:
        with pytest.raises(Exception) as err:
            Workspace(str(tmp_path), table=name)
        assert "name" in str(err.value)
    from diffcdc.cli.settings import table_from_options

    with pytest.raises(ConfigError, match="--table"):
        table_from_options(name="..", source="s", keys=["k"], landing="l")


def test_foreign_and_lost_landing_files_refused(spark, ws):
    os.makedirs(ws.folder)
    with open(os.path.join(ws.folder, "00000000000000000001.parquet"), "wb") as handle:
        handle.write(b"someone else's file")
    ws.write("1.parquet", emp(("E1", "a", None)), EMP)
    with pytest.raises(LandingZoneMismatch, match="never wrote"):
        ws.run(spark)
    os.remove(os.path.join(ws.folder, "00000000000000000001.parquet"))
    ws.run(spark)
    # the service moved the processed file away: continuation still works
    os.makedirs(os.path.join(ws.folder, "_ProcessedFiles"))
    os.rename(os.path.join(ws.folder, "00000000000000000001.parquet"),
              os.path.join(ws.folder, "_ProcessedFiles", "00000000000000000001.parquet"))
    ws.write("2.parquet", emp(("E1", "b", None)), EMP)
    assert ws.run(spark).snapshots[0].files == ["00000000000000000002.parquet"]
    ws.assert_mirror_equals(spark, "2.parquet")
    # the table folder vanished (re-created by someone else): refused, nothing written
    import shutil

    shutil.rmtree(ws.folder)
    ws.write("3.parquet", emp(("E1", "c", None)), EMP)
    with pytest.raises(LandingZoneMismatch, match="lost files"):
        ws.run(spark)
    assert not os.path.exists(ws.folder) or ws.data_files() == []


def test_key_columns_cannot_change(spark, tmp_path):
    ws = Workspace(str(tmp_path), keys=("id",))
    ws.write("1.parquet", [{"id": 1, "v": "a"}])
    ws.run(spark)
    ws2 = Workspace(str(tmp_path), keys=("v",))
    ws2.write("2.parquet", [{"id": 1, "v": "a"}])
    with pytest.raises(KeyViolation, match="keyColumns can never change"):
        ws2.run(spark)


def test_compare_and_swap_loser_changes_nothing(spark, ws, monkeypatch):
    ws.write("1.parquet", emp(("E1", "a", None)), EMP)
    ws.run(spark)
    ws.write("2.parquet", emp(("E1", "b", None)), EMP)
    state = TableState(ws.state, "Employees")
    original = TableState.claim

    def rival_commits_first(self, record):
        # another run commits the same version between our diff and our commit
        log_dir = self.storage.describe("log")
        os.link(os.path.join(log_dir, f"{1:020d}.json"), os.path.join(log_dir, f"{2:020d}.json"))
        return original(self, record)

    monkeypatch.setattr(TableState, "claim", rival_commits_first)
    with pytest.raises(ConcurrentRunError) as err:
        ws.run(spark)
    assert err.value.exit_code == 1 and "committed by another run" in str(err.value)
    assert ws.data_files() == ["00000000000000000001.parquet"]
    assert len(os.listdir(state.versions_dir)) == 1  # our uncommitted version was removed


def test_lock_refuses_a_second_run(spark, ws):
    ws.write("1.parquet", emp(("E1", "a", None)), EMP)
    with TableState(ws.state, "Employees").lock():
        with pytest.raises(ConcurrentRunError, match="another diffcdc run"):
            ws.run(spark)
    ws.run(spark)


def test_128_bit_fingerprint_and_mixing_refused(spark, tmp_path):
    ws = Workspace(str(tmp_path), keys=("id",), fingerprint_bits=128)
    ws.write("1.parquet", [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
    ws.run(spark)
    ws.write("2.parquet", [{"id": 1, "v": "a"}, {"id": 2, "v": "c"}])
    assert ws.run(spark).snapshots[0].updated == 1
    narrow = Workspace(str(tmp_path), keys=("id",))
    narrow.write("3.parquet", [{"id": 1, "v": "a"}])
    from diffcdc.errors import StateError

    with pytest.raises(StateError, match="fingerprint"):
        narrow.run(spark)


def test_retention_prunes_old_versions(spark, tmp_path):
    ws = Workspace(str(tmp_path), keys=("id",))
    for i in range(4):
        ws.write(f"{i}.parquet", [{"id": 1, "v": i}])
        ws.run(spark, keep_versions=2)
    versions = sorted(os.listdir(TableState(ws.state, "T").versions_dir))
    assert [v[:20] for v in versions] == [f"{3:020d}", f"{4:020d}"]
    assert not any(os.path.exists(os.path.join(ws.state, "T", "versions", v, "landing")) for v in versions)


def test_the_commit_log_is_read_once_per_record_by_a_table_state(spark, ws):
    """A run asks for the commits several times and a table's log grows every night: each
    record and mark is read once per TableState, later calls read only what is new."""
    for day in (1, 2, 3):
        ws.write(f"2026-11-{day:02d}.parquet", emp(("E1", f"L{day}", "a@x"), (f"E{day + 1}", "x", None)), EMP)
        ws.run(spark)
    state = TableState(ws.state, "Employees")
    reads: list[str] = []
    real_read = state.storage.read

    def counted(path):
        reads.append(path)
        return real_read(path)

    state.storage.read = counted  # type: ignore[method-assign]
    first = state.commits()
    assert [c.version for c in first] == [1, 2, 3] and all(c.published for c in first)
    assert sorted(reads) == sorted(
        [f"log/{v:020d}.json" for v in (1, 2, 3)]
        + [f"log/{v:020d}.published.open_mirroring.json" for v in (1, 2, 3)]
    )  # no read of repair pointers that the log does not list
    reads.clear()
    assert state.commits() == first and reads == []
    ws.write("2026-11-04.parquet", emp(("E1", "L4", "a@x")), EMP)
    ws.run(spark)
    later = state.commits()
    assert [c.version for c in later] == [1, 2, 3, 4] and later[:3] == first
    assert sorted(reads) == [f"log/{4:020d}.json", f"log/{4:020d}.published.open_mirroring.json"]
    state.forget()  # a drop: nothing read before is taken for the table any more
    assert state.commits() == []
