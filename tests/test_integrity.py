"""Adversarial cases (issue 17): damaged state, shifting snapshots, hostile names, bad bytes.

Every refusal checks the error (class, exit code, a message naming the file), that no landing
file appeared, that state and landing are byte-identical to before, and that a later good run
(after the way out the message names) replays exactly.
"""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main as cli
from diffcdc.config import StateCompaction
from diffcdc.engine.repair import head_damage, repair_table
from diffcdc.engine.unexpected import unexpected_error
from diffcdc.errors import DiffcdcError, InputRefused, LandingZoneMismatch, StateError, StorageError
from diffcdc.state.chain import state_chain
from diffcdc.state.prune import prune_versions
from diffcdc.state.reports import TableReports
from diffcdc.state.store import TableState
from diffcdc.state.verify import verify_head
from diffcdc.storage.paths import data_files
from tests.support.workspace import Workspace

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def rows(ids, tag=""):
    return [{"id": i, "name": f"n{i}{tag}"} for i in ids]


@pytest.fixture
def ws(tmp_path):
    return Workspace(str(tmp_path), table="T")


@pytest.fixture
def many_parts(spark, monkeypatch):
    """State versions written as several part files (AQE would coalesce them into one, and a
    table this small is classified in one task: see ONE_TASK_BYTES)."""
    from diffcdc.engine import state_write

    monkeypatch.setattr(state_write, "ONE_TASK_BYTES", -1)
    before = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    yield
    spark.conf.set("spark.sql.adaptive.enabled", before)


def head_state_dir(ws) -> str:
    state = TableState(ws.state, ws.table.state_name)
    return state.abspath(state.head().record.state_path)


def refused(spark, ws, error=DiffcdcError, match=""):
    """Run, expect a refusal; prove nothing changed on disk; return the error."""
    before = ws.snapshot_state()
    with pytest.raises(error) as info:
        ws.run(spark)
    assert match in str(info.value), str(info.value)
    assert "\n" not in str(info.value)
    assert ws.snapshot_state() == before
    return info.value


def two_versions(spark, ws):
    ws.write("0001.parquet", rows(range(40)), SCHEMA)
    ws.run(spark)
    ws.write("0002.parquet", rows(range(5, 45), "b"), SCHEMA)
    ws.run(spark)


# -- state integrity -----------------------------------------------------------------------


def base_state_dir(ws) -> str:
    """The base the head's delta builds on."""
    state = TableState(ws.state, ws.table.state_name)
    chain = state_chain(state.commits())
    assert [link.delta for link in chain] == [False, True]
    return state.abspath(chain[0].path)


@pytest.mark.parametrize("where", ["delta", "base"])
@pytest.mark.parametrize("damage", ["lost part", "emptied part", "stray part", "lost version"])
def test_damaged_head_state_is_refused_then_repaired(spark, ws, many_parts, damage, where):
    """The head (version 2) is a delta on version 1's base: damage in either is refused, named
    by its version, and rebuilt from that version's snapshot."""
    two_versions(spark, ws)
    folder = head_state_dir(ws) if where == "delta" else base_state_dir(ws)
    damaged = 2 if where == "delta" else 1
    parts = list(data_files(folder))
    assert len(parts) > 1
    victim = os.path.join(folder, parts[0])
    if damage == "lost part":
        os.unlink(victim)
    elif damage == "emptied part":
        pq.write_table(pq.read_table(victim).slice(0, 0), victim)
    elif damage == "stray part":
        shutil.copy(victim, os.path.join(folder, "part-99999-stray.parquet"))
    else:
        shutil.rmtree(os.path.dirname(folder))
    ws.write("0003.parquet", rows(range(10, 50), "c"), SCHEMA)
    err = refused(spark, ws, StateError, f"state version {damaged} is damaged")
    assert err.exit_code == 1 and "diffcdc repair --table T" in str(err)
    assert head_damage(ws.table, ws.state).damaged
    result = repair_table(spark, ws.table, ws.state)
    assert result.repaired and result.version == damaged
    assert not head_damage(ws.table, ws.state).damaged
    report = ws.run(spark)
    assert [s.snapshot_id for s in report.snapshots] == ["0003.parquet"]
    ws.assert_mirror_equals(spark, "0003.parquet")
    assert ws.run(spark).outcome == "nothing to do"  # repaired state folders pruned cleanly


def test_repair_refuses_a_changed_snapshot_and_points_to_reload(spark, ws, many_parts):
    two_versions(spark, ws)
    os.unlink(os.path.join(head_state_dir(ws), next(iter(data_files(head_state_dir(ws))))))
    ws.write("0002.parquet", rows(range(5, 45), "b"), SCHEMA)  # same content, a new file
    with pytest.raises(StateError, match="not the file the version was made from.*reload"):
        repair_table(spark, ws.table, ws.state)
    assert cli(["reload", "--table", "T", "--source", ws.source, "--keys", "id",
                          "--landing", ws.landing, "--state", ws.state, "--yes", "--quiet",
                          "--max-delete-ratio", "1"]) == 0
    ws.assert_mirror_equals(spark, "0002.parquet")


def test_a_flipped_byte_is_found_by_the_full_check(spark, ws):
    two_versions(spark, ws)
    folder = head_state_dir(ws)
    path = os.path.join(folder, next(iter(data_files(folder))))
    with open(path, "r+b") as handle:  # same size, footer intact: only the checksum sees it
        handle.seek(4)
        byte = handle.read(1)
        handle.seek(4)
        handle.write(bytes([byte[0] ^ 0xFF]))
    found = head_damage(ws.table, ws.state)
    assert found.damaged and "checksum" in found.reason


def test_compaction_writes_a_base_and_pruning_keeps_what_kept_versions_build_on(spark, tmp_path):
    """max_deltas = 2: versions 1 (base), 2, 3 (deltas), 4 (a base again), 5 (a delta); with
    keep_versions = 2 the folders of every kept version's chain stay, the rest go."""
    ws = Workspace(str(tmp_path), table="T",
                   state_compaction=StateCompaction(max_deltas=2, max_delta_ratio=100.0))
    state = TableState(ws.state, "T")
    chains, folders = [], []
    for i in range(1, 6):
        ws.write(f"{i:04d}.parquet", rows(range(i, 30 + i), str(i % 2)), SCHEMA)
        ws.run(spark, keep_versions=2)
        commits = state.commits()
        chains.append([link.version for link in state_chain(commits)])
        names = {c.record.version_dir.split("/")[-1]: c.version for c in commits}
        folders.append(sorted(names[n] for n in os.listdir(state.versions_dir)))
        ws.assert_mirror_equals(spark, f"{i:04d}.parquet")
    assert chains == [[1], [1, 2], [1, 2, 3], [4], [4, 5]]
    assert folders == [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4], [4, 5]]
    assert verify_head(TableState(ws.state, "T")).ok


def test_negative_retention_never_prunes_the_head(spark, ws):
    two_versions(spark, ws)
    state = TableState(ws.state, "T")
    prune_versions(state, -5)
    assert os.path.isdir(head_state_dir(ws)) and ws.run(spark).outcome == "nothing to do"


# -- snapshots that shift under a run ----------------------------------------------------------


def test_snapshot_rewritten_in_place_with_mtime_restored_is_refused(spark, ws, monkeypatch):
    ws.write("0001.parquet", rows(range(10)), SCHEMA)
    ws.run(spark)
    path = ws.write("0002.parquet", rows(range(10), "x"), SCHEMA)
    import diffcdc.engine.snapshot as snapshot_module

    real = snapshot_module.crash_point

    def rewrite(name, *args, **kwargs):
        if name == "after_state_staged":
            st = os.stat(path)
            with open(path, "r+b") as handle:  # same size, same mtime afterwards
                data = handle.read()
                handle.seek(0)
                handle.write(data.replace(b"n1x", b"n1y"))
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            assert os.stat(path).st_size == st.st_size
        real(name, *args, **kwargs)

    monkeypatch.setattr(snapshot_module, "crash_point", rewrite)
    err = refused(spark, ws, InputRefused, "snapshot changed while it was being processed")
    assert err.exit_code == 3
    monkeypatch.setattr(snapshot_module, "crash_point", real)
    ws.run(spark)
    ws.assert_mirror_equals(spark, "0002.parquet")


def test_dangling_symlink_snapshot_is_refused_with_exit_3(spark, ws):
    ws.write("0001.parquet", rows(range(5)), SCHEMA)
    ws.run(spark)
    os.symlink(os.path.join(ws.root, "gone.parquet"), os.path.join(ws.source, "0002.parquet"))
    err = refused(spark, ws, InputRefused, "does not exist")
    assert err.exit_code == 3


# -- names are literal -----------------------------------------------------------------------


def test_glob_characters_in_snapshot_names_and_state_root_are_literal(spark, tmp_path):
    ws = Workspace(str(tmp_path / "root[1]{a,b}"), table="T")
    ws.write("0001.parquet", rows(range(5)), SCHEMA)
    ws.write("0001x{a,b}.parquet", rows(range(4, 12), "h"), SCHEMA)
    ws.write("0002.parquet", rows(range(100, 103)), SCHEMA)  # what the glob 000[2] matches
    ws.write("000[2].parquet", rows(range(3, 9), "g"), SCHEMA)
    report = ws.run(spark)
    assert [s.snapshot_id for s in report.snapshots] == [
        "0001.parquet", "0001x{a,b}.parquet", "0002.parquet", "000[2].parquet"]
    ws.assert_mirror_equals(spark, "000[2].parquet")


# -- bytes that do not decode, files that do not parse ------------------------------------------


def test_undecodable_csv_is_refused_naming_file_and_line(spark, tmp_path):
    ws = Workspace(str(tmp_path), table="T")
    path = os.path.join(ws.source, "0001.csv")
    with open(path, "wb") as handle:
        handle.write("id,name\n1,Zoë\n".encode() + b"2,Fran\xe7ois\n")
    err = refused(spark, ws, InputRefused, "line 3 is not valid utf-8")
    assert err.exit_code == 3 and err.path == path and "csv_encoding" in str(err)
    latin = Workspace(str(tmp_path / "latin"), table="T", csv_encoding="latin-1")
    shutil.copy(path, os.path.join(latin.source, "0001.csv"))
    latin.run(spark)
    names = sorted(r["name"] for r in latin.mirror().replayed().rows)
    assert names == ["François", "ZoÃ«"]  # every byte is a latin-1 character


@pytest.mark.parametrize("how", ["footer", "pages"])
def test_corrupt_parquet_part_is_named_without_a_java_trace(spark, ws, how):
    ws.write("0001.parquet", rows(range(5)), SCHEMA)
    ws.run(spark)
    folder = os.path.join(ws.source, "0002")
    os.makedirs(folder)
    pq.write_table(pa.Table.from_pylist(rows(range(5, 10)), schema=SCHEMA), os.path.join(folder, "part-0.parquet"))
    bad = os.path.join(folder, "part-1.parquet")
    pq.write_table(pa.Table.from_pylist(rows(range(10, 2000)), schema=SCHEMA), bad,
                   compression="zstd")
    with open(bad, "rb") as handle:
        data = bytearray(handle.read())
    if how == "footer":
        data = data[:-100]
    else:  # compressed data pages: garbage where the values are, footer intact
        data[4:68] = b"\xff" * 64  # the first page header
    with open(bad, "wb") as handle:
        handle.write(bytes(data))
    err = refused(spark, ws, InputRefused, "cannot read snapshot")
    assert err.path.endswith("part-1.parquet") and "calling o" not in str(err)
    shutil.rmtree(folder)
    ws.write("0002.parquet", rows(range(5, 10)), SCHEMA)
    ws.run(spark)
    ws.assert_mirror_equals(spark, "0002.parquet")


def test_full_disk_says_so():
    error = unexpected_error(OSError(28, "No space left on device"), state_dir="/s/T")
    assert isinstance(error, StorageError) and "no space left" in str(error) and "/s/T" in str(error)
    java = RuntimeError("An error occurred while calling o88.parquet.\n: org.apache.spark."
                        "SparkException: Job aborted.\nCaused by: java.io.IOException: No space "
                        "left on device")
    assert isinstance(unexpected_error(java), StorageError)


# -- reports, landing checks -------------------------------------------------------------------


def test_a_failing_report_write_never_changes_the_outcome(spark, ws, monkeypatch):
    ws.write("0001.parquet", rows(range(5)), SCHEMA)

    def broken(self, report):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TableReports, "save", broken)
    report = ws.run(spark)
    assert report.outcome == "ok" and report.error is None
    ws.assert_mirror_equals(spark, "0001.parquet")


def test_foreign_metadata_edit_is_refused_before_the_commit(spark, ws):
    ws.write("0001.parquet", rows(range(5)), SCHEMA)
    ws.run(spark)
    with open(os.path.join(ws.folder, "_metadata.json"), "w") as handle:
        handle.write('{"keyColumns": ["id"], "fileFormat": "parquet", "extra": 1}')
    ws.write("0002.parquet", rows(range(3, 9)), SCHEMA)
    head = TableState(ws.state, "T").head().version
    refused(spark, ws, LandingZoneMismatch, "changed by someone else")
    assert TableState(ws.state, "T").head().version == head
    with open(os.path.join(ws.folder, "_metadata.json"), "w") as handle:
        handle.write('{"keyColumns": ["id"]}')
    ws.run(spark)
    ws.assert_mirror_equals(spark, "0002.parquet")


def test_null_key_rows_are_counted_as_rows(spark, ws):
    ws.write("0001.parquet", [{"id": None, "name": "a"}, {"id": None, "name": "b"}, {"id": 1, "name": "c"}], SCHEMA)
    with pytest.raises(DiffcdcError) as info:
        ws.run(spark, quality=None)
    (gate,) = info.value.report.refused_gate
    checks = {c["name"]: c for c in gate["checks"]}
    assert checks["keys_not_null"]["observed"] == 2


def test_ragged_csv_names_the_file(spark, ws):
    with open(os.path.join(ws.source, "0001.csv"), "w", encoding="utf-8") as handle:
        handle.write("id,name\n1,a\n2,b\n")
    ws.run(spark)
    path = os.path.join(ws.source, "0002.csv")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("id,name\n1,a\n2,b,extra,fields\n")
    err = refused(spark, ws, InputRefused, "cannot read snapshot")
    assert err.exit_code == 3 and err.path == path and "calling o" not in str(err)


def strip_manifests(ws) -> TableState:
    """Make the records look like the previous diffcdc's (no manifest, no snapshot identity)."""
    state = TableState(ws.state, "T")
    for commit in state.commits():
        path = os.path.join(state.storage.describe("log"), f"{commit.version:020d}.json")
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
        del record["state_manifest"], record["snapshot_identity"]
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
    state = TableState(ws.state, "T")  # records never change: an instance reads each once
    assert state.head().record.state_manifest is None
    return state


def test_versions_committed_before_manifests_keep_working(spark, ws):
    two_versions(spark, ws)
    strip_manifests(ws)
    ws.write("0003.parquet", rows(range(10, 50), "c"), SCHEMA)
    ws.run(spark)
    ws.assert_mirror_equals(spark, "0003.parquet")
    assert TableState(ws.state, "T").head().record.state_manifest is not None


def test_a_lost_folder_is_refused_without_a_manifest_too(spark, ws):
    two_versions(spark, ws)
    state = strip_manifests(ws)
    shutil.rmtree(state.abspath(state.head().record.version_dir))
    ws.write("0003.parquet", rows(range(1, 3)), SCHEMA)
    refused(spark, ws, StateError, "the state folder is missing")


# -- names and settings: refused before anything runs (exit 2) -----------------------------


def cli_run(tmp_path, *extra):
    return cli(["run", "--source", str(tmp_path / "src"), "--keys", "id", "--landing",
                str(tmp_path / "landing"), "--state", str(tmp_path / "state"), *extra])


@pytest.mark.parametrize("args, fragment", [
    (["--table", "a[1]"], "as patterns"),
    (["--table", "a{b,c}"], "as patterns"),
    (["--table", "x" * 256], "at most 255"),
    (["--table", "é" * 128], "at most 255"),
    (["--table", "t" * 200, "--schema", "s" * 60], "too long for a state folder"),
    (["--table", "T", "--keep-versions", "-5"], "option --keep-versions"),
    (["--table", "T", "--max-delete-ratio", "inf"], "finite"),
    (["--table", "T", "--min-row-ratio", "nan"], "finite"),
])
def test_unusable_names_and_settings_exit_2(tmp_path, capsys, args, fragment):
    os.makedirs(tmp_path / "src")
    assert cli_run(tmp_path, *args) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "state").exists() and not (tmp_path / "landing").exists()


@pytest.mark.parametrize("line, fragment", [
    ("state = 5", "field state"),
    ("keep_versions = -5", "field keep_versions"),
    ("parallelism = 0", "field parallelism"),
])
def test_bad_settings_in_a_config_file_exit_2(tmp_path, capsys, line, fragment):
    path = tmp_path / "c.toml"
    path.write_text(f"[diffcdc]\n{line}\n[tables.T]\nsource = 's'\nkeys = ['id']\nlanding = 'l'\n")
    assert cli(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1, err


# -- rollback to a kept version ----------------------------------------------------------------


def test_rollback_publishes_the_way_back_then_runs_go_on(spark, ws, capsys):
    base = ["--source", ws.source, "--keys", "id", "--table", "T", "--landing", ws.landing,
            "--state", ws.state, "--quiet", "--max-delete-ratio", "1", "--min-rows-for-ratios", "0"]
    ws.write("0001.parquet", rows(range(20)), SCHEMA)
    ws.write("0002.parquet", rows(range(5, 25), "b"), SCHEMA)
    ws.run(spark)
    ws.write("0003.parquet", rows(range(30, 33), "bad"), SCHEMA)  # a bad extract got through
    ws.run(spark)
    assert cli(["rollback", *base, "--to-version", "2"]) == 2  # no --yes
    assert cli(["rollback", *base, "--to-version", "3", "--yes"]) == 2  # the head already
    capsys.readouterr()
    assert cli(["rollback", *base, "--to-version", "2", "--yes"]) == 3  # the gate applies
    assert cli(["rollback", *base, "--to-version", "2", "--yes",
                "--override-check", "row_count_ratio"]) == 0
    head = TableState(ws.state, "T").head()
    assert (head.version, head.snapshot_id, head.record.extra["rollback_to"]) == (4, "0002.parquet", 2)
    ws.assert_mirror_equals(spark, "0002.parquet")
    assert ws.run(spark).outcome == "nothing to do"  # 0003 is not taken again
    ws.write("0004.parquet", rows(range(8, 28), "d"), SCHEMA)
    assert [s.snapshot_id for s in ws.run(spark).snapshots] == ["0004.parquet"]
    ws.assert_mirror_equals(spark, "0004.parquet")


def test_rollback_refuses_a_replaced_snapshot(spark, ws, capsys):
    two_versions(spark, ws)
    ws.write("0001.parquet", rows(range(40)), SCHEMA)  # same rows, a new file
    before = ws.snapshot_state()
    assert cli(["rollback", "--source", ws.source, "--keys", "id", "--table", "T", "--landing",
                ws.landing, "--state", ws.state, "--to-version", "1", "--yes"]) == 3
    assert "not the file version 1 was made from" in capsys.readouterr().err
    assert ws.snapshot_state() == before


def test_the_state_schema_is_known_without_reading_a_footer(spark, tmp_path):
    """Runs read the previous state with the schema its commit implies (no Spark job to infer
    it): it is exactly what was written, for typed composite keys spelled in any case."""
    import datetime as dt
    from decimal import Decimal

    from diffcdc.engine.state_write import state_schema

    ws = Workspace(str(tmp_path), table="T", keys=("k", "AT", "amount"), fingerprint_bits=128)
    schema = pa.schema([("K", pa.string()), ("at", pa.timestamp("us", tz="UTC")),
                        ("Amount", pa.decimal128(12, 2)), ("v", pa.string())])
    when = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    ws.write("0001.parquet", [{"K": "a", "at": when, "Amount": Decimal("1.50"), "v": "x"}], schema)
    ws.run(spark)
    state = TableState(ws.state, "T")
    record = state.head().record
    written = spark.read.parquet(state.abspath(record.state_path)).schema
    assert [(f.name, f.dataType) for f in state_schema(record)] == [
        (f.name, f.dataType) for f in written]
