"""Small wrong or raw answers of the command line (issue 27): every one a one-line error that
names the right option and a command that works as printed, and read-only commands that are
right for tables with a schema name and after a reload with new keys."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main


def write(path, rows: list[dict]) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("diffcdc: error: "), err
    return err


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
