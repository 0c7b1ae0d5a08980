"""The command line: options, config files, exit codes, summaries, --json, status, verify."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from diffcdc.cli.main import main
from diffcdc.state.requests import reload_wanted
from diffcdc.state.store import TableState
from tests.support.cli_runs import rows, run_args, write


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_run_status_verify(spark, base, capsys):
    write(str(base / "src" / "1.parquet"), rows(5))
    assert main(run_args(base)) == 0
    out = capsys.readouterr().out
    assert "T" in out and "inserted" in out
    write(str(base / "src" / "2.parquet"), rows(5, changed=2))
    assert main(run_args(base, "--json")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["tables"][0]["snapshots"][0]["updated"] == 2
    assert main(run_args(base)) == 0  # nothing pending
    assert "nothing to do" in capsys.readouterr().out

    assert main(["status", "--state", str(base / "state"), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)["tables"][0]
    assert (status["table"], status["last_snapshot"], status["next_sequence"], status["rows"]) == ("T", "2.parquet", 3, 5)
    state = TableState(str(base / "state"), "T")
    delta = sum(f.bytes for f in state.head().record.state_manifest.files)
    base_bytes = sum(f.bytes for f in state.commits()[0].record.state_manifest.files)
    assert status["state"] == {"base": 1, "deltas": 1, "bytes": base_bytes + delta}  # 2 changed keys
    assert status["snapshot_time"] == state.head().record.snapshot_time  # the files' mtime
    assert status["snapshot_time"].endswith("Z")
    assert main(["status", "--state", str(base / "state")]) == 0
    assert "2.parquet" in capsys.readouterr().out

    verify = ["verify", "--landing", str(base / "landing"), "--table", "T", "--state", str(base / "state")]
    assert main([*verify, "--snapshot", str(base / "src" / "2.parquet")]) == 0
    assert "identical" in capsys.readouterr().out
    assert main([*verify, "--snapshot", str(base / "src" / "1.parquet")]) == 1
    assert "DIFFERENT" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["run", "--source", "x"], "missing --keys"),
        (["run", "--bogus"], "unrecognized"),
        (["nonsense"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2(base, capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.strip().splitlines()[-1].startswith("diffcdc: error:")


def test_unsafe_table_name_exit_2(base, capsys):
    os.makedirs(base / "src")
    assert main(["run", "--source", str(base / "src"), "--keys", "id", "--table", "../x", "--landing", "l"]) == 2
    assert "--table" in capsys.readouterr().err


CONFIG = """
[diffcdc]
state = "state"
landing = "landing"

[defaults]
codec = "zstd"

[tables.Good]
source = "src/good"
keys = ["id"]

[tables.Bad]
source = "src/bad"
keys = ["id"]
"""


def test_config_many_tables_one_failing(spark, base, capsys):
    (base / "diffcdc.toml").write_text(CONFIG)
    write(str(base / "src" / "good" / "1.parquet"), rows(3))
    write(str(base / "src" / "bad" / "1.parquet"), rows(3) + rows(1))  # duplicate key 0
    assert main(["run", "--config", str(base / "diffcdc.toml")]) == 3
    captured = capsys.readouterr()
    assert "Good" in captured.out and "failed" in captured.out
    assert "table Bad" in captured.err and "1.parquet" in captured.err
    assert sorted(os.listdir(base / "landing" / "Good")) == ["00000000000000000001.parquet", "_metadata.json"]
    assert not (base / "landing" / "Bad").exists()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[tables.T]\nsource = 's'\n", "table T, field keys"),
        ("[tables.T]\nsource = 's'\nkeys = ['id']\nlanding = 'l'\ncodec = 'lz4'\n", "table T, field codec"),
        ("[tables.T]\nsource = 's'\nkeys = ['id']\nlanding = 'l'\ncolour = 1\n", "table T, field colour"),
        ("[tables.T\n", "not valid TOML"),
        ("[diffcdc]\nkeep_versions = 0\n[tables.T]\nsource='s'\nkeys=['id']\nlanding='l'\n", "field keep_versions"),
        ("[tables.'a/b']\nsource='s'\nkeys=['id']\nlanding='l'\n", "field name"),
        ("[tablez.T]\n", "unknown section"),
    ],
)
def test_config_errors_name_file_table_field(base, capsys, text, fragment):
    (base / "bad.toml").write_text(text)
    assert main(["run", "--config", str(base / "bad.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "bad.toml" in err and len(err.splitlines()) == 1


def test_gate_refusal_then_override(spark, base, capsys):
    write(str(base / "src" / "1.parquet"), rows(10))
    assert main(run_args(base)) == 0
    write(str(base / "src" / "2.parquet"), rows(5))  # half the rows deleted
    assert main(run_args(base)) == 0  # a small table: the ratios do not apply by default
    write(str(base / "src" / "3.parquet"), rows(2))
    assert main(run_args(base, "--min-rows-for-ratios", "0")) == 3
    err = capsys.readouterr().err
    assert "delete_ratio" in err and "row_count_ratio: observed 0.4" in err
    assert err.strip().endswith(
        "with: --override-check T:row_count_ratio --override-check T:delete_ratio"), err
    assert main(run_args(base, "--min-rows-for-ratios", "0", "--override-check", "nonsense")) == 2
    capsys.readouterr()
    assert main(run_args(base, "--min-rows-for-ratios", "0", "--override-check", "T:delete_ratio",
                         "--override-check", "row_count_ratio", "--json")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tables"][0]["overrides"] == ["delete_ratio", "row_count_ratio"]
    report = json.loads((base / "state" / "T" / "last_report.json").read_text())
    assert report["overrides"] == ["delete_ratio", "row_count_ratio"]
    gate = report["snapshots"][0]["gate"]
    assert any(c["name"] == "delete_ratio" and c["overridden"] for stage in gate for c in stage["checks"])
    assert main(["status", "--state", str(base / "state")]) == 0
    assert "overridden: delete_ratio" in capsys.readouterr().out


def test_debug_shows_trace(base, capsys):
    assert main(["run", "--config", str(base / "missing.toml"), "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_readme_config_example_is_valid(tmp_path):
    """The TOML example in the README loads and validates as written."""
    from pathlib import Path

    from diffcdc.config_file import load_config

    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "diffcdc.toml").write_text(block)
    config = load_config(str(tmp_path / "diffcdc.toml"))
    assert [t.name for t in config.tables] == ["Employees", "Departments"]
    assert config.tables[0].quality.max_delete_ratio == 0.5
    assert config.quality.merged(config.tables[1].quality).expectations[1].blocking is False


@pytest.mark.parametrize("content", [b"{not json", b'["not", "a request"]', b'{"reason": "no id"}'])
def test_a_damaged_reload_request_fails_the_table_in_one_line_before_spark(
        spark, base, capsys, content):
    from diffcdc.state.store import TableState

    write(str(base / "src" / "1.parquet"), rows(3))
    assert main(run_args(base, "--quiet")) == 0
    state = TableState(str(base / "state"), "T")
    with open(state.requests.reload_path, "wb") as handle:
        handle.write(content)
    write(str(base / "src" / "2.parquet"), rows(3, changed=1))
    landing = sorted(os.listdir(base / "landing" / "T"))
    capsys.readouterr()

    assert main(run_args(base, "--quiet")) == 1
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert "table T" in line and "reload.json" in line and "'diffcdc reload'" in line, line
    assert state.head().snapshot_id == "1.parquet"
    assert sorted(os.listdir(base / "landing" / "T")) == landing
    assert main(["plan", *run_args(base)[1:], "--json"]) == 1  # the code the run failed with
    assert "reload.json" in json.loads(capsys.readouterr().out)["tables"][0]["error"]["path"]
    assert main(["status", "--state", str(base / "state"), "--json"]) == 0
    (pending,) = json.loads(capsys.readouterr().out)["tables"][0]["pending"]
    assert "reload request" in pending and "reload.json" in pending

    os.unlink(state.requests.reload_path)
    assert main(run_args(base, "--quiet")) == 0
    assert state.head().snapshot_id == "2.parquet"


def test_status_shows_pending_reload_and_unfinished_drop(spark, base, capsys):
    from diffcdc.state.store import TableState

    write(str(base / "src" / "1.parquet"), rows(3))
    assert main(run_args(base)) == 0
    state = TableState(str(base / "state"), "T")
    status = ["status", "--state", str(base / "state")]
    capsys.readouterr()
    assert main([*status, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tables"][0]["pending"] == []

    state.requests.save_reload(reload_wanted(None, "requested with diffcdc reload"))
    state.requests.request_drop("T")
    assert main([*status, "--json"]) == 0
    pending = json.loads(capsys.readouterr().out)["tables"][0]["pending"]
    assert len(pending) == 2
    assert "re-creation requested" in pending[0] and "drop of T" in pending[1]
    assert main(status) == 0
    out = capsys.readouterr().out
    assert "T: pending: re-creation requested" in out and "run `diffcdc drop` again" in out
    assert os.path.exists(state.requests.reload_path)  # status only reads

    os.unlink(state.requests.drop_path)
    assert main(["reload", *run_args(base)[1:], "--yes"]) == 0  # carries the request out
    capsys.readouterr()
    assert main([*status, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tables"][0]["pending"] == []


def test_a_failed_sink_is_named_the_others_publish_and_reload_sink_recovers_it(
        spark, base, capsys):
    from deltalake import write_deltalake

    config = base / "diffcdc.toml"
    config.write_text(f'''
[diffcdc]
state = "{base / 'state'}"

[tables.T]
source = "{base / 'src'}"
keys = ["id"]

[[tables.T.sinks]]
type = "open_mirroring"
landing = "{base / 'landing'}"

[[tables.T.sinks]]
type = "delta"
path = "{base / 'lake'}"
''')
    write(str(base / "src" / "1.parquet"), rows(4))
    assert main(["run", "--config", str(config)]) == 0
    write_deltalake(str(base / "lake"), pa.table({"id": pa.array([99], pa.int64()), "v": ["x"]}),
                    mode="append")  # a foreign writer
    write(str(base / "src" / "2.parquet"), rows(4, changed=2))
    capsys.readouterr()
    assert main(["run", "--config", str(config), "--json"]) == 1
    table = json.loads(capsys.readouterr().out)["tables"][0]
    assert table["outcome"] == "failed" and "sink delta" in table["error"]["message"]
    assert table["snapshots"][0]["sinks"]["open_mirroring"]["published"] is True
    assert table["snapshots"][0]["sinks"]["delta"]["published"] is False
    assert main(["reload", "--config", str(config), "--table", "T", "--sink", "nope",
                 "--yes"]) == 2
    assert "has no sink of that name" in capsys.readouterr().err
    assert main(["reload", "--config", str(config), "--table", "T", "--sink", "delta",
                 "--yes"]) == 0
    assert main(["run", "--config", str(config)]) == 0
    assert "nothing to do" in capsys.readouterr().out
