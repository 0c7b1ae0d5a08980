"""State data at a URL only Spark and diffcdc's own reads reach: ``state_data =
"webhdfs://..."`` against the loopback WebHDFS server (tests/support/webhdfs_server.py).

Spark writes and reads the state Parquet, the staged change sets and snapshot copies through
Hadoop's ``WebHdfsFileSystem``; diffcdc's own Python code (state manifests, landing text
files, Kafka message bodies, publishing, verify, repair, prune, drop) goes through fsspec's
WebHDFS client (:mod:`diffcdc.storage.paths`). Nothing of the data is on a local path: a folder
on this machine would hide a code path that still opens files locally. The commit log and
lease stay in the (local) state root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from diffcdc.cli.main import main
from diffcdc.config import StateCompaction, TableConfig
from diffcdc.config_file import load_config
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.state.chain import state_chain
from diffcdc.state.root import StateRoot
from diffcdc.state.store import TableState
from tests.support.config_text import toml_value
from tests.support.sink_kinds import KINDS
from tests.support.snapshots import snapshot_one, snapshot_two, write_snapshot
from tests.support.workspace import PERMISSIVE, expected_counts

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = ["k1", "k2"]


def snapshot_three() -> dict:
    """Deletes, a NULL swap and a key moved back (60 → 6)."""
    rows = snapshot_two()
    for key in [(1, "a"), (2, "a"), (99, "b")]:
        del rows[key]
    rows[(3, "a")]["s2"], rows[(4, "a")]["s2"] = rows[(4, "a")]["s2"], None
    rows[(6, "a")] = rows.pop((60, "a"))
    return rows


def contents(folder: str) -> dict[str, bytes]:
    out = {}
    for name in local_files(folder):
        with open(os.path.join(folder, name), "rb") as handle:
            out[name] = handle.read()
    return out


def local_files(folder: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, n), folder) for d, _, names in os.walk(folder) for n in names
    )


def test_every_sink_replays_each_snapshot_with_the_state_data_on_webhdfs(
    spark, servers, webhdfs, tmp_path
) -> None:
    """One table with a sink of every kind: each kind reads the staged changes from the
    server and replays each snapshot."""
    root = str(tmp_path / "work")
    source = os.path.join(root, "source")
    table = TableConfig(name="T", source=source, keys=KEYS,
                        sinks=[kind.entry(root, servers) for kind in KINDS],
                        state_compaction=StateCompaction(max_delta_ratio=100.0))  # deltas only
    state = StateRoot(os.path.join(root, "state"), webhdfs.url("lake/diffcdc"))
    previous: dict = {}
    for i, rows in enumerate([snapshot_one(), snapshot_two(), snapshot_three()]):
        sid = f"{i + 1}.parquet"
        write_snapshot(source, sid, rows, seed=i)
        (result,) = run_table(spark, table, state, RunOptions(quality=PERMISSIVE, keep_versions=1)).snapshots
        got = {k: getattr(result, k) for k in ("inserted", "updated", "deleted")}
        assert got == expected_counts(previous, rows), sid
        verified = verify_table(spark, table, state, os.path.join(source, sid))
        assert len(verified) == len(KINDS)
        assert all(r.identical for r in verified.values()), {k: r.to_dict() for k, r in verified.items()}
        previous = rows
    tstate = TableState(state, "T")
    for kind, sink in zip(KINDS, table.sinks):
        kind.assert_once(tstate, sink.sink_id, servers)

    # The data is on the server, pruned to the retention (the head and the folders its state
    # builds on: a base and deltas); only documents are local.
    commits = tstate.commits()
    chain = state_chain(commits)
    folders = {c.version: c.record.version_dir.split("/")[-1] for c in commits}
    assert sorted(os.listdir(webhdfs.local("lake/diffcdc/T/versions"))) == [
        folders[link.version] for link in chain]
    assert [link.version for link in chain] == [1, 2, 3]
    for link in chain:
        assert os.listdir(webhdfs.local(f"lake/diffcdc/T/{link.path}"))
    local = local_files(os.path.join(root, "state"))
    assert local and all(f.endswith(".json") and "versions" not in f for f in local), local
    assert webhdfs.count("OPEN") > 0 and webhdfs.count("CREATE") > 0


def write_config(root: str, data: str, kinds: list, servers: dict[str, Any]) -> str:
    lines = ["[diffcdc]", f"state = {json.dumps(os.path.join(root, 'state'))}",
             f"state_data = {json.dumps(data)}", "keep_versions = 2", "",
             "[quality]", "min_row_ratio = 0.0", "max_delete_ratio = 1.0", "",
             "[tables.T]", f"source = {json.dumps(os.path.join(root, 'source'))}",
             f"keys = {json.dumps(KEYS)}", ""]
    for kind in kinds:
        entry = kind.entry(root, servers)
        lines += ["[[tables.T.sinks]]", *(f"{k} = {toml_value(v)}" for k, v in entry.items()), ""]
    path = os.path.join(root, "diffcdc.toml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines))
    return path


def run_cli(config: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DIFFCDC_CRASH"))}
    if crash_at:
        env["DIFFCDC_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--config", config,
         "--master", "local[1]"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )


def assert_replays(spark, config: str, sid: str, kinds: list, servers: dict[str, Any]) -> None:
    loaded = load_config(config)
    (table,) = loaded.tables
    results = verify_table(spark, table, loaded.state_root(), os.path.join(table.source, sid))
    assert all(r.identical for r in results.values()), {k: r.to_dict() for k, r in results.items()}
    state = TableState(loaded.state_root(), "T")
    assert state.head().snapshot_id == sid and state.head().published
    for kind, sink in zip(kinds, table.sinks):
        kind.assert_once(state, sink.sink_id, servers)


@pytest.mark.parametrize("point", [
    "after_claim",
    *(pytest.param(p, marks=pytest.mark.exhaustive)
      for p in ("after_changes_staged", "publish@landing_local:1", "kafka_after_commit@kafka",
                "delta_committed@delta")),
])
def test_a_run_killed_with_the_state_data_on_webhdfs_is_finished_exactly_once(
    spark, servers, webhdfs, tmp_path, point
) -> None:
    root = str(tmp_path)
    config = write_config(root, webhdfs.url("data"), KINDS, servers)
    source = os.path.join(root, "source")
    write_snapshot(source, "1.parquet", snapshot_one(), 0)
    (table,) = load_config(config).tables
    run_table(spark, table, load_config(config).state_root(), RunOptions(quality=PERMISSIVE))
    write_snapshot(source, "2.parquet", snapshot_two(), 1)
    crashed = run_cli(config, crash_at=point)
    assert crashed.returncode == 137, crashed.stderr[-2000:]
    assert main(["run", "--config", config, "--quiet"]) == 0  # finished in this process
    assert_replays(spark, config, "2.parquet", KINDS, servers)


LANDING = [k for k in KINDS if k.name == "landing_local"]


def test_a_state_data_server_that_is_down_fails_the_run_in_one_line_and_changes_nothing(
    spark, servers, webhdfs, tmp_path
) -> None:
    root = str(tmp_path)
    config = write_config(root, webhdfs.url("data"), LANDING, servers)
    source = os.path.join(root, "source")
    write_snapshot(source, "1.parquet", snapshot_one(), 0)
    assert main(["run", "--config", config, "--quiet"]) == 0
    landing = os.path.join(root, "landing")
    before = contents(landing)
    write_snapshot(source, "2.parquet", snapshot_two(), 1)

    webhdfs.refuse()
    down = run_cli(config)
    assert down.returncode != 0
    lines = [line for line in down.stderr.splitlines() if "T:" in line or "table T" in line]
    assert lines and all(len(line) < 600 for line in lines), down.stderr[-2000:]
    assert webhdfs.url("data") in down.stderr, down.stderr[-2000:]
    assert contents(landing) == before
    assert TableState(load_config(config).state_root(), "T").head().snapshot_id == "1.parquet"

    webhdfs.restore()
    assert main(["run", "--config", config, "--quiet"]) == 0
    assert_replays(spark, config, "2.parquet", LANDING, servers)


def test_verify_repair_and_drop_work_on_state_data_at_a_url(
    spark, servers, webhdfs, tmp_path, capsys
) -> None:
    root = str(tmp_path)
    config = write_config(root, webhdfs.url("data"), LANDING, servers)
    source = os.path.join(root, "source")
    write_snapshot(source, "1.parquet", snapshot_one(), 0)
    write_snapshot(source, "2.parquet", snapshot_two(), 1)
    assert main(["run", "--config", config, "--quiet"]) == 0
    assert main(["verify", "--config", config, "--table", "T", "--state", "--json"]) == 0
    capsys.readouterr()

    # A state part file lost on the server: the next run refuses in one line, repair rebuilds.
    state = TableState(load_config(config).state_root(), "T")
    folder = webhdfs.local(f"data/T/{state.head().record.state_path}")
    part = next(n for n in sorted(os.listdir(folder)) if n.startswith("part-"))
    os.unlink(os.path.join(folder, part))
    write_snapshot(source, "3.parquet", snapshot_three(), 2)
    assert main(["run", "--config", config, "--quiet"]) != 0
    assert part in capsys.readouterr().err
    assert main(["repair", "--config", config, "--table", "T", "--quiet"]) == 0
    assert main(["run", "--config", config, "--quiet"]) == 0
    assert_replays(spark, config, "3.parquet", LANDING, servers)

    assert main(["drop", "--config", config, "--table", "T", "--yes"]) == 0
    assert not os.path.exists(webhdfs.local("data/T")) and not os.path.exists(os.path.join(root, "state", "T"))
