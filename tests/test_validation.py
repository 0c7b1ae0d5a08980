"""Validation (issues 16.5, 16.6, 17.4, 17.5): one strict model for the command line and the
config file, short errors, names that map to one state folder each, a state root that cannot
silently be the wrong one. Everything here is refused before Spark starts, except where a test
first publishes a table on purpose."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main
from diffcdc.config import TableConfig
from diffcdc.config_file import load_config
from diffcdc.core.quality import parse_overrides
from diffcdc.errors import UsageError


def write(path, n: int = 3) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pylist([{"id": i, "v": f"v{i}"} for i in range(n)]), path)


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs(tmp_path / "src")
    return tmp_path


def run_args(base, *extra, table="T"):
    return ["run", "--source", str(base / "src"), "--keys", "id", "--table", table,
            "--landing", str(base / "landing"), "--state", str(base / "state"), *extra]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("diffcdc: error: "), err
    return err


def config_file(base, text: str) -> str:
    path = base / "diffcdc.toml"
    path.write_text(text)
    return str(path)


TABLE = "[tables.T]\nsource = 'src'\nkeys = ['id']\nlanding = 'landing'\n"


# -- one strict model: wrong types, every problem named --------------------------------------


@pytest.mark.parametrize("text, fragments", [
    ("[quality]\nmax_delete_ratio = '0.2'\n" + TABLE,
     ["field quality.max_delete_ratio: Input should be a valid number (got '0.2', text)"]),
    ("[diffcdc]\nkeep_versions = 10.0\n" + TABLE, ["field keep_versions", "(got 10.0, a number)"]),
    ("[diffcdc]\nstate = 5\n" + TABLE, ["field state", "(got 5, an integer)"]),
    ("[diffcdc]\nstate = ''\n" + TABLE, ["field state: must be a path"]),
    (TABLE + "fingerprint_bits = '64'\n", ["table T, field fingerprint_bits"]),
    (TABLE + "csv_infer_schema = 'yes'\n", ["table T, field csv_infer_schema"]),
    (TABLE + "max_rows_per_file = '100'\n", ["table T, field max_rows_per_file"]),
    (TABLE + "quality = { min_row_ratio = nan }\n", ["table T, field quality.min_row_ratio"]),
    (TABLE + "quality = { max_delete_ratio = inf }\n", ["table T, field quality.max_delete_ratio"]),
    ("[tables.T]\nsource = 'src'\nkyes = ['id']\nlanding = 'landing'\n",
     ["table T, field kyes: unknown field (did you mean 'keys'?)", "table T, field keys: required"]),
    (TABLE + "codec = 'lz4'\nmax_rows_per_file = 0\n",
     ["table T, field codec", "table T, field max_rows_per_file"]),
])
def test_config_problems_all_named_on_one_line(base, capsys, text, fragments):
    path = config_file(base, text)
    assert main(["run", "--config", path]) == 2
    err = one_line_error(capsys)
    assert "more problem" not in err and path in err
    for fragment in fragments:
        assert fragment in err, err
    assert not (base / "state").exists() and not (base / "landing").exists()


def test_the_config_file_takes_numbers_for_floats_and_the_readme_settings(base):
    path = config_file(base, "[quality]\nmax_delete_ratio = 1\nmin_rows_for_ratios = 0\n" + TABLE)
    config = load_config(path)
    assert config.quality.max_delete_ratio == 1.0 and config.quality.min_rows_for_ratios == 0


@pytest.mark.parametrize("extra, fragments", [
    (["--keep-versions", "-5"], ["option --keep-versions"]),
    (["--keep-versions", "0"], ["option --keep-versions"]),
    (["--parallelism", "0"], ["option --parallelism"]),
    (["--max-delete-ratio", "inf"], ["option --max-delete-ratio", "finite"]),
    (["--min-row-ratio", "nan"], ["option --min-row-ratio"]),
    (["--min-rows-for-ratios", "-1"], ["option --min-rows-for-ratios"]),
    (["--keep-versions", "0", "--max-delete-ratio", "-1", "--codec", "zstd", "--schema", "a*"],
     ["option --keep-versions", "option --max-delete-ratio", "option --schema"]),
    (["--state", ""], ["option --state: must be a path"]),
])
def test_command_line_settings_validated_by_the_config_models(base, capsys, extra, fragments):
    assert main(run_args(base, *extra)) == 2
    err = one_line_error(capsys)
    for fragment in fragments:
        assert fragment in err, err
    assert not (base / "state").exists() and not (base / "landing").exists()


def test_options_that_change_a_config_file_are_validated_too(base, capsys):
    path = config_file(base, TABLE)
    assert main(["run", "--config", path, "--keep-versions", "-5"]) == 2
    assert "option --keep-versions" in one_line_error(capsys)
    assert main(["run", "--config", path, "--state", ""]) == 2
    assert "option --state" in one_line_error(capsys)


# -- short errors, helpful --help ---------------------------------------------------------


@pytest.mark.parametrize("argv, fragment", [
    (["run", "--codec", "x"], "argument --codec: invalid choice"),
    (["run", "--keep-versions", "many"], "argument --keep-versions: invalid int value"),
    (["status", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_a_bad_option_is_one_line_not_the_usage(base, capsys, argv, fragment):
    assert main(argv) == 2
    err = one_line_error(capsys)
    assert fragment in err and f"see 'diffcdc {argv[0]} --help'" in err
    assert "usage:" not in err


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["verify", "--help"]])
def test_help_has_a_description_examples_and_the_exit_codes(capsys, argv):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "exit codes:" in out and "input refused" in out and "130" in out
    if argv[0] != "verify":
        assert "examples:" in out and "diffcdc run --config" in out
        assert "Snapshot-diff CDC" in out or "pending snapshot" in out


# -- overrides ------------------------------------------------------------------------------


def test_override_names_may_hold_a_colon():
    check = "expect_column_values_to_not_be_null:amount"
    assert parse_overrides([f"T:{check}"], ["T"]) == {"T": frozenset({check})}
    assert parse_overrides([check], ["T"]) == {"T": frozenset({check})}
    assert parse_overrides(["a:b:delete_ratio"], ["a:b", "c"]) == {"a:b": frozenset({"delete_ratio"})}
    with pytest.raises(UsageError, match="no table of this run is named 'U'"):
        parse_overrides(["U:delete_ratio"], ["T"])
    with pytest.raises(UsageError, match="name the table"):
        parse_overrides(["delete_ratio"], ["T", "V"])


# -- names: one state folder per table -----------------------------------------------------


@pytest.mark.parametrize("args, fragment", [
    (["--schema", "s[1]"], "as patterns"),
    (["--schema", "s{a,b}"], "as patterns"),
    (["--schema", "s?"], "as patterns"),
    (["--schema", "é" * 128], "at most 255"),
    (["--schema", "s" * 250], "too long for a state folder"),
])
def test_unusable_schema_names_exit_2(base, capsys, args, fragment):
    assert main(run_args(base, *args)) == 2
    assert fragment in one_line_error(capsys)
    assert not (base / "state").exists() and not (base / "landing").exists()


def test_both_spellings_of_one_state_folder_in_one_config_exit_2_naming_both(base, capsys):
    path = config_file(base, "[tables.b]\nschema_name = 'a'\nsource = 'src'\nkeys = ['id']\n"
                             "landing = 'landing'\n"
                             "[tables.'a.schema.b']\nsource = 'src'\nkeys = ['id']\n"
                             "landing = 'landing'\n")
    assert main(["run", "--config", path]) == 2
    err = one_line_error(capsys)
    assert "'b' (schema 'a')" in err and "'a.schema.b'" in err and "share the state folder" in err


def test_each_spelling_alone_keeps_its_existing_folder():
    schema = TableConfig(name="b", schema_name="a", source="s", keys=["id"], landing="l")
    dotted = TableConfig(name="a.schema.b", source="s", keys=["id"], landing="l")
    assert schema.state_name == dotted.state_name == "a.schema.b"
    assert TableConfig(name="T", source="s", keys=["id"], landing="l").state_name == "T"


def test_a_state_folder_never_serves_a_second_table(spark, base, capsys):
    write(str(base / "src" / "1.parquet"))
    assert main(run_args(base, "--schema", "a", table="b")) == 0
    capsys.readouterr()
    state = base / "state" / "a.schema.b"
    before = {p: os.path.getmtime(p) for p in state.rglob("*")}
    assert main(run_args(base, table="a.schema.b")) == 2  # refused before Spark starts
    err = one_line_error(capsys)
    assert "belongs to table 'b' (schema 'a')" in err and "rename table 'a.schema.b'" in err
    assert {p: os.path.getmtime(p) for p in state.rglob("*")} == before
    assert sorted(os.listdir(base / "landing")) == ["a.schema"]
    drop = ["drop", "--table", "a.schema.b", "--landing", str(base / "landing"),
            "--state", str(base / "state"), "--yes"]
    assert main(drop) == 2 and state.is_dir()
    assert "belongs to table 'b'" in one_line_error(capsys)
    assert main(["verify", "--table", "a.schema.b", "--state", str(base / "state")]) == 2
    assert "belongs to table 'b'" in one_line_error(capsys)
    assert main(run_args(base, "--schema", "a", table="b")) == 0  # the owner runs on
    assert "nothing to do" in capsys.readouterr().out


# -- a state root that cannot silently be the wrong one -----------------------------------


def published_elsewhere(base) -> None:
    os.makedirs(base / "landing" / "T")
    (base / "landing" / "T" / "_metadata.json").write_text(json.dumps({"keyColumns": ["id"]}))
    write(str(base / "src" / "1.parquet"))


def test_no_state_but_published_output_is_refused_naming_the_cause(base, capsys):
    published_elsewhere(base)
    argv = [a for a in run_args(base) if a not in ("--state", str(base / "state"))]
    assert main(argv) == 2
    err = one_line_error(capsys)
    assert "no state for this table under the default state root ./state" in err
    assert "give --state ROOT" in err and "--yes" not in err
    assert not (base / "state").exists()
    assert main(run_args(base)) == 2
    assert "check --state" in one_line_error(capsys)


def test_verify_without_state_does_not_guess_the_excluded_columns(base, capsys):
    published_elsewhere(base)
    assert main(["verify", "--table", "T", "--landing", str(base / "landing"),
                 "--snapshot", str(base / "src" / "1.parquet")]) == 2
    err = one_line_error(capsys)
    assert "no state for this table" in err and "--ignore" in err


# -- broken pipes are quiet -------------------------------------------------------------------


class _ClosedPipe:
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_output_pipe_is_quiet(base, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    os.makedirs(base / "state")
    assert main(["status", "--state", str(base / "state")]) == 141
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_a_closed_output_pipe_is_quiet_in_a_real_process(base):
    import subprocess
    import sys

    read, write_end = os.pipe()
    os.close(read)  # the reader is gone before anything is written (`| head -1` at its end)
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(__file__))}
    os.makedirs(base / "state")
    argv = [sys.executable, "-m", "diffcdc.cli", "status", "--state", str(base / "state")]
    done = subprocess.run(argv, stdout=write_end,
                          stderr=subprocess.PIPE, env=env, timeout=60)
    os.close(write_end)
    assert (done.returncode, done.stderr) == (141, b"")


def test_another_landing_root_than_the_published_one_is_refused(spark, base, capsys):
    write(str(base / "src" / "1.parquet"))
    assert main(run_args(base)) == 0
    write(str(base / "src" / "2.parquet"), n=4)
    capsys.readouterr()
    elsewhere = [a if a != str(base / "landing") else str(base / "other") for a in run_args(base)]
    assert main(elsewhere) == 2  # before Spark; nothing written anywhere
    err = one_line_error(capsys)
    assert f"published to the landing root {base / 'landing'}, not {base / 'other'}" in err
    assert "--yes" not in err and not (base / "other").exists()
    assert main(run_args(base)) == 0  # the right one continues
    assert sorted(os.listdir(base / "landing" / "T"))[:2] == ["00000000000000000001.parquet",
                                                               "00000000000000000002.parquet"]
