"""The Open Mirroring landing contract (spec §1) beyond the core engine.

One contract suite runs for Parquet and for every delimited-text variant: every written file is
parsed back using only what ``_metadata.json`` declares, and the files are replayed with the
``diffcdc verify`` logic. Then: the ``_metadata.json`` option combinations, partner events,
schema folders, sequence continuation with the cleanup folders, foreign and lost files, schema
evolution under both policies, re-creation (also after a crash in the middle) and drop.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.engine import run as engine
from diffcdc.errors import (
    ConfigError,
    KeyViolation,
    LandingZoneMismatch,
    SchemaChangeError,
)
from diffcdc.sinks.openmirroring.landing import drop_folder
from diffcdc.sinks.openmirroring.sink import OpenMirroringSink
from diffcdc.sinks.openmirroring.text_read import coerce, read_text_file
from diffcdc.state.store import TableState
from tests.support.hypothesis_profiles import examples
from tests.support.workspace import UTC, Workspace, next_sequence, norm

AWKWARD = [
    "plain", "com,ma", "semi;colon", "pi|pe", "tab\there", 'dq"uote', "sq'uote", "back\\slash",
    "sl/ash", "line\r\nbreak", "cr\ronly", "lf\nonly", "", "N/A", "null", "NULL", " padded ",
    "é€ü", None,
]
SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("s", pa.string()),
    ("d", pa.float64()),
    ("dec", pa.decimal128(10, 3)),
    ("day", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")),
    ("local", pa.timestamp("us")),
    ("blob", pa.binary()),
    ("flag", pa.bool_()),
    ("st", pa.struct([("a", pa.int32()), ("m", pa.map_(pa.string(), pa.int32()))])),
])


def row(i: int, s: str | None) -> dict:
    return {
        "id": i,
        "s": s,
        "d": [1.5, float("nan"), -0.0, None, 1e300][i % 5],
        "dec": [Decimal("1.500"), Decimal("-0.001"), None][i % 3],
        "day": dt.date(1999, 12, 31) + dt.timedelta(days=i),
        "ts": dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC) if i % 4 else None,
        "local": dt.datetime(2026, 5, 6, 7, 8, 9, i),
        "blob": bytes([i, 0, 255]) if i % 3 else None,
        "flag": [True, False, None][i % 3],
        # map keys out of order, nested in a struct: the JSON text must sort them
        "st": {"a": i, "m": [("z", 1), ("b", i)]} if i % 2 else None,
    }


def json_of(st: dict | None) -> str | None:
    if st is None:
        return None
    return json.dumps({"a": st["a"], "m": dict(sorted(st["m"]))}, separators=(",", ":"))


VARIANTS = {
    "parquet": dict(codec="zstd"),
    "csv": dict(file_format="csv"),
    "tsv": dict(file_format="tsv", codec="gzip", text=dict(
        row_separator="\n", quote_character="'", escape_character="'", null_value="N/A",
        encoding="utf-16")),
    "psv": dict(file_format="psv", codec="zstd", text=dict(
        row_separator="\r", escape_character='"', null_value="null", encoding="windows-1252")),
    "dat": dict(file_format="text", file_extension="dat", codec="snappy", text=dict(
        column_separator=";", quote_character="", escape_character="\\", null_value="NULL",
        row_separator="\n")),
}


def metadata(ws: Workspace) -> dict:
    with open(os.path.join(ws.folder, "_metadata.json"), encoding="utf-8") as handle:
        return json.load(handle)


def file_rows(ws: Workspace, name: str) -> list[dict]:
    """A landing file's rows; text is parsed with nothing but _metadata.json."""
    with open(os.path.join(ws.folder, name), "rb") as handle:
        data = handle.read()
    if name.endswith(".parquet"):
        return pq.read_table(os.path.join(ws.folder, name)).to_pylist()
    return read_text_file(data, metadata(ws))


def expected_row(source: dict, types: dict[str, str]) -> dict:
    out = {**source, "st": json_of(source["st"])}
    return {c: coerce(v, types[c]) for c, v in out.items()} if types else out


def check_files(ws: Workspace, names: list[str], rows: dict[int, dict], initial: bool) -> None:
    meta = metadata(ws)
    types = {c["Name"]: c["DataType"] for c in meta.get("SchemaDefinition", {}).get("Columns", [])}
    for name in names:
        got = file_rows(ws, name)
        assert got, name
        for r in got:
            assert (list(r)[-1] == "__rowMarker__") != initial  # marker last; none on initial load
            marker = r.pop("__rowMarker__", 0)
            if marker == 2:
                assert all(v is None for c, v in r.items() if c != "id")
                continue
            want = expected_row(rows[r["id"]], types)
            assert {c: norm(v) for c, v in r.items()} == {c: norm(v) for c, v in want.items()}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_landing_contract(spark, tmp_path, variant):
    options = VARIANTS[variant]
    ws = Workspace(str(tmp_path), keys=("id",), max_rows_per_file=8, **options)
    first = {i: row(i, s) for i, s in enumerate(AWKWARD)}
    ws.write("1.parquet", list(first.values()), SCHEMA)
    files = ws.run(spark).snapshots[0].files
    ext = ws.table.sinks[0].extension
    assert files == [f"{n:020d}.{ext}" for n in range(1, 4)] == ws.data_files()
    check_files(ws, files, first, initial=True)

    meta = metadata(ws)
    assert meta["keyColumns"] == ["id"]
    if variant == "parquet":
        schema = pq.read_schema(os.path.join(ws.folder, files[0]))
        assert schema.field("dec").type == pa.decimal128(10, 3)
        assert schema.field("day").type == pa.date32()
        assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
        assert schema.field("local").type == pa.timestamp("us")
        assert schema.field("blob").type == pa.binary()
        assert schema.field("st").type == pa.string()
        assert pq.ParquetFile(os.path.join(ws.folder, files[0])).metadata.row_group(0).column(0).compression == "ZSTD"
        assert set(meta) == {"keyColumns"}
    else:
        props = meta["FileFormatTypeProperties"]
        assert set(props) == {"FirstRowAsHeader", "RowSeparator", "ColumnSeparator", "QuoteCharacter",
                              "EscapeCharacter", "NullValue", "Encoding"}
        assert props["FirstRowAsHeader"] is True
        assert meta["FileExtension"] == ext
        assert ("FileFormat" in meta) == (ext != "csv") and meta.get("FileFormat", "DelimitedText") == "DelimitedText"
        columns = meta["SchemaDefinition"]["Columns"]
        assert [c["Name"] for c in columns] == SCHEMA.names
        assert {c["Name"]: c["DataType"] for c in columns} == {
            "id": "Int64", "s": "String", "d": "Double", "dec": "Double", "day": "IDate",
            "ts": "DateTime", "local": "DateTime", "blob": "ByteArray", "flag": "Boolean",
            "st": "String",
        }
        assert [c["IsNullable"] for c in columns] == [False] + [True] * 9
        if options.get("codec") is None:
            with open(os.path.join(ws.folder, files[0]), "rb") as handle:
                head = handle.read(200).decode("utf-8")
            assert head.startswith("id,s,d,dec,day,ts,local,blob,flag,st\r\n")

    # changes: updates (awkward values swapped around), deletes, inserts, a column order change
    second = {i: row(i, AWKWARD[(i + 3) % len(AWKWARD)]) for i in range(2, len(AWKWARD))}
    second.update({100: row(100, "new,\"one\"\r\n"), 101: row(101, None)})
    table = pa.Table.from_pylist(list(second.values()), SCHEMA)
    ws.write("2.parquet", table.select(list(reversed(SCHEMA.names))))
    snap = ws.run(spark).snapshots[0]
    assert (snap.inserted, snap.deleted) == (2, 2) and snap.updated > 0
    check_files(ws, snap.files, second, initial=False)
    ws.assert_mirror_equals(spark, "2.parquet")


@pytest.mark.parametrize("upsert", [False, True], ids=["insert-default", "upsert-default"])
@pytest.mark.parametrize("by_time", [False, True], ids=["sequential", "last-update-time"])
def test_metadata_option_combinations(spark, tmp_path, upsert, by_time):
    ws = Workspace(str(tmp_path), keys=("id",), max_rows_per_file=1, upsert_default=upsert,
                   file_detection="last_update_time" if by_time else "sequential")
    ws.write("1.parquet", [{"id": i, "v": "a"} for i in range(3)])
    ws.run(spark)
    expected = {"keyColumns": ["id"]}
    if by_time:
        expected["fileDetectionStrategy"] = "LastUpdateTimeFileDetection"
    if upsert:
        expected["isUpsertDefaultRowMarker"] = True
    assert metadata(ws) == expected
    assert all("__rowMarker__" not in ws.landing_rows(f)[0] for f in ws.data_files())  # initial load
    ws.write("2.parquet", [{"id": 0, "v": "a"}, {"id": 1, "v": "b"}, {"id": 7, "v": "c"}])
    files = ws.run(spark).snapshots[0].files
    markers = [(r["id"], r["__rowMarker__"]) for f in files for r in ws.landing_rows(f)]
    assert markers == [(2, 2), (1, 4 if upsert else 1), (7, 4 if upsert else 0)]
    ws.assert_mirror_equals(spark, "2.parquet")
    if by_time:  # modification times strictly follow the change order
        times = [os.stat(os.path.join(ws.folder, f)).st_mtime_ns for f in ws.data_files()]
        assert all(a < b for a, b in zip(times, times[1:])), times


def test_partner_events_and_schema_folders(spark, tmp_path):
    partner = {"partner_name": "Contoso", "source_type": "SQL", "source_version": 2019,
               "additional_information": {"k": "v"}}
    sales = Workspace(str(tmp_path), table="Orders", schema_name="Sales", partner=partner)
    sales.write("1.parquet", [{"id": 1, "v": "s"}])
    sales.run(spark)
    assert sales.folder == os.path.join(sales.landing, "Sales.schema", "Orders")
    assert sales.data_files() == ["00000000000000000001.parquet"]
    with open(os.path.join(sales.landing, "_partnerEvents.json")) as handle:
        assert json.load(handle) == {"partnerName": "Contoso", "sourceInfo": {
            "sourceType": "SQL", "sourceVersion": "2019", "additionalInformation": {"k": "v"}}}
    # same table name in another schema: its own folder and its own state
    hr = Workspace(str(tmp_path / "hr"), table="Orders", schema_name="HR", partner=partner)
    hr.landing, hr.state = sales.landing, sales.state
    hr.table = hr.table.with_table_fields(landing=sales.landing)
    hr.write("1.parquet", [{"id": 1, "v": "h"}, {"id": 2, "v": "h"}])
    hr.run(spark)
    assert sorted(os.listdir(sales.state)) == ["HR.schema.Orders", "Sales.schema.Orders"]
    hr.assert_mirror_equals(spark, "1.parquet")
    sales.assert_mirror_equals(spark, "1.parquet")
    # a different partner file is refused before anything is published
    hr.table = hr.table.with_table_fields(partner={**partner, "partner_name": "Other"})
    with pytest.raises(LandingZoneMismatch, match="_partnerEvents.json"):
        hr.run(spark)


@pytest.mark.parametrize("cleanup", ["_ProcessedFiles", "_FilesReadyToDelete"])
def test_continuation_foreign_lost_and_reload(spark, tmp_path, cleanup):
    ws = Workspace(str(tmp_path), keys=("id",))
    ws.write("1.parquet", [{"id": 1, "v": "a"}])
    ws.run(spark)
    ws.write("2.parquet", [{"id": 1, "v": "b"}])
    ws.run(spark)
    # the service moved the processed files away, keeping only the last one
    moved = os.path.join(ws.folder, cleanup)
    os.makedirs(moved)
    for name in ws.data_files():
        os.rename(os.path.join(ws.folder, name), os.path.join(moved, name))
    ws.write("3.parquet", [{"id": 1, "v": "c"}])
    assert ws.run(spark).snapshots[0].files == ["00000000000000000003.parquet"]
    ws.assert_mirror_equals(spark, "3.parquet")
    ws.write("4.parquet", [{"id": 1, "v": "d"}])
    # a foreign file under one of our numbers (same name, other content) is refused
    third = os.path.join(ws.folder, "00000000000000000003.parquet")
    os.rename(third, third + ".bak")
    with open(third, "wb") as handle:
        handle.write(b"not ours")
    before = ws.snapshot_state()
    with pytest.raises(LandingZoneMismatch, match="never wrote"):
        ws.run(spark)
    assert ws.snapshot_state() == before
    os.replace(third + ".bak", third)
    # a number above ours in a cleanup folder is foreign too
    with open(os.path.join(moved, "00000000000000000009.parquet"), "wb") as handle:
        handle.write(b"x")
    with pytest.raises(LandingZoneMismatch, match="number 9"):
        ws.run(spark)
    # the folder lost our files (re-created by someone else): refused, the way out is a reload
    shutil.rmtree(ws.folder)
    os.makedirs(ws.folder)
    with pytest.raises(LandingZoneMismatch, match="lost files") as err:
        ws.run(spark)
    assert "diffcdc reload --table T --yes" in str(err.value)
    report = ws.run(spark, reload=True)
    assert [s.snapshot_id for s in report.snapshots] == ["4.parquet"]
    assert report.snapshots[0].recreated and ws.data_files() == ["00000000000000000001.parquet"]
    assert "__rowMarker__" not in ws.landing_rows("00000000000000000001.parquet")[0]
    ws.assert_mirror_equals(spark, "4.parquet")
    assert next_sequence(TableState(ws.state, "T").head()) == 2
    assert ws.run(spark).outcome == "nothing to do"


EMP = pa.schema([("id", pa.int64()), ("name", pa.string()), ("city", pa.string())])
CHANGES = {
    "removed": (pa.schema([("id", pa.int64()), ("name", pa.string())]), lambda r: {"id": r["id"], "name": r["name"]}),
    "renamed": (pa.schema([("id", pa.int64()), ("name", pa.string()), ("town", pa.string())]),
                lambda r: {"id": r["id"], "name": r["name"], "town": r["city"]}),
    "retyped": (pa.schema([("id", pa.int64()), ("name", pa.string()), ("city", pa.int32())]),
                lambda r: {"id": r["id"], "name": r["name"], "city": len(r["city"] or "")}),
}
PEOPLE = [{"id": 1, "name": "a", "city": "X"}, {"id": 2, "name": "b", "city": None}]


def test_schema_changes_fail_policy(spark, tmp_path):
    ws = Workspace(str(tmp_path), keys=("id",), file_format="csv")
    ws.write("1.parquet", PEOPLE, EMP)
    ws.run(spark)
    before = ws.snapshot_state()
    cases = {**CHANGES, "added": (pa.schema([*EMP, ("extra", pa.string())]), lambda r: {**r, "extra": "e"})}
    for change, (schema, convert) in cases.items():
        ws.write("2.parquet", [convert(r) for r in PEOPLE], schema)
        with pytest.raises(SchemaChangeError) as err:
            ws.run(spark)
        assert err.value.exit_code == 3 and "schema_policy" in str(err.value), change
        assert "diffcdc reload --table T --yes" in str(err.value)
        assert ws.snapshot_state() == before, change
        os.remove(os.path.join(ws.source, "2.parquet"))
    # keys and landing settings can never change under a published table
    ws.write("2.parquet", PEOPLE, EMP)
    ws.table = ws.table.model_copy(update={"keys": ["name"]})
    with pytest.raises(KeyViolation, match="keyColumns can never change"):
        ws.run(spark)
    ws.table = ws.table.model_copy(update={"keys": ["id"]}).with_table_fields(upsert_default=True)
    with pytest.raises(ConfigError, match="isUpsertDefaultRowMarker"):
        ws.run(spark)
    assert ws.snapshot_state() == before


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_schema_changes_recreate_policy(spark, tmp_path, fmt):
    ws = Workspace(str(tmp_path), keys=("id",), schema_policy="recreate", file_format=fmt)
    ws.write("1.parquet", PEOPLE, EMP)
    ws.run(spark)
    ws.write("2.parquet", PEOPLE + [{"id": 3, "name": "c", "city": "Z"}], EMP)
    ws.run(spark)
    assert len(ws.data_files()) == 2
    steps = [  # each relative to the one before
        ("removed", pa.schema([("id", pa.int64()), ("name", pa.string())]),
         [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]),
        ("removed", pa.schema([("id", pa.int64()), ("label", pa.string())]),  # renamed
         [{"id": 1, "label": "a"}, {"id": 2, "label": "b"}]),
        ("retyped", pa.schema([("id", pa.int64()), ("label", pa.int32())]),
         [{"id": 1, "label": 1}, {"id": 2, "label": None}]),
    ]
    for n, (change, schema, rows) in enumerate(steps, start=3):
        ws.write(f"{n}.parquet", rows, schema)
        snap = ws.run(spark).snapshots[0]
        assert snap.recreated and change in snap.recreated, (n, snap.recreated)
        assert ws.data_files() == [f"00000000000000000001.{ws.table.sinks[0].extension}"], change
        assert "__rowMarker__" not in file_rows(ws, ws.data_files()[0])[0]
        assert (snap.inserted, snap.updated, snap.deleted) == (2, 0, 0)
        ws.assert_mirror_equals(spark, f"{n}.parquet")
        if fmt == "csv":
            assert [c["Name"] for c in metadata(ws)["SchemaDefinition"]["Columns"]] == schema.names
    head = TableState(ws.state, "T").head()
    assert next_sequence(head) == 2 and head.record.recreate


@pytest.mark.parametrize("fmt", ["parquet", "psv"])
def test_removed_column_continues_with_nulls(spark, tmp_path, fmt):
    ws = Workspace(str(tmp_path), keys=("id",), removed_columns="null", file_format=fmt)
    ws.write("1.parquet", PEOPLE, EMP)
    ws.run(spark)
    narrow, convert = CHANGES["removed"]
    ws.write("2.parquet", [convert(r) for r in PEOPLE] + [{"id": 3, "name": "c"}], narrow)
    snap = ws.run(spark).snapshots[0]
    # the row that had a city now has NULL there: an update; the new row an insert
    assert (snap.inserted, snap.updated, snap.deleted, snap.recreated) == (1, 1, 0, None)
    rows = file_rows(ws, snap.files[0])
    if fmt == "parquet":
        assert all("city" not in r for r in rows)  # new files simply lack the column
    else:  # text keeps its SchemaDefinition: the column is written as NULL
        assert all(r["city"] is None for r in rows)
        assert [c["Name"] for c in metadata(ws)["SchemaDefinition"]["Columns"]] == EMP.names
    ws.assert_mirror_equals(spark, "2.parquet")


def test_reload_survives_a_crash_and_drop_forgets_the_table(spark, tmp_path, monkeypatch):
    ws = Workspace(str(tmp_path), keys=("id",))
    ws.write("1.parquet", [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
    ws.run(spark)
    ws.write("2.parquet", [{"id": 1, "v": "z"}])
    ws.run(spark)
    # a reload dies before its commit: the request stays in state, the next plain run does it
    original = engine.process_snapshot

    def die(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(engine, "process_snapshot", die)
    with pytest.raises(Exception, match="killed"):
        ws.run(spark, reload=True)
    assert TableState(ws.state, "T").requests.pending_reload() is not None
    # ... and dies again after the old folder was dropped, in the middle of publishing
    monkeypatch.setattr(engine, "process_snapshot", original)
    calls = {"n": 0}
    real_publish = OpenMirroringSink.publish

    def publish_then_die(self, version, manifest, staging_dir, history, **kwargs):
        if manifest.get("recreate") and calls["n"] == 0:
            calls["n"] += 1
            drop_folder(self.storage, manifest["landing_folder"], 5)
            self.marks.put(version, "dropped")
            raise RuntimeError("killed while publishing")
        return real_publish(self, version, manifest, staging_dir, history, **kwargs)

    monkeypatch.setattr(OpenMirroringSink, "publish", publish_then_die)
    with pytest.raises(Exception, match="killed while publishing"):
        ws.run(spark)
    assert TableState(ws.state, "T").requests.pending_reload() is None  # the commit carries it now
    assert not os.path.exists(ws.folder)
    monkeypatch.setattr(OpenMirroringSink, "publish", real_publish)
    report = ws.run(spark)
    assert report.resumed_versions == [3]
    assert ws.data_files() == ["00000000000000000001.parquet"]
    ws.assert_mirror_equals(spark, "2.parquet")

    from diffcdc.engine.drop import drop_table

    drop_table(ws.table, ws.state)
    assert not os.path.exists(ws.folder) and not os.path.exists(os.path.join(ws.state, "T"))
    report = ws.run(spark)  # starts over: an initial load of every snapshot
    assert [s.snapshot_id for s in report.snapshots] == ["1.parquet", "2.parquet"]
    ws.assert_mirror_equals(spark, "2.parquet")


def test_cli_text_options_reload_verify_and_drop(spark, tmp_path, monkeypatch, capsys):
    from diffcdc.cli.main import main

    monkeypatch.chdir(tmp_path)  # Spark resolves relative paths elsewhere: absolute ones below
    src, landing, state = (str(tmp_path / n) for n in ("src", "landing", "state"))
    os.makedirs(src)
    pq.write_table(pa.Table.from_pylist([{"id": 1, "v": "a\tb"}, {"id": 2, "v": None}]), f"{src}/1.parquet")
    base = ["--source", src, "--keys", "id", "--table", "T", "--landing", landing, "--state", state]
    text = ["--format", "tsv", "--row-separator", "\\n", "--null-value", "N/A", "--codec", "gzip",
            "--upsert-default", "--partner-name", "Contoso", "--partner-source-type", "Oracle"]
    assert main(["run", *base, *text]) == 0
    with open("landing/T/_metadata.json") as handle:
        meta = json.load(handle)
    assert meta["FileFormatTypeProperties"]["RowSeparator"] == "\n"
    assert meta["FileFormatTypeProperties"]["ColumnSeparator"] == "\t"
    assert meta["isUpsertDefaultRowMarker"] is True and meta["FileFormat"] == "DelimitedText"
    assert os.path.exists("landing/_partnerEvents.json")
    assert main(["reload", *base, *text]) == 2  # no --yes: refused, nothing happens
    capsys.readouterr()
    assert main(["reload", *base, *text, "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tables"][0]["snapshots"][0]["recreated"]
    assert main(["verify", "--landing", landing, "--table", "T", "--snapshot", f"{src}/1.parquet"]) == 0
    assert main(["drop", "--table", "T", "--landing", landing, "--state", state]) == 2
    assert os.path.exists("landing/T")
    assert main(["drop", "--table", "T", "--landing", landing, "--state", state, "--yes"]) == 0
    assert not os.path.exists("landing/T") and not os.path.exists("state/T")


TEXT_FORMATS = [
    dict(extension="csv"),
    dict(extension="tsv", row_separator="\n", column_separator="\t", quote="'", escape="'",
         null_value="N/A", encoding="utf-16"),
    dict(extension="psv", row_separator="\r", column_separator="|", escape='"', null_value="null"),
    dict(extension="dat", column_separator=";", quote="", escape="/", null_value="NULL"),
    dict(extension="txt", quote="'", escape="", null_value=""),
]


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd", "snappy"])
@pytest.mark.parametrize("spec", TEXT_FORMATS, ids=[f["extension"] for f in TEXT_FORMATS])
def test_text_round_trip_of_any_value(spec, codec):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from diffcdc.errors import InputRefused
    from diffcdc.sinks.openmirroring.text import TextFormat
    from diffcdc.sinks.openmirroring.text_codecs import compress
    from diffcdc.sinks.openmirroring.text_encode import encode_table

    fmt = TextFormat(**spec)
    meta = {"FileExtension": fmt.extension, "FileFormatTypeProperties": fmt.properties(),
            "SchemaDefinition": {"Columns": [{"Name": "v", "DataType": "String"}]}}
    alphabet = st.sampled_from(list(",;|\t\"'\\/\r\n NULA/é€ab"))

    @settings(max_examples=examples(40), deadline=None)
    @given(st.lists(st.none() | st.text(alphabet, max_size=6), min_size=1, max_size=8))
    def check(values):
        table = pa.table({'v c,"': pa.array(values, pa.string())})
        try:
            data = encode_table(fmt, table)
        except InputRefused:  # only where the declared characters cannot say it
            assert not fmt.escape
            return
        rows = read_text_file(compress(data, codec), meta)
        assert [r['v c,"'] for r in rows] == values

    check()


def _text_one_value_at_a_time(fmt, table: pa.Table) -> bytes:
    """The scalar quoting rules over Python's own value texts: what the whole-column encoder
    must write byte for byte."""
    from diffcdc.sinks.openmirroring.text_encode import python_text

    names = table.column_names
    columns = [python_text(table.column(i).combine_chunks()) for i in range(len(names))]
    lines = [fmt.column_separator.join(fmt.checked_field(n, n) for n in names)]
    for values in zip(*columns):
        lines.append(fmt.column_separator.join(
            fmt.checked_field(v, names[i]) for i, v in enumerate(values)))
    return (fmt.row_separator.join(lines) + fmt.row_separator).encode(fmt.encoding)


def test_arrow_white_space_is_what_str_strip_removes():
    """The column-wise encoder quotes a value whose ends Arrow's utf8_trim_whitespace would
    trim; the rules say: whose ends ``str.strip()`` would strip. Every code point agrees."""
    import pyarrow.compute as pc

    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    padded = pa.array([chr(c) + "a" for c in points])
    trimmed = pc.not_equal(padded, pc.utf8_trim_whitespace(padded)).to_pylist()
    assert {c for c, t in zip(points, trimmed) if t} == {c for c in points if chr(c).isspace()}


ODD_TEXT_FORMATS = [  # separators, tokens and escapes that numbers, dates and times contain
    dict(extension="x1", column_separator=":", null_value="0", quote="", escape="T"),
    dict(extension="x2", column_separator="-", null_value="1", quote="0", escape="0"),
]


@pytest.mark.parametrize("spec", TEXT_FORMATS + ODD_TEXT_FORMATS,
                         ids=[f["extension"] for f in TEXT_FORMATS + ODD_TEXT_FORMATS])
def test_text_of_whole_columns_equals_the_rules_one_value_at_a_time(spec):
    """Arrow's casts and the column-wise quoting give the same bytes as the scalar rules, for
    every type the encoder does not format in Python, any text, NULLs, edge dates and times,
    and the same refusal where the declared characters cannot say a value."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from diffcdc.errors import InputRefused
    from diffcdc.sinks.openmirroring.text import TextFormat
    from diffcdc.sinks.openmirroring.text_encode import encode_table

    fmt = TextFormat(**spec)
    odd = ",;|\t\"'\\/\r\n NULAnul0-:T\u3000\xa0\x1c\x85\u2028é€"
    text = st.text(st.sampled_from(list(odd)), max_size=5)
    when = st.datetimes(min_value=dt.datetime(2, 1, 1), max_value=dt.datetime(9998, 12, 31))
    zones = st.sampled_from([dt.timezone.utc, dt.timezone(dt.timedelta(hours=5, minutes=30))])
    types = {
        "s": (text, pa.string()),
        "big": (st.integers(-(2**63), 2**63 - 1), pa.int64()),
        "small": (st.integers(-128, 127), pa.int8()),
        "flag": (st.booleans(), pa.bool_()),
        "day": (st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)), pa.date32()),
        "local": (st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)), pa.timestamp("us")),
        "utc": (st.datetimes(dt.datetime(2, 1, 1), dt.datetime(9998, 12, 31), timezones=zones),
                pa.timestamp("us", tz="UTC")),
        "paris": (when.map(lambda t: t.replace(tzinfo=dt.timezone.utc)),
                  pa.timestamp("us", tz="Europe/Paris")),
        "x": (st.floats() | st.sampled_from([1e-4, 0.00009999999999999999, 1e10, -0.0, 5e-324,
                                             9999999999.999998, 123.0, 0.1, 1e16]), pa.float64()),
        "single": (st.floats(width=32), pa.float32()),
        "money": (st.decimals(-(10**15), 10**15, places=2), pa.decimal128(18, 2)),
        "tiny": (st.decimals(-(10**17), 10**17, places=20), pa.decimal128(38, 20)),
    }
    row = st.fixed_dictionaries({name: st.none() | values for name, (values, _) in types.items()})

    @settings(max_examples=examples(60), deadline=None)
    @given(st.lists(row, max_size=6))
    def check(rows):
        table = pa.table({name: pa.array([r[name] for r in rows], kind)
                          for name, (_, kind) in types.items()})
        try:
            expected = _text_one_value_at_a_time(fmt, table)
        except InputRefused:  # the same refusal (of the first refused column, not row)
            with pytest.raises(InputRefused, match="a value of column .* cannot be written"):
                encode_table(fmt, table)
            return
        assert encode_table(fmt, table) == expected

    check()


def test_snappy_text_files_follow_the_framing_format():
    """The stream identifier, then chunks of at most 64 KiB each with the masked CRC-32C of its
    uncompressed data (github.com/google/snappy framing_format.txt; CRC-32C of "123456789" is
    the standard check value 0xE3069283)."""
    import struct

    from diffcdc.sinks.openmirroring.text_codecs import _masked_crc, compress, decompress

    check = 0xE3069283
    assert _masked_crc(b"123456789") == (((check >> 15) | (check << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    data = bytes(range(256)) * 600  # 153,600 bytes: three chunks
    framed = compress(data, "snappy")
    assert framed.startswith(b"\xff\x06\x00\x00sNaPpY")
    i, chunks = 10, []
    while i < len(framed):
        kind, length = framed[i], int.from_bytes(framed[i + 1 : i + 4], "little")
        chunks.append((kind, struct.unpack("<I", framed[i + 4 : i + 8])[0]))
        i += 4 + length
    starts = range(0, len(data), 65536)
    assert [crc for _, crc in chunks] == [_masked_crc(data[s : s + 65536]) for s in starts]
    assert all(kind in (0x00, 0x01) for kind, _ in chunks) and decompress(framed) == data


def test_a_damaged_snappy_text_file_is_a_landing_mismatch():
    """A changed CRC, a reserved chunk type or a cut stream: refused, never returned as text."""
    from diffcdc.errors import LandingZoneMismatch
    from diffcdc.sinks.openmirroring.text_codecs import compress, decompress

    framed = compress(b"a,b\r\n" * 30_000, "snappy")
    bad_crc = framed[:14] + bytes([framed[14] ^ 1]) + framed[15:]
    reserved = framed[:10] + b"\x02\x01\x00\x00x" + framed[10:]
    for damaged in (bad_crc, reserved, framed[:-3]):
        with pytest.raises(LandingZoneMismatch, match="snappy"):
            decompress(damaged)


@pytest.mark.parametrize("name", ["__rowMarker__", "__ROWMARKER__", "__diffcdc_change"])
def test_columns_clashing_with_ours_are_refused(spark, tmp_path, name):
    ws = Workspace(str(tmp_path), keys=("id",), file_format="csv")
    ws.write("1.parquet", [{"id": 1, name: 1}])
    with pytest.raises(SchemaChangeError, match="clashes") as err:
        ws.run(spark)
    assert err.value.exit_code == 3 and ws.data_files() == []


@pytest.mark.integration
def test_adls_publishes_in_last_modified_order_and_drops(tmp_path, monkeypatch):
    """Last-Modified cannot be set on ADLS: files are stamped in order before they appear."""
    from diffcdc.sinks.openmirroring.landing import (
        PublishItem,
        file_sha256,
        open_landing,
        publish_time_ordered,
    )
    from tests.support.dfs_server import DfsServer

    for name in ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    items = []
    for n in range(1, 4):
        local = tmp_path / f"{n}.bin"
        local.write_bytes(bytes([n]) * (100 + n))
        items.append(PublishItem(str(local), f"T/{n:020d}.parquet", file_sha256(str(local)),
                                 local.stat().st_size))
    with DfsServer() as server:
        server.create_filesystem("ws")
        storage = open_landing(server.url("ws", "db/Files/LandingZone"), account_key=server.account_key,
                               retry_backoff=0.01, retry_backoff_max=0.05)
        try:
            assert publish_time_ordered(storage, items, 0.0) == 3
            times = [storage.stat(i.target).mtime for i in items]
            assert all(a < b for a, b in zip(times, times[1:])), times
            assert publish_time_ordered(storage, items, 0.0) == 0  # resumed: nothing twice
            assert [f.name for f in storage.list("T")] == [i.target[2:] for i in items]
            drop_folder(storage, "T", timeout=5)
            assert not storage.folder_exists("T")
        finally:
            storage.close()
        assert server.errors == []


def test_complex_columns_land_as_json_with_maps_sorted_at_every_depth(spark):
    from pyspark.sql import types as T

    from diffcdc.sinks.openmirroring.rows import to_landing_columns

    schema = T.StructType([
        T.StructField("id", T.IntegerType()),
        T.StructField("m", T.MapType(T.StringType(), T.MapType(T.StringType(), T.IntegerType()))),
        T.StructField("s t", T.StructType([
            T.StructField("a'b", T.MapType(T.IntegerType(), T.StringType())),
            T.StructField("z`", T.IntegerType()),
        ])),
        T.StructField("arr", T.ArrayType(T.MapType(T.StringType(), T.IntegerType()))),
        T.StructField("plain", T.StructType([T.StructField("p", T.IntegerType())])),
        T.StructField("nums", T.ArrayType(T.IntegerType())),
    ])
    rows = [
        (1, {"b": {"y": 1, "x": 2}, "a": None, "c": {}}, ({3: "c", 1: "a", 2: None}, 5),
         [{"q": 1, "p": 2}, None, {}], (1,), [3, None, 1]),
        (2, None, None, None, None, None),
        (3, {}, (None, None), [], (None,), []),
    ]
    # maps built in SQL keep their entries in the order given (unlike a Python dict's)
    unsorted = spark.sql(
        "SELECT 4 AS id, map('b', map('y', 1, 'x', 2), 'a', map('k', 0)) AS m, "
        "named_struct('a\\'b', map(3, 'c', 1, 'a'), 'z`', 5) AS `s t`, "
        "array(map('q', 1, 'p', 2)) AS arr, named_struct('p', 1) AS plain, array(2, 1) AS nums"
    )
    out = to_landing_columns(spark.createDataFrame(rows, schema).unionByName(unsorted))
    assert out.schema.simpleString() == (
        "struct<id:int,m:string,s t:string,arr:string,plain:string,nums:string>"
    )
    assert [list(r) for r in out.orderBy("id").collect()] == [
        [1, '{"a":null,"b":{"x":2,"y":1},"c":{}}', '{"a\'b":{"1":"a","2":null,"3":"c"},"z`":5}',
         '[{"p":2,"q":1},null,{}]', '{"p":1}', "[3,null,1]"],
        [2, None, None, None, None, None],
        [3, "{}", "{}", "[]", "{}", "[]"],
        [4, '{"a":{"k":0},"b":{"x":2,"y":1}}', '{"a\'b":{"1":"a","3":"c"},"z`":5}',
         '[{"p":2,"q":1}]', '{"p":1}', "[2,1]"],
    ]


AWKWARD_NAMES_KEY = "k.1 `x`"
AWKWARD_NAMES = pa.schema([
    (AWKWARD_NAMES_KEY, pa.int64()), ("it's, \"q\"", pa.string()), ("back\\slash;|", pa.float64()),
    ("s t", pa.struct([("a.b", pa.int32()), ("c'`", pa.string())])),
    ("m", pa.map_(pa.string(), pa.int32())),
])


def _named_row(k, text, number, ab, c, entries) -> dict:
    return dict(zip(AWKWARD_NAMES.names, (k, text, number, {"a.b": ab, "c'`": c}, entries)))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_column_names_with_separators_and_quotes_in_every_format(spark, tmp_path, variant):
    """Names holding the text formats' separators, quotes and escapes land in the header (and
    SchemaDefinition) so that the files replay to the snapshot exactly."""
    ws = Workspace(str(tmp_path), keys=(AWKWARD_NAMES_KEY,), **VARIANTS[variant])
    ws.write("0001.parquet", [
        _named_row(1, "a", 1.0, 1, "x", [("b", 1), ("a", 2)]),
        _named_row(2, None, None, 2, "y", None), _named_row(3, "c", -0.0, None, None, []),
    ], AWKWARD_NAMES)
    ws.write("0002.parquet", [
        _named_row(1, "a", 1.0, 1, "x", [("a", 2), ("b", 1)]),
        _named_row(2, None, None, 20, "y", None), _named_row(4, "it's", 2.5, 4, "`", [("c", None)]),
    ], AWKWARD_NAMES)
    report = ws.run(spark)
    assert [(s.inserted, s.updated, s.deleted) for s in report.snapshots] == [(3, 0, 0), (1, 1, 1)]
    ws.assert_mirror_equals(spark, "0002.parquet")
