"""A sink's target inside the table's source folder or the state root (issue 38) is refused when
the config is loaded: exit 2, one line naming the table, the sink and both paths, before
anything is read or written. Otherwise the sink's output would be read as a snapshot (a landing
root that is the source folder, a Delta table under it), or the state and a sink's output taken
for each other. Paths are compared resolved (relative to the file, symbolic links)."""

from __future__ import annotations

import os

import pytest

from diffcdc.cli.main import main
from diffcdc.config import TableConfig
from diffcdc.config_file import load_config
from diffcdc.errors import ConfigError


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs(tmp_path / "src")
    (tmp_path / "conf").mkdir()
    return tmp_path


def refused(base, capsys, text: str, *fragments: str) -> str:
    """The config ``text`` is refused by run, plan and status alike: exit 2, one line holding
    every fragment; nothing is written."""
    before = sorted(os.listdir(base))
    path = base / "conf" / "diffcdc.toml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        load_config(str(path))
    for command in (["run"], ["plan"], ["status"]):
        assert main([*command, "--config", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("diffcdc: error: "), err
        for fragment in fragments:
            assert fragment in err, err
    assert sorted(os.listdir(base)) == before  # no state, no landing folder made
    return err


def table(sinks: str, source: str = "../src", top: str = "") -> str:
    return f"[diffcdc]\n{top}\n[tables.T]\nsource = '{source}'\nkeys = ['id']\nsinks = [{sinks}]\n"


def test_a_landing_root_that_is_the_source_folder_is_refused(base, capsys):
    src = str(base / "src")
    err = refused(base, capsys, table("{type = 'open_mirroring', name = 'fabric', landing = '../src'}"),
                  "table 'T' sink 'fabric' (landing)", f"writes to {src}, which is the table's "
                  f"source folder {src}", "read as a snapshot", "outside it")
    assert "table T" in err


def test_a_delta_table_under_the_source_folder_is_refused(base, capsys):
    src = str(base / "src")
    refused(base, capsys, table("{type = 'delta', name = 'lake', path = '../src/lake/t'}"),
            "sink 'lake' (path)", f"{src}/lake/t, which lies inside the table's source folder "
            f"{src}")
    refused(base, capsys, table("{type = 'delta', name = 'lake', path = 'x', "
                                "changelog_path = '../src/log'}"),
            "sink 'lake' (changelog_path)", f"{src}/log")


def test_a_landing_root_around_the_source_folder_is_refused(base, capsys):
    os.makedirs(base / "zone" / "extracts" / "T")
    refused(base, capsys, table("{type = 'open_mirroring', landing = '../zone'}",
                                source="../zone/extracts/T"),
            f"writes to {base / 'zone'}, which holds the table's source folder "
            f"{base / 'zone' / 'extracts' / 'T'}")


def test_the_source_folder_through_a_symbolic_link_is_refused(base, capsys):
    os.symlink(base / "src", base / "link")
    refused(base, capsys, table("{type = 'delta', name = 'lake', path = '../link/t'}"),
            "sink 'lake' (path)", "lies inside the table's source folder")


def test_a_sink_target_inside_the_state_root_or_around_it_is_refused(base, capsys):
    state = str(base / "state")
    refused(base, capsys, table("{type = 'delta', name = 'lake', path = '../state/lake'}",
                                top="state = '../state'"),
            "table 'T' sink 'lake' (path)", f"{state}/lake, which lies inside the state root "
            f"{state}", "the state would be taken for each other")
    refused(base, capsys, table("{type = 'open_mirroring', name = 'fabric', landing = '../zone'}",
                                top="state = '../zone/state'"),
            "sink 'fabric' (landing)", f"which holds the state root {base / 'zone' / 'state'}")
    refused(base, capsys, table("{type = 'open_mirroring', landing = '../l'}",
                                top="state = '../state'\nstate_data = '../l/data'"),
            "which holds the state data folder")


def test_the_command_line_refuses_the_same(base, capsys):
    """`run` with options: a landing root in the source folder, a state root in the landing."""
    assert main(["run", "--table", "T", "--keys", "id", "--source", "src", "--landing",
                 "src/out"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "lies inside the table's source folder src" in err
    assert main(["run", "--table", "T", "--keys", "id", "--source", "src", "--landing", "out",
                 "--state", "out/T/state"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds the state root out/T/state" in err
    assert sorted(os.listdir(base)) == ["conf", "src"]


def test_folders_side_by_side_are_fine_and_other_sources_are_not_compared(base):
    TableConfig(name="T", source=str(base / "src"), keys=["id"], landing=str(base / "srcx"))
    TableConfig(name="T", source={"type": "dataframe"}, keys=["id"], landing=str(base / "src"))
    path = base / "conf" / "diffcdc.toml"
    path.write_text(table("{type = 'open_mirroring', landing = '../landing'}",
                          top="state = '../state'"))
    assert load_config(str(path)).tables[0].sinks[0].landing == str(base / "landing")


def test_commands_that_locate_a_table_by_its_landing_root_alone_still_work(base, capsys):
    """verify/drop with --landing and repair with --source only need a location: their
    placeholders never clash with the folder given."""
    main(["drop", "--table", "T", "--landing", str(base), "--state", "state"])
    assert "source folder" not in capsys.readouterr().err
    main(["repair", "--table", "T", "--source", "src", "--state", "state"])
    assert "source folder" not in capsys.readouterr().err


def test_a_sink_inside_another_tables_source_folder_is_refused(base, capsys):
    """Table A's landing root is table B's source folder: B would read A's output."""
    os.makedirs(base / "srcb")
    text = ("[diffcdc]\nstate = '../state'\n"
            "[tables.A]\nsource = '../src'\nkeys = ['id']\n"
            "sinks = [{type = 'open_mirroring', name = 'fabric', landing = '../srcb/zone'}]\n"
            "[tables.B]\nsource = '../srcb'\nkeys = ['id']\n"
            "sinks = [{type = 'delta', path = '../lake/b'}]\n")
    refused(base, capsys, text, "table 'A' sink 'fabric' (landing)",
            f"{base / 'srcb' / 'zone'}, which lies inside the source folder of table 'B' "
            f"{base / 'srcb'}", "read as that table's snapshots")


def test_a_source_folder_and_the_state_root_one_inside_the_other_are_refused(base, capsys):
    """The state root inside a source folder would be read as a snapshot (and the reverse
    taken for a table's state)."""
    refused(base, capsys, table("{type = 'delta', path = '../lake/t'}", top="state = '../src/state'"),
            f"table 'T' reads its snapshots from {base / 'src'}",
            f"the state root {base / 'src' / 'state'}")
    assert main(["run", "--table", "T", "--keys", "id", "--source", ".", "--landing",
                 "../elsewhere"]) == 2  # the default ./state inside the source folder "."
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "reads its snapshots from ." in err, err
