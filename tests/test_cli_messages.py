"""Small wrong or raw answers of the command line (issue 27): every one a one-line error that
names the right option and a command that works as printed, and read-only commands that are
right for tables with a schema name and after a reload with new keys."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main
from tests.support.cli_runs import one_line_error


def write(path, rows: list[dict]) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs(tmp_path / "src")
    return tmp_path


def config(base, body: str = "", keys: str = "['id']", name: str = "T") -> str:
    path = base / "diffcdc.toml"
    path.write_text("[diffcdc]\nstate = 'state'\nlanding = 'landing'\n"
                    f"[tables.{name}]\nsource = 'src'\nkeys = {keys}\n{body}")
    return str(path)


# -- the option a message names -------------------------------------------------------------


@pytest.mark.parametrize("argv, option", [
    (["rollback", "--table", "Nope", "--to-version", "1", "--yes"], "--table"),
    (["reload", "--table", "Nope", "--yes"], "--table"),
    (["run", "--only", "Nope"], "--only"),
])
def test_an_unknown_table_is_named_by_the_option_that_gave_it(base, capsys, argv, option):
    path = config(base)
    assert main([*argv, "--config", path]) == 2
    err = one_line_error(capsys)
    assert f"{option} names unknown table(s) ['Nope']" in err and "tables of the config: T" in err
    assert "--only" not in err or option == "--only"
    assert not (base / "state").exists()


# -- status and plan of a table with a schema name ---------------------------------------------


def test_status_and_plan_of_a_table_with_a_schema_name(spark, base, capsys):
    path = config(base, "schema_name = 's'\n")
    write(base / "src" / "1.parquet", [{"id": 1, "v": "a"}])
    assert main(["run", "--config", path, "--quiet"]) == 0
    write(base / "src" / "2.parquet", [{"id": 1, "v": "b"}])
    capsys.readouterr()
    for extra in ([], ["--table", "T"]):
        assert main(["status", "--config", path, "--json", *extra]) == 0
        (entry,) = json.loads(capsys.readouterr().out)["tables"]  # once, not twice
        assert (entry["table"], entry["version"], entry["last_snapshot"]) == ("s.schema.T", 1, "1.parquet")
        assert entry["configured"] and entry["waiting"] == ["2.parquet"]
        assert main(["status", "--config", path, *extra]) == 0
        out = capsys.readouterr().out
        assert "no snapshot committed yet" not in out and "s.schema.T: waiting: 2.parquet" in out
        assert len([line for line in out.splitlines() if line.startswith("s.schema.T ")]) == 1
    assert main(["plan", "--config", path, "--json"]) == 0
    (plan,) = json.loads(capsys.readouterr().out)["tables"]
    assert plan["last_commit"]["version"] == 1
    assert [s["snapshot"] for s in plan["snapshots"]] == ["2.parquet"]


# -- plan refuses what the run refuses ---------------------------------------------------------


def test_plan_refuses_changed_keys_as_the_run_does(spark, base, capsys):
    write(base / "src" / "1.parquet", [{"id": 1, "id2": 10, "v": "a"}])
    assert main(["run", "--config", config(base), "--quiet"]) == 0
    write(base / "src" / "2.parquet", [{"id": 1, "id2": 10, "v": "b"}])
    capsys.readouterr()
    assert main(["plan", "--config", config(base, keys="['ID']")]) == 0  # same key, other case
    assert "would process 1 snapshot(s)" in capsys.readouterr().out
    path = config(base, keys="['id2']")
    assert main(["plan", "--config", path]) == 3
    out = capsys.readouterr().out
    assert "refused: table T, snapshot 2.parquet: key columns changed from ['id'] to ['id2']" in out
    assert f"diffcdc reload --table T --config {path} --yes" in out  # runs as printed
    assert main(["plan", "--config", path, "--json"]) == 3
    (plan,) = json.loads(capsys.readouterr().out)["tables"]
    assert plan["error"]["error"] == "KeyViolation" and plan["error"]["exit_code"] == 3
    log = sorted(os.listdir(base / "state" / "T" / "log"))
    assert main(["run", "--config", path]) == 3  # the run: the same refusal
    assert "key columns changed from ['id'] to ['id2']" in capsys.readouterr().err
    assert sorted(os.listdir(base / "state" / "T" / "log")) == log
    # a head version still to publish: the run publishes it, then refuses the snapshot
    os.remove(base / "state" / "T" / "log" / f"{1:020d}.published.open_mirroring.json")
    assert main(["plan", "--config", path]) == 3
    out = capsys.readouterr().out
    assert "unpublished: open_mirroring has not published version(s) 1 (the run publishes it first)" in out
    assert "refused: table T, snapshot 2.parquet: key columns changed" in out
    assert main(["plan", "--config", config(base, keys="['id']", body="fingerprint_bits = 128\n")]) == 1
    assert "state was fingerprinted with" in capsys.readouterr().out


# -- hints are commands that work as printed ---------------------------------------------------


def test_the_repair_hint_works_as_printed(spark, base, capsys):
    import re
    import shlex

    from diffcdc.state.store import TableState

    state_root = base / "my state"  # a path that needs quoting in a shell
    argv = ["run", "--source", str(base / "src"), "--keys", "id", "--table", "T", "--schema", "s",
            "--landing", "landing", "--state", str(state_root), "--quiet"]
    for n in (1, 2):
        write(base / "src" / f"{n}.parquet", [{"id": i, "v": f"{i}-{n}"} for i in range(5 + n)])
        assert main(argv) == 0
    state = TableState(str(state_root), "s.schema.T")
    folder = state.abspath(state.head().record.state_path)
    for name in os.listdir(folder):
        if name.endswith(".parquet"):
            os.remove(os.path.join(folder, name))
    write(base / "src" / "3.parquet", [{"id": 1, "v": "x"}])
    capsys.readouterr()
    assert main(argv) == 1
    (err,) = [line for line in capsys.readouterr().err.splitlines() if "is damaged" in line]
    assert "state version 2 is damaged" in err
    (command,) = re.findall(r"'(diffcdc repair [^']*(?:'[^']*'[^']*)*?)' \(exact", err)
    words = shlex.split(command)
    assert words[:2] == ["diffcdc", "repair"] and str(state_root) in words
    assert str(base / "src") in words and ["--schema", "s"] == words[4:6]
    assert main(words[1:]) == 0  # the hint, as printed
    assert "rebuilt the state of version 2" in capsys.readouterr().out
    assert main(argv) == 0  # the run goes on
    assert state.head().snapshot_id == "3.parquet"


# -- a link in a source folder that is no snapshot ---------------------------------------------


@pytest.mark.parametrize("name, target, fragment", [
    ("loop", ".", "entry loop is a link to the source folder itself: a loop, not a snapshot"),
    ("up", "..", "a folder above the source folder: a loop, not a snapshot"),
    ("latest.parquet", "1.parquet", "entry latest.parquet is a link to 1.parquet inside the "
     "source folder: a second name for it"),
    ("zz", "sub", "entry zz is a link to sub inside the source folder"),
])
def test_a_link_to_the_source_folder_or_into_it_is_refused(base, capsys, name, target, fragment):
    write(base / "src" / "1.parquet", [{"id": 1, "v": "a"}])
    os.makedirs(base / "src" / "sub")
    write(base / "src" / "sub" / "part-0.parquet", [{"id": 1, "v": "b"}])
    os.symlink(target, base / "src" / name)
    path = config(base)
    for command in ("plan", "run"):
        assert main([command, "--config", path, "--quiet"]) == 3
        out = capsys.readouterr()
        line = out.err.strip() if command == "run" else out.out
        assert fragment in line and "remove the link, or rename it to start with '.' or '_'" in line
    assert not (base / "landing").exists() and not os.path.exists(base / "state" / "T" / "log")


def test_a_link_to_a_snapshot_elsewhere_is_a_snapshot_and_an_ignored_name_is_ignored(base, capsys):
    write(base / "src" / "1.parquet", [{"id": 1, "v": "a"}])
    write(base / "elsewhere" / "2.parquet", [{"id": 1, "v": "b"}])
    os.symlink(base / "elsewhere" / "2.parquet", base / "src" / "2.parquet")
    os.symlink(".", base / "src" / ".loop")
    os.symlink("1.parquet", base / "src" / "_latest.parquet")
    assert main(["plan", "--config", config(base)]) == 0
    assert "would process 2 snapshot(s), oldest first: 1.parquet, 2.parquet" in capsys.readouterr().out


# -- verify after a reload with new keys -----------------------------------------------------


def test_verify_after_a_reload_with_new_keys_replays_the_current_incarnation(spark, broker, base, capsys):
    kafka = (f"sinks = [{{type = 'kafka', bootstrap_servers = '{broker.bootstrap}', "
             f"topic = 'newkeys-{os.getpid()}-{id(base)}'}}, "
             "{type = 'open_mirroring', landing = 'landing'}]\n")
    write(base / "src" / "1.parquet", [{"ID": i, "V": f"a{i}"} for i in range(4)])
    assert main(["run", "--config", config(base, kafka, keys="['ID']"), "--quiet"]) == 0
    write(base / "src" / "2.parquet", [{"ID2": i * 10, "V": f"b{i}"} for i in range(3)])
    path = config(base, kafka, keys="['id2']")  # the new key, spelt in another case
    assert main(["reload", "--config", path, "--table", "T", "--yes", "--quiet"]) == 0
    capsys.readouterr()
    verify = ["verify", "--config", path, "--table", "T", "--snapshot", str(base / "src" / "2.parquet")]
    assert main(verify) == 0
    out = capsys.readouterr().out
    assert "T [kafka]: identical" in out and "T [open_mirroring]: identical" in out
    assert main([*verify[:-1], str(base / "src" / "1.parquet")]) == 1  # a check that can fail
    assert "DIFFERENT" in capsys.readouterr().out
