"""Issue 40's CLI attacked as a hostile operator: ``diffcdc demo`` pointed at a folder that is
not its own (it used to delete whatever ``--dir`` held) or at a read-only one (a trace after
Spark started); each is one line, exit 2, before Spark starts, nothing deleted or made."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from diffcdc.cli import demo
from diffcdc.cli.main import main
from tests.support.disks import need_mounts, read_only


def _tree(root) -> dict[str, str]:
    return {os.path.relpath(os.path.join(d, f), root): Path(d, f).read_text()
            for d, _, files in os.walk(root) for f in files}


def _demo_folder(base) -> None:
    """What an earlier demo left in ``base`` (its folders, a file in each)."""
    for inner in ("snapshots/employees", "snapshots/departments", "landing/DemoEmployees",
                  "landing/DemoDepartments"):
        os.makedirs(base / inner)
        (base / inner / "f").write_text("demo")


@pytest.mark.parametrize(("planted", "named"), [
    ("notes.txt", "notes.txt"), ("landing/Orders/keep.parquet", "landing/Orders"),
    ("snapshots/orders/0001.csv", "snapshots/orders"), ("src/x.py", "src"),
])
def test_the_demo_refuses_a_folder_holding_what_it_did_not_make(tmp_path, capsys, planted,
                                                                 named):
    base = tmp_path / "project"
    _demo_folder(base)
    (base / planted).parent.mkdir(parents=True, exist_ok=True)
    (base / planted).write_text("precious")
    before = _tree(base)
    code = main(["demo", "--dir", str(base), "--state", str(tmp_path / "state"), "--json"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.splitlines() == [
        f"diffcdc: error: demo: --dir {base} holds {base / named}, which the demo did not make (it deletes its folder's earlier demo data; nothing was "
        "deleted) — give --dir a new or empty folder"]
    assert json.loads(out)["error"] == "UsageError"
    assert _tree(base) == before  # nothing deleted
    assert not (tmp_path / "state").exists()


def test_the_demo_refuses_a_dir_that_is_a_file(tmp_path, capsys):
    target = tmp_path / "a-file"
    target.write_text("precious")
    assert main(["demo", "--dir", str(target), "--state", str(tmp_path / "state")]) == 2
    assert capsys.readouterr().err.startswith(f"diffcdc: error: demo: cannot write --dir {target}")
    assert target.read_text() == "precious"


def test_the_demo_starts_over_in_an_earlier_demos_folder(tmp_path):
    base = tmp_path / "diffcdc-demo"
    _demo_folder(base)
    demo._refuse_foreign(str(base))  # all its own
    demo._clear(str(base))
    assert _tree(base) == {} and os.listdir(base) == []
    demo._refuse_foreign(str(tmp_path / "not-there"))  # nothing there: nothing to refuse


def test_the_demo_in_a_read_only_folder_is_one_line_before_spark(tmp_path, capsys):
    need_mounts()
    (tmp_path / "ro").mkdir()
    with read_only(str(tmp_path / "ro")) as folder:
        for args, named in (
            (["--dir", f"{folder}/demo", "--state", str(tmp_path / "state")],
             f"--dir {folder}/demo"),
            (["--dir", str(tmp_path / "demo"), "--state", f"{folder}/state"],
             f"--state {folder}/state"),
        ):
            assert main(["demo", *args]) == 2
            assert capsys.readouterr().err.splitlines() == [
                f"diffcdc: error: demo: cannot write {named}: Read-only file system — give the "
                "demo folders it can write: --dir and --state"]
        assert os.listdir(folder) == []


def _two_tables(tmp_path) -> str:
    (tmp_path / "src").mkdir()
    config = tmp_path / "two.toml"
    config.write_text("[diffcdc]\nstate = 'state'\n[tables.T]\nsource = 'src'\nkeys = ['id']\n"
                      "landing = 'landing'\n[tables.U]\nsource = 'src'\nkeys = ['id']\n"
                      "landing = 'landing'\n")
    return str(config)


@pytest.mark.parametrize(("given", "named"), [
    (["--max-delete-ratio", "0.01"], "--max-delete-ratio"),
    (["--exclude", "audit", "--min-row-ratio", "0.9"], "--exclude, --min-row-ratio"),
    (["--expectation-suite", "suite.json"], "--expectation-suite"),
    (["--schema-policy", "recreate"], "--schema-policy"),
    (["--codec", "zstd", "--format", "csv"], "--codec, --format"),
    (["--quote-char", "'"], "--quote-char"),
])
@pytest.mark.parametrize("command", [["run"], ["plan"], ["reload", "--table", "T", "--yes"],
                                     ["rollback", "--table", "T", "--to-version", "1", "--yes"]])
def test_a_table_option_with_config_is_refused_not_silently_unused(tmp_path, capsys, given,
                                                                   named, command):
    """``run --config c.toml --max-delete-ratio 0.01`` used to run with the file's gate (the
    option set only a table given by options): deletes the operator meant to stop were
    published with exit 0."""
    config = _two_tables(tmp_path)
    assert main([*command, "--config", config, *given]) == 2
    one = "it" if "," not in named else "them"
    verb = "it sets" if "," not in named else "they set"
    assert capsys.readouterr().err.splitlines() == [
        f"diffcdc: error: --config cannot be combined with {named}: {verb} the one table given "
        f"by --source, --keys, --table and --landing — set {one} in the config file (the "
        "table's fields, its quality, its sink's entry), or give the table by options instead "
        "of --config"]
    assert sorted(os.listdir(tmp_path)) == ["src", "two.toml"]  # nothing ran


def test_the_options_a_config_run_takes_still_go_with_it(tmp_path, capsys):
    config = _two_tables(tmp_path)
    assert main(["plan", "--config", config, "--only", "T", "--keep-versions", "3",
                 "--override-check", "T:delete_ratio", "--parallelism", "1",
                 "--json"]) == 0
    assert [t["table"] for t in json.loads(capsys.readouterr().out)["tables"]] == ["T"]


def test_a_landing_option_on_a_local_landing_is_one_line_not_a_type_error(spark, tmp_path,
                                                                         capsys):
    """``--landing-option max_workers=8`` (a remote root's option) on a local landing folder
    was ``unexpected error: TypeError: LocalStore.__init__() got an unexpected keyword``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "src").mkdir()
    pq.write_table(pa.table({"id": [1]}), tmp_path / "src" / "0001.parquet")
    code = main(["run", "--source", str(tmp_path / "src"), "--keys", "id", "--table", "T",
                 "--landing", str(tmp_path / "landing"), "--state", str(tmp_path / "state"),
                 "--landing-option", "max_workers=8", "--quiet"])
    assert code == 2
    (line,) = capsys.readouterr().err.splitlines()  # the run's one line (stamped, --quiet)
    assert line.endswith(
        f" table T, snapshot 0001.parquet, file {tmp_path / 'landing'}: sink open_mirroring: "
        "option(s) max_workers do not apply to a local folder — landing_options and "
        "--landing-option are for a landing root on ADLS Gen2 / OneLake (abfss://, https://): "
        "leave them out for a local one")
    assert not (tmp_path / "landing").exists()
    assert not (tmp_path / "state" / "T" / "log").exists()  # nothing committed


@pytest.mark.parametrize("only", ["", ",", " , "])
def test_an_empty_only_is_refused_not_every_table(tmp_path, capsys, only):
    """``--only "$TABLES"`` with an empty variable ran every table of the config."""
    config = _two_tables(tmp_path)
    for command in (["plan"], ["run"]):
        assert main([*command, "--config", config, "--only", only]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"diffcdc: error: file {config}: --only names no table — give table names, "
            "comma-separated; without --only every table of the config runs"]
    assert sorted(os.listdir(tmp_path)) == ["src", "two.toml"]


def test_an_unexpected_error_under_json_still_prints_the_error_document(tmp_path, capsys,
                                                                         monkeypatch):
    """``--json`` printed nothing on stdout for an error that is not diffcdc's own (a bug, a
    library's): a scheduler reading stdout got no document at all."""
    from diffcdc.cli import status

    def broken(args):  # noqa: ANN001, ANN202
        raise RuntimeError("a bug\nsecond line")

    monkeypatch.setattr(status, "cmd_status", broken)
    assert main(["status", "--state", str(tmp_path), "--json"]) == 1
    out, err = capsys.readouterr()
    assert err.splitlines() == ["diffcdc: unexpected error: RuntimeError: a bug — run with "
                                "--debug for the trace"]
    assert json.loads(out) == {"ok": False, "error": "RuntimeError", "exit_code": 1,
                               "message": "a bug", "table": None, "snapshot": None,
                               "path": None, "hint": "run with --debug for the trace"}
    assert main(["status", "--state", str(tmp_path)]) == 1
    assert capsys.readouterr().out == ""  # without --json: stderr only, as before
