"""Issue 38, messages and smaller gaps: each answer of the command line names what went wrong
and a way out that works as printed; names from the command line stay inside their roots."""

from __future__ import annotations

import os

import pytest

from diffcdc.cli.main import main


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("diffcdc: error: "), err
    return err


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs(tmp_path / "src")
    return tmp_path


TABLE = "[diffcdc]\nstate = 'state'\n[tables.T]\nsource = 'src'\nkeys = ['id']\n"


# -- a config file ---------------------------------------------------------------------------


def test_a_config_file_with_a_byte_order_mark_is_read(base, capsys):
    path = base / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + (TABLE + "landing = 'landing'\n").encode())
    assert main(["status", "--config", str(path)]) == 0
    assert "T: no snapshot committed yet" in capsys.readouterr().out


def test_a_config_file_that_is_not_utf8_is_one_line(base, capsys):
    path = base / "latin.toml"
    path.write_bytes(TABLE.encode() + b"landing = 'l\xe4nding'\n")
    assert main(["status", "--config", str(path)]) == 2
    err = one_line_error(capsys)
    assert "latin.toml: not UTF-8 text" in err and "save the file as UTF-8" in err


@pytest.mark.parametrize("sink, fragment", [
    ("{ name = 'lz', landing = 'landing' }", "table T, sink 'lz': the sink has no `type`"),
    ("{ landing = 'landing' }", "table T, sink #1: the sink has no `type`"),
    ("{ name = 'lz', type = 'landing' }", "table T, sink 'lz': unknown sink type 'landing'"),
])
def test_a_sink_without_a_known_type_names_the_sink_and_the_types(base, capsys, sink, fragment):
    path = base / "c.toml"
    path.write_text(TABLE + f"sinks = [{sink}]\n")
    assert main(["plan", "--config", str(path)]) == 2
    err = one_line_error(capsys)
    assert fragment in err, err
    assert "one of 'open_mirroring', 'delta', 'kafka'" in err
    assert "discriminator" not in err and "Input tag" not in err


# -- names from the command line ----------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["verify", "--state", "state", "--table", "../../etc"],
    ["verify", "--state", "state", "--table", "T", "--schema", "../x"],
    ["status", "--state", "state", "--table", "../T"],
    ["repair", "--state", "state", "--table", "..", "--source", "src"],
    ["drop", "--state", "state", "--table", "../T", "--landing", "landing", "--yes"],
    ["reload", "--state", "state", "--table", "T", "--source", "src", "--keys", "id",
     "--landing", "landing", "--sink", "../../x", "--yes"],
    ["verify", "--state", "state", "--table", "T", "--snapshot", "src", "--sink", "a/b"],
])
def test_a_table_schema_or_sink_name_that_leaves_its_root_is_refused(base, capsys, argv):
    os.makedirs(base / "state" / "T")
    (base / "etc").mkdir()
    assert main(argv) == 2
    err = one_line_error(capsys)
    assert "contains '/'" in err or "is not a folder name" in err, err
    assert os.listdir(base / "state") == ["T"] and not (base / "landing").exists()


def test_status_of_an_unknown_table_lists_the_tables_and_exits_2(spark, base, capsys):
    from tests.support.cli_runs import rows, run_args, write

    write(str(base / "src" / "1.parquet"), rows(3))
    assert main(run_args(base)) == 0
    capsys.readouterr()
    for extra in ([], ["--json"]):
        assert main(["status", "--state", str(base / "state"), "--table", "Nope", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"diffcdc: error: --table Nope is not a table of the state root "
                       f"{base / 'state'}: its tables are T — check --table (a table with a "
                       "schema is <schema>.schema.<Table> here) and --state"), err
    os.makedirs(base / "empty")
    assert main(["status", "--state", str(base / "empty"), "--table", "T"]) == 2
    assert "it holds no table yet" in one_line_error(capsys)
    # named with its source folder, a table not run yet shows its waiting snapshots
    assert main(["status", "--state", str(base / "empty"), "--table", "T", "--source",
                 str(base / "src")]) == 0
    out = capsys.readouterr().out
    assert "T: waiting: 1.parquet" in out and "T: no snapshot committed yet" in out
