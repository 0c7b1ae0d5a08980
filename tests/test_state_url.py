"""A state root given as a URL: the commit log, marks, lease and reports on the loopback DFS
server (ADLS Gen2 API, the real ``azure-storage-file-datalake`` client), the state Parquet
in ``state_data``. Whole runs through the CLI: first load, a key change, status and plan, a
run refused while another holds the lease, drop; a run killed right after its commit and
finished by the next; the settings that do not fit together; a service that cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main
from diffcdc.config_file import load_config
from diffcdc.errors import ConfigError
from diffcdc.sinks.openmirroring.contract import table_folder
from diffcdc.sinks.openmirroring.replay import replay
from diffcdc.state.lease import Lease
from diffcdc.state.store import TableState
from diffcdc.storage.local import LocalStore
from tests.support.dfs_server import DfsServer

pytestmark = pytest.mark.integration

FS = "ws"  # the filesystem the server fixture creates
ROOT = "lake/Files/diffcdc-state"
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def write_config(tmp_path: Any, dfs: DfsServer, **diffcdc: str) -> str:
    settings = {
        "state": f'"{dfs.url(FS, ROOT)}"',
        "state_data": '"state-data"',
        "state_options": '{ account_key_env = "TEST_STATE_KEY", retry_backoff = 0.01, '
        "retry_backoff_max = 0.05 }",
        **diffcdc,
    }
    lines = "\n".join(f"{k} = {v}" for k, v in settings.items() if v)
    path = tmp_path / "diffcdc.toml"
    path.write_text(f"""
[diffcdc]
{lines}
landing = "landing"

[tables.T]
source = "src"
keys = ["id"]
""")
    return str(path)


def snapshot(tmp_path: Any, name: str, rows: list[tuple[int, str | None]]) -> None:
    os.makedirs(tmp_path / "src", exist_ok=True)
    table = pa.Table.from_pylist([{"id": i, "name": n} for i, n in rows], schema=SCHEMA)
    pq.write_table(table, tmp_path / "src" / f"{name}.parquet")


def cli(capsys: Any, *argv: str) -> tuple[int, Any, str]:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip().startswith("{") else out, err


def test_a_url_state_root_keeps_documents_remote_and_parquet_in_state_data(
    spark, server, tmp_path, monkeypatch, capsys, cli_logging
) -> None:
    monkeypatch.setenv("TEST_STATE_KEY", server.account_key)
    config = write_config(tmp_path, server)
    snapshot(tmp_path, "0001", [(1, "a"), (2, "b"), (3, None)])
    code, run, err = cli(capsys, "run", "--config", config)
    assert code == 0, err
    snapshot(tmp_path, "0002", [(1, "a"), (3, "c"), (4, "d")])  # 2 deleted, 3 updated, 4 new
    code, run, err = cli(capsys, "run", "--config", config)
    assert code == 0, err
    (table,) = run["tables"]
    assert [(s["inserted"], s["updated"], s["deleted"]) for s in table["snapshots"]] == [(1, 1, 1)]

    # The documents are on the server, the Parquet in state_data, nothing else anywhere.
    log = server.names(FS, f"{ROOT}/T/log")
    assert f"{2:020d}.json" in log and f"{2:020d}.published.open_mirroring.json" in log
    assert "lease.json" not in server.names(FS, f"{ROOT}/T")  # released
    assert server.names(FS, f"{ROOT}/T/reports")
    data = tmp_path / "state-data" / "T"
    assert sorted(os.listdir(data)) == ["versions"]
    assert not os.path.exists(tmp_path / "state")
    state = TableState(load_config(config).state_root(), "T")
    head = state.head()
    assert head is not None and head.version == 2 and head.published
    assert os.path.isdir(data / head.record.state_path)
    mirrored = replay(LocalStore(str(tmp_path / "landing")), table_folder("T", None)).replayed()
    assert sorted((r["id"], r["name"]) for r in mirrored.rows) == [(1, "a"), (3, "c"), (4, "d")]

    code, status, _ = cli(capsys, "status", "--config", config)
    assert code == 0 and status["state"] == server.url(FS, ROOT)
    assert [(t["table"], t["version"], t["unpublished"]) for t in status["tables"]] == [("T", 2, False)]
    code, plan, _ = cli(capsys, "plan", "--config", config)
    assert code == 0 and not plan["tables"][0]["has_work"]

    # A live run's lease on the server refuses a second run, which changes nothing.
    snapshot(tmp_path, "0003", [(1, "z")])
    holder = Lease(state.storage, "T", "other-run")
    holder.acquire()
    try:
        code, run, err = cli(capsys, "run", "--config", config)
    finally:
        holder.release()
    assert code == 1 and "another diffcdc run is working on this table" in err
    assert state.head().version == 2

    # drop forgets the table: its documents on the server and its data.
    code, _, err = cli(capsys, "drop", "--config", config, "--table", "T", "--yes")
    assert code == 0, err
    assert "T" not in server.names(FS, ROOT) and not os.path.exists(data)
    assert TableState(load_config(config).state_root(), "T").head() is None


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"state_data": ""}, "set state_data in [diffcdc]"),
        ({"state_data": '"abfss://fs@acct.dfs.core.windows.net/data"'}, "is not a folder diffcdc can use"),
        ({"state_data": '"webhdfs://nn:9870/data?user.name=x"'}, "is not a folder diffcdc can use"),
        ({"state": '"state"', "state_options": ""}, "state_data is a folder for a URL state root"),
        ({"state": '"state"', "state_data": ""}, "state_options are for a URL state root"),
        ({"state": '"https://127.0.0.1:1/ws/x?sig=Sig42Secret"'}, "must not carry a query string"),
        ({"state": '"s3://bucket/state"', "state_options": ""}, "unsupported state root"),
    ],
)
def test_state_settings_that_do_not_fit_are_refused_before_anything_runs(
    server, tmp_path, capsys, settings, expected, cli_logging
) -> None:
    config = write_config(tmp_path, server, **settings)
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert expected in str(caught.value) and "Sig42Secret" not in str(caught.value)
    code = main(["run", "--config", config])
    _, err = capsys.readouterr()
    assert code == 2 and expected in err and "Sig42Secret" not in err
    assert len(err.strip().splitlines()) <= 2  # one line (and its hint)


def test_a_state_root_that_cannot_be_reached_fails_in_one_line_and_writes_nothing(
    tmp_path, capsys, cli_logging
) -> None:
    with DfsServer() as gone:  # a port that certainly held no server a moment later
        url = gone.url(FS, ROOT)
    os.makedirs(tmp_path / "src")
    snapshot(tmp_path, "0001", [(1, "a")])
    (tmp_path / "diffcdc.toml").write_text(f"""
[diffcdc]
state = "{url}"
state_data = "state-data"
state_options = {{ account_key = "a2V5", retry_total = 1, retry_backoff = 0.01, retry_backoff_max = 0.02 }}
landing = "landing"

[tables.T]
source = "src"
keys = ["id"]
""")
    code = main(["run", "--config", str(tmp_path / "diffcdc.toml")])
    _, err = capsys.readouterr()
    last = err.strip().splitlines()[-1]
    assert code == 1 and "table T" in last and "unavailable; run again later" in last
    assert sorted(os.listdir(tmp_path)) == ["diffcdc.toml", "src"]  # no state, no landing


def test_a_run_killed_after_its_remote_commit_is_finished_by_the_next_run(
    spark, server, tmp_path, monkeypatch, capsys, cli_logging
) -> None:
    monkeypatch.setenv("TEST_STATE_KEY", server.account_key)
    config = write_config(tmp_path, server)
    snapshot(tmp_path, "0001", [(1, "a"), (2, "b")])
    code, _, err = cli(capsys, "run", "--config", config)
    assert code == 0, err
    snapshot(tmp_path, "0002", [(1, "z"), (3, "c")])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    crashed = subprocess.run(
        [sys.executable, "-m", "diffcdc.cli", "run", "--config", config, "--quiet"],
        env={**env, "DIFFCDC_CRASH_AT": "after_claim"}, capture_output=True, text=True,
        timeout=600, check=False,
    )
    assert crashed.returncode == 137, crashed.stderr[-3000:]
    # Version 2 is committed on the server, not published; the dead run's lease is left there.
    log = server.names(FS, f"{ROOT}/T/log")
    assert f"{2:020d}.json" in log and f"{2:020d}.published.open_mirroring.json" not in log
    assert "lease.json" in server.names(FS, f"{ROOT}/T")

    code, run, err = cli(capsys, "run", "--config", config)
    assert code == 0, err
    assert run["tables"][0]["resumed_versions"] == [2] and not run["tables"][0]["snapshots"]
    assert "took over the run lease" in err  # at once: the holder's process is gone
    assert f"{2:020d}.published.open_mirroring.json" in server.names(FS, f"{ROOT}/T/log")
    assert "lease.json" not in server.names(FS, f"{ROOT}/T")
    mirrored = replay(LocalStore(str(tmp_path / "landing")), table_folder("T", None)).replayed()
    assert sorted((r["id"], r["name"]) for r in mirrored.rows) == [(1, "z"), (3, "c")]


def test_a_commit_whose_answer_was_lost_completes_the_run(
    spark, server, tmp_path, monkeypatch, capsys, cli_logging
) -> None:
    """The commit record's rename lands on the server but its answer is lost: the client's
    retry finds the record. The run goes on (it is its own commit), publishes, exits 0; it was
    'ConcurrentRunError: version 1 was committed by another run first; this run changed
    nothing' about its own commit."""
    monkeypatch.setenv("TEST_STATE_KEY", server.account_key)
    config = write_config(tmp_path, server)
    snapshot(tmp_path, "0001", [(1, "a"), (2, "b")])
    server.inject("rename", drop_response=True, times=1, path_contains=f"{1:020d}.json")
    code, run, err = cli(capsys, "run", "--config", config)
    assert code == 0, err
    assert run["tables"][0]["snapshots"][0]["version"] == 1
    head = TableState(load_config(config).state_root(), "T").head()
    assert head is not None and head.version == 1 and head.published
