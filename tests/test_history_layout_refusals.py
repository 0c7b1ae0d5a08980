"""The history layout's refusals (issue 41 items 2 and 3), each through the command line: one
line, its exit code, and nothing published (the state's head and every sink as they were)."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main
from diffcdc.state.store import TableState
from tests.support.cli_runs import one_line_error, one_stderr_line
from tests.support.config_text import toml_value
from tests.support.history import (
    Names,
    as_of,
    canonical,
    check_history,
    history_rows,
    published_outputs,
)

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
SNAPSHOTS = {"2026-01-01": [(1, "a"), (2, "b"), (3, "c")],
             "2026-01-02": [(1, "a2"), (3, "c")],  # 2 deleted
             "2026-01-03": [(1, "a2"), (2, "b"), (3, "c")]}  # 2 back


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs(tmp_path / "src")
    return tmp_path


def _config(base, file: str = "diffcdc.toml", **history) -> str:
    sink = {"type": "delta", "name": "history", "path": "lake/h", "mode": history.pop("mode",
                                                                                      "scd2")}
    body = "".join(f"{k} = {toml_value(v)}\n" for k, v in {**sink, **history}.items())
    path = base / file
    path.write_text(
        "[diffcdc]\nstate = 'state'\n[quality]\nmin_row_ratio = 0.0\nmax_delete_ratio = 1.0\n"
        "[tables.T]\nsource = 'src'\nkeys = ['id']\nsnapshot_time = 'id:%Y-%m-%d'\n"
        "[[tables.T.sinks]]\ntype = 'open_mirroring'\nname = 'landing'\nlanding = 'landing'\n"
        f"[[tables.T.sinks]]\n{body}")
    return str(path)


def _write(base, day: str, rows=None, schema=SCHEMA) -> str:
    data = rows if rows is not None else [{"id": i, "v": v} for i, v in SNAPSHOTS[day]]
    path = str(base / "src" / f"{day}.parquet")
    pq.write_table(pa.Table.from_pylist(data, schema), path)
    return path


DBT = {"deletes": "row",
       "history_columns": {"valid_from": "dbt_valid_from", "valid_to": "dbt_valid_to",
                           "deleted": "dbt_is_deleted"},
       "open_end": {"valid_to": "9999-12-31T00:00:00Z"}}
DBT_NAMES = Names(valid_from="dbt_valid_from", valid_to="dbt_valid_to", deleted="dbt_is_deleted",
                  open_valid_to=dt.datetime(9999, 12, 31, tzinfo=dt.timezone.utc))


def test_a_changed_layout_is_refused_until_a_reload_rebuilds_the_history(spark, base, capsys):
    default = _config(base)
    for day in ("2026-01-01", "2026-01-02"):
        _write(base, day)
        assert main(["run", "--config", default, "--quiet"]) == 0
    _write(base, "2026-01-03")
    before = published_outputs(base)
    changed = _config(base, "dbt.toml", **DBT)
    capsys.readouterr()
    assert main(["run", "--config", changed, "--quiet"]) == 2
    error = one_stderr_line(capsys)
    assert "sink history: the history was made with deletes=\"close\"" in error
    assert "an existing history keeps its layout" in error
    assert "'diffcdc reload --table T --sink history --config " in error
    assert published_outputs(base) == before  # nothing committed, nothing published anywhere
    # the way out, as printed: the history rebuilt in the new layout, every version kept
    words = error.split("'")[-2].split()
    assert words[:2] == ["diffcdc", "reload"] and "--yes" in words
    assert main([*words[1:], "--quiet"]) == 0
    assert main(["run", "--config", changed, "--quiet"]) == 0
    rows = history_rows(str(base / "lake" / "h"))
    check_history(rows, ["id"], names=DBT_NAMES)
    commits = TableState(str(base / "state"), "T").commits()
    for commit in commits:
        snapshot = pq.read_table(commit.record.snapshot_path).to_pylist()
        assert canonical(as_of(rows, commit.version, DBT_NAMES)) == canonical(snapshot)
    (tomb,) = [r for r in rows if r["dbt_is_deleted"]]  # derived from the gap at version 2
    assert (tomb["id"], tomb["v"], tomb["__START_AT"], tomb["__END_AT"]) == (2, "b", 2,
                                                                          commits[-1].version)
    # and back: the default layout again is a change too
    capsys.readouterr()
    assert main(["run", "--config", default, "--quiet"]) == 0  # nothing new: nothing checked
    _write(base, "2026-01-04", [{"id": 1, "v": "a3"}])
    before = published_outputs(base)
    capsys.readouterr()
    assert main(["run", "--config", default, "--quiet"]) == 2
    assert "an existing history keeps its layout" in one_stderr_line(capsys)
    assert published_outputs(base) == before


@pytest.mark.parametrize("clash", ["dbt_valid_from", "DBT_VALID_FROM", "dbt_is_deleted"])
def test_a_history_column_named_like_a_snapshot_column_is_refused(spark, base, capsys, clash):
    config = _config(base, **DBT)
    _write(base, "2026-01-01")
    assert main(["run", "--config", config, "--quiet"]) == 0
    before = published_outputs(base)
    schema = SCHEMA.append(pa.field(clash, pa.string()))
    _write(base, "2026-01-02", [{"id": 1, "v": "a", clash: "x"}], schema)
    capsys.readouterr()
    assert main(["run", "--config", config, "--quiet"]) == 3
    error = one_stderr_line(capsys)
    assert f"column {clash!r} clashes with a column diffcdc adds" in error
    assert "2026-01-02.parquet" in error
    assert published_outputs(base) == before


@pytest.mark.parametrize(("settings", "message"), [
    ({"mode": "current", "deletes": "row"}, "need mode = \"scd2\""),
    ({"mode": "current", "history_columns": {"valid_to": "to"}}, "need mode = \"scd2\""),
    ({"open_end": {"valid_to": "31.12.9999"}}, "is not a timestamp"),
    ({"open_end": {"valid_to": "9999-12-31T00:00:00"}}, "has no time zone"),
    ({"history_columns": {"deleted": "gone"}}, "set deletes = \"row\""),
    ({"history_columns": {"valid_to": "__END_AT"}}, "given twice"),
])
def test_settings_that_cannot_work_are_refused_when_the_config_is_loaded(base, capsys, settings,
                                                                        message):
    config = _config(base, **settings)
    _write(base, "2026-01-01")
    assert main(["run", "--config", config, "--quiet"]) == 2
    error = one_line_error(capsys)
    assert message in error and "table T" in error and "sink" in error
    assert not os.path.exists(base / "state") and not os.path.exists(base / "lake")


def test_open_end_sentinels_the_history_reaches_are_refused(spark, base, capsys):
    _write(base, "2026-01-01")
    config = _config(base, open_end={"end_at": 1})
    assert main(["run", "--config", config, "--quiet"]) == 2
    assert "open_end.end_at 1 is not above version 1" in one_stderr_line(capsys)
    assert published_outputs(base) == (None, None, None, [])
    config = _config(base, open_end={"valid_to": "2026-01-01T00:00:00Z"})
    capsys.readouterr()
    assert main(["run", "--config", config, "--quiet"]) == 2
    assert "is not after the snapshot's time" in one_stderr_line(capsys)
    assert published_outputs(base) == (None, None, None, [])
