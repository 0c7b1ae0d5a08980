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
