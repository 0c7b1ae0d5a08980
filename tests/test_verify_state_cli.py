"""``diffcdc verify --state``: a real run's head state is OK; a tampered one is DIFFERENT.

The state is tampered the way a bug or a hand edit would: a state Parquet file rewritten with
one fingerprint changed, a live row dropped or a key duplicated. With the commit's manifest
unchanged the files check catches it (checksums); with the manifest rewritten to agree (a state
whose files are consistent but whose content is wrong) the rows and fingerprint checks do.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main
from diffcdc.core.fingerprint import FP
from diffcdc.sources.identity import identify
from diffcdc.state.chain import state_chain
from diffcdc.state.integrity import describe_state
from diffcdc.state.store import TableState


def write(path: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def rows(ids, tag: str = "") -> list[dict]:
    return [{"id": i, "v": f"v{i}{tag}", "d": i / 4} for i in ids]


@pytest.fixture(scope="module")
def ran(spark, tmp_path_factory):
    """Two real runs: 0..29, then 0..24 with 0..2 changed and 30, 31 added (5 tombstones)."""
    base = tmp_path_factory.mktemp("ran")
    write(str(base / "src" / "1.parquet"), rows(range(30)))
    run = ["run", "--source", str(base / "src"), "--keys", "id", "--table", "T",
           "--landing", str(base / "landing"), "--state", str(base / "state"), "--exclude", "d"]
    assert main(run) == 0
    write(str(base / "src" / "2.parquet"), rows(range(3), "*") + rows(range(3, 25)) + rows([30, 31]))
    assert main(run) == 0
    return base


@pytest.fixture
def table(ran, tmp_path, monkeypatch):
    """A copy of the runs' folders for one test, its head record pointing at the copied snapshot."""
    for name in ("src", "state"):
        shutil.copytree(ran / name, tmp_path / name)
    log = head_log(tmp_path)
    with open(log, encoding="utf-8") as handle:
        record = json.load(handle)
    snapshot = str(tmp_path / "src" / "2.parquet")
    record["snapshot_path"] = snapshot
    record["snapshot_identity"] = [asdict(f) for f in identify(snapshot)]
    with open(log, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    monkeypatch.chdir(tmp_path)  # VERIFY's relative state root
    return tmp_path


VERIFY = ["verify", "--table", "T", "--state", "state"]


def head_log(base) -> str:
    """The head's commit record file."""
    state = TableState(str(base / "state"), "T")
    return os.path.join(state.storage.describe("log"), f"{state.head().version:020d}.json")


def tamper(base, change, *, spark=None) -> None:
    """Rewrite the state part holding key 7 with ``change`` applied (a part of the base the
    head's delta builds on: key 7 is unchanged since the first run); with ``spark``: make that
    commit's manifest agree with the rewritten files (described as a run describes them)."""
    state = TableState(str(base / "state"), "T")
    chain = state_chain(state.commits())
    assert [link.delta for link in chain] == [False, True]  # the head: a delta on version 1
    folder = state.abspath(chain[0].path)
    log = os.path.join(state.storage.describe("log"), f"{chain[0].version:020d}.json")
    parts = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".parquet"))
    (part,) = [p for p in parts if 7 in pq.read_table(p).column("id").to_pylist()]
    pq.write_table(change(pq.read_table(part)), part)
    if spark is not None:
        with open(log, encoding="utf-8") as handle:
            record = json.load(handle)
        record["state_manifest"] = describe_state(spark, folder, "T").to_dict()
        with open(log, "w", encoding="utf-8") as handle:
            json.dump(record, handle)


def fingerprint_of_7_changed(state: pa.Table) -> pa.Table:
    fp = [v + 1 if k == 7 else v for k, v in zip(state.column("id").to_pylist(), state.column(FP).to_pylist())]
    return state.set_column(state.schema.get_field_index(FP), FP, pa.array(fp, pa.int64()))


def row_7_dropped(state: pa.Table) -> pa.Table:
    return state.filter(pc.not_equal(state.column("id"), 7))


def row_7_twice(state: pa.Table) -> pa.Table:
    return pa.concat_tables([state, state.filter(pc.equal(state.column("id"), 7))])


def lines(out: str) -> dict[str, str]:
    return {line.split(": ")[1]: line for line in out.splitlines() if line.startswith("T: ")}


def test_real_run_verifies(table, capsys):
    assert main(VERIFY) == 0
    out = lines(capsys.readouterr().out)
    assert "T: files: OK — version 2:" in out["files"] and "checksums" in out["files"]
    assert out["rows"] == "T: rows: OK — 27 live rows and 5 tombstones as the commit recorded; live keys unique"
    assert out["fingerprints"].startswith("T: fingerprints: OK — state OK: 27 live keys match 27 snapshot rows")
    assert main([*VERIFY, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["version"] == 2
    assert [(c["name"], c["status"]) for c in doc["checks"]] == [("files", "ok"), ("rows", "ok"), ("fingerprints", "ok")]


def test_tampered_file_fails_the_checksums(table, capsys):
    tamper(table, fingerprint_of_7_changed)
    assert main(VERIFY) == 1
    out = capsys.readouterr().out
    assert "T: files: FAILED — version 2: its state builds on version 1, whose " in out
    assert ".parquet" in out
    assert "rows:" not in out  # a damaged state stops the later checks


@pytest.mark.parametrize(
    ("change", "rows_line", "fingerprints_line"),
    [
        (fingerprint_of_7_changed, "OK", "FAILED — state MISMATCH: 1 fingerprint mismatch (e.g. {'id': 7})"),
        (row_7_dropped, "FAILED — 26 live rows where the commit recorded 27",
         "FAILED — state MISMATCH: 1 missing in state (e.g. {'id': 7})"),
        (row_7_twice, "FAILED — 28 live rows where the commit recorded 27; 1 key(s) with more than one "
         "live row (e.g. {'id': 7})", "FAILED — state MISMATCH: 1 duplicate state keys (e.g. {'id': 7})"),
    ],
)
def test_consistent_files_with_wrong_content_are_different(spark, table, capsys, change, rows_line, fingerprints_line):
    tamper(table, change, spark=spark)
    assert main(VERIFY) == 1
    out = lines(capsys.readouterr().out)
    assert out["files"].startswith("T: files: OK")
    assert out["rows"].startswith(f"T: rows: {rows_line}")
    assert out["fingerprints"].startswith(f"T: fingerprints: {fingerprints_line}")


def test_snapshot_gone_or_rewritten_leaves_the_structural_checks(spark, table, capsys):
    snapshot = str(table / "src" / "2.parquet")
    shutil.copy(snapshot, table / "kept.parquet")
    os.unlink(snapshot)
    assert main(VERIFY) == 0
    out = lines(capsys.readouterr().out)
    assert out["rows"].startswith("T: rows: OK")
    assert out["fingerprints"] == (f"T: fingerprints: SKIPPED — the snapshot {snapshot} is gone; only "
                                   "the structural checks ran")
    shutil.copy(table / "kept.parquet", snapshot)  # same bytes, another file: not trusted
    assert main(VERIFY) == 0
    assert "was replaced or rewritten since version 2 was committed" in capsys.readouterr().out
    os.unlink(snapshot)
    tamper(table, row_7_dropped, spark=spark)  # the structural checks still catch this
    assert main(VERIFY) == 1
    assert "T: rows: FAILED — 26 live rows where the commit recorded 27" in capsys.readouterr().out


def test_every_table_of_a_config_and_usage(spark, table, capsys):
    (table / "diffcdc.toml").write_text(
        '[diffcdc]\nstate = "state"\nlanding = "landing"\n\n'
        '[tables.T]\nsource = "src"\nkeys = ["id"]\nexclude = ["d"]\n\n'
        '[tables.New]\nsource = "src_new"\nkeys = ["id"]\n'
    )
    assert main(["verify", "--config", "diffcdc.toml", "--state", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and [(t["table"], t["version"]) for t in doc["tables"]] == [("T", 2), ("New", None)]
    assert doc["tables"][1]["checks"] == [{"name": "head", "status": "skipped", "detail": "no committed version yet", "data": {}}]
    tamper(table, fingerprint_of_7_changed, spark=spark)
    assert main(["verify", "--config", "diffcdc.toml", "--state"]) == 1
    assert "T: fingerprints: FAILED" in capsys.readouterr().out
    assert main(["verify", "--table", "New", "--state", "state"]) == 1
    assert "table New" in capsys.readouterr().err
    assert main(["verify", "--table", "T"]) == 2  # neither --snapshot nor --state
    assert "verify needs --snapshot" in capsys.readouterr().err
    assert main(["verify", "--state", "state"]) == 2
    assert "needs --table or --config" in capsys.readouterr().err
