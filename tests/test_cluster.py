"""Whole pipelines on a real Spark standalone cluster (tests/support/spark_cluster.py, one per session).

Every run here is ``diffcdc run`` in its own process whose driver talks to the cluster's master
(``[spark] master`` in the config, or ``--master`` on the command line); its executors are
separate JVMs started by the worker, sharing this machine's disk with the driver (the state and
landing roots are therefore reachable by both under the same path, as a cluster requires). The
Kafka sink encodes its messages in Python tasks on the executors, so those runs also prove that
the executors import diffcdc with the driver's interpreter. Each sink's output is replayed and
checked for "nothing twice" with the helpers of tests/support/sink_kinds.py; the checks run in this
process (local Spark) on the files the cluster wrote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from diffcdc.config_file import load_config
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.state.store import TableState
from tests.support.config_text import toml_value
from tests.support.sink_kinds import KINDS
from tests.support.snapshots import row, snapshot_one, snapshot_two, write_snapshot
from tests.support.workspace import PERMISSIVE, expected_counts

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.integration]

ALL_SINKS = [k for k in KINDS if k.name in {"landing_local", "delta", "kafka"}]
LANDING_ONLY = [k for k in KINDS if k.name == "landing_local"]


def write_config(root: str, tables: dict[str, list], servers: dict[str, Any],
                 master: str | None, quality: dict[str, Any], state_data: str | None = None) -> str:
    """A config file: each table with its sinks (tests/support/sink_kinds.py entries, one folder per
    table), ``[spark] master`` when given, the gate settings in ``[quality]``, the state
    Parquet in ``state_data`` when given."""
    lines = [f"[diffcdc]\nstate = {json.dumps(os.path.join(root, 'state'))}\nparallelism = 3\n"
             + (f"state_data = {json.dumps(state_data)}\n" if state_data else "")]
    if master:
        lines.append(f"[spark]\nmaster = {json.dumps(master)}\n")
    lines.append("[quality]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in quality.items()))
    for name, kinds in tables.items():
        lines.append(f"[tables.{name}]\nsource = {json.dumps(os.path.join(root, 'src', name))}\n"
                     'keys = ["k1", "k2"]\n')
        for kind in kinds:
            entry = kind.entry(os.path.join(root, name), servers)
            lines.append(f"[[tables.{name}.sinks]]\n"
                         + "".join(f"{k} = {toml_value(v)}\n" for k, v in entry.items()))
    path = os.path.join(root, "diffcdc.toml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines))
    return path


def cli(*args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "diffcdc.cli", "run", *args], env=cli_env(crash_at),
                          capture_output=True, text=True, timeout=600, check=False)


def cli_env(crash_at: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DIFFCDC_CRASH_AT"))}
    if crash_at:
        env["DIFFCDC_CRASH_AT"] = crash_at
    return env


def assert_every_sink_replays(spark, config_path: str, table: str, snapshot: str,
                              kinds: list, servers: dict[str, Any]) -> None:
    """Each sink's output replays to ``snapshot``, and its own check finds nothing twice."""
    config = load_config(config_path)
    (tcfg,) = [t for t in config.tables if t.name == table]
    results = verify_table(spark, tcfg, config.state_root(), os.path.join(tcfg.source, snapshot))
    bad = {k: r.to_dict() for k, r in results.items() if not r.identical}
    assert not bad, bad
    state = TableState(config.state_root(), table)
    assert state.head().snapshot_id == snapshot and state.head().published
    for kind, sink in zip(kinds, tcfg.sinks):
        kind.assert_once(state, sink.sink_id, servers)


def files_under(*folders: str) -> dict[str, bytes]:
    """Every file under ``folders`` with its content (run logs and reports left out)."""
    out = {}
    for base in folders:
        for folder, _, names in os.walk(base):
            if "_logs" in folder or "reports" in folder:
                continue
            for name in names:
                if name in {".lock", "last_report.json"}:
                    continue
                with open(os.path.join(folder, name), "rb") as handle:
                    out[os.path.join(folder, name)] = handle.read()
    return out


def spark_submit(cluster, root: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``spark-submit --master <cluster> launcher.py run ARGS``, the launcher being the
    two-line file docs/cluster.md shows."""
    launcher = os.path.join(root, "run_diffcdc.py")
    with open(launcher, "w", encoding="utf-8") as handle:
        handle.write("import sys\nfrom diffcdc.cli.main import main\nsys.exit(main())\n")
    env = {**cli_env(), "PYSPARK_PYTHON": sys.executable}
    command = [os.path.join(cluster.home, "bin", "spark-submit"), "--master", cluster.master_url,
               "--conf", "spark.sql.shuffle.partitions=3", launcher, "run", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)


def kill_driver_while_staging(*args: str) -> None:
    """``diffcdc run ARGS`` killed with SIGKILL once it logs that the sinks' output is staging."""
    proc = subprocess.Popen([sys.executable, "-m", "diffcdc.cli", "run", *args],
                            env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if ": stage +" in line:
            proc.send_signal(signal.SIGKILL)
            break
    proc.stderr.close()
    assert proc.wait(60) == -signal.SIGKILL, "".join(seen)[-3000:]


def new_apps(cluster, before: int) -> list:
    return cluster.applications()[before:]


def test_config_master_runs_many_tables_with_key_changes_and_a_gate_refusal(
        spark, spark_cluster, broker, tmp_path):
    root = str(tmp_path)
    servers = {"kafka": broker}
    tables = {"Orders": ALL_SINKS, "Items": LANDING_ONLY, "Guarded": LANDING_ONLY}
    quality = {"min_row_ratio": 0.0, "max_delete_ratio": 0.3, "min_rows_for_ratios": 1}
    config = write_config(root, tables, servers, spark_cluster.master_url, quality)
    for seed, name in enumerate(tables):
        write_snapshot(os.path.join(root, "src", name), "1.parquet", snapshot_one(), seed)
    apps = len(spark_cluster.applications())

    first = cli("--config", config, "--json", "--quiet")
    assert first.returncode == 0, first.stderr[-3000:]
    doc = json.loads(first.stdout)
    assert {t["table"]: t["snapshots"][0]["inserted"] for t in doc["tables"]} == dict.fromkeys(tables, 20)
    (app,) = new_apps(spark_cluster, apps)  # the run was one application of the cluster
    assert app.name == "diffcdc"

    second_rows = {"Orders": snapshot_two(), "Items": {**snapshot_one(), (1, "a"): row(1, "upd")},
                   "Guarded": {k: v for k, v in snapshot_one().items() if k[0] < 5}}
    for seed, (name, rows) in enumerate(second_rows.items()):
        write_snapshot(os.path.join(root, "src", name), "2.parquet", rows, seed + 10)
    guarded_before = files_under(os.path.join(root, "state", "Guarded"), os.path.join(root, "Guarded"))

    second = cli("--config", config, "--json", "--quiet")
    assert second.returncode == 3, second.stderr[-3000:]  # input refused: the gate
    outcome = {t["table"]: t for t in json.loads(second.stdout)["tables"]}
    assert {n: t["outcome"] for n, t in outcome.items()} == {"Orders": "ok", "Items": "ok", "Guarded": "failed"}
    assert "Guarded" in second.stderr and "delete_ratio" in second.stderr
    for name in ("Orders", "Items"):
        got = {k: outcome[name]["snapshots"][0][k] for k in ("inserted", "updated", "deleted")}
        assert got == expected_counts(snapshot_one(), second_rows[name]), name
    assert files_under(os.path.join(root, "state", "Guarded"), os.path.join(root, "Guarded")) == guarded_before
    assert len(new_apps(spark_cluster, apps)) == 2

    for name in ("Orders", "Items"):
        assert_every_sink_replays(spark, config, name, "2.parquet", tables[name], servers)
    assert_every_sink_replays(spark, config, "Guarded", "1.parquet", LANDING_ONLY, servers)


def test_driver_killed_mid_run_then_rerun_replays_every_sink_exactly(
        spark, spark_cluster, broker, webhdfs, tmp_path):
    """With ``state_data`` on the loopback WebHDFS server: the executors write the state
    Parquet and staged output through Hadoop's WebHdfsFileSystem and encode Kafka bodies and
    landing text through fsspec, none of it on a path the driver and executors share. (A
    state root on the shared disk runs on the cluster in the test above.)"""
    root = str(tmp_path)
    servers = {"kafka": broker}
    config = write_config(root, {"T": ALL_SINKS}, servers, None,
                          {"min_row_ratio": 0.0, "max_delete_ratio": 1.0},
                          state_data=webhdfs.url("lake/diffcdc"))
    state_root = load_config(config).state_root()
    source = os.path.join(root, "src", "T")
    write_snapshot(source, "1.parquet", snapshot_one(), 0)
    (table,) = load_config(config).tables
    run_table(spark, table, state_root, RunOptions(quality=PERMISSIVE))  # first load, locally
    on_cluster = ("--config", config, "--master", spark_cluster.master_url)

    # A real SIGKILL of the driver while the executors stage the sinks' output (the commit
    # boundary itself is killed at every point by the contract tests, locally); the rerun is
    # started by spark-submit, whose --master the config does not override.
    write_snapshot(source, "2.parquet", snapshot_two(), 1)
    kill_driver_while_staging(*on_cluster)
    assert TableState(state_root, "T").head().snapshot_id == "1.parquet"
    apps = len(spark_cluster.applications())
    rerun = spark_submit(spark_cluster, root, "--config", config, "--quiet")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert len(new_apps(spark_cluster, apps)) == 1  # it ran on the cluster, not local[*]
    head = TableState(state_root, "T").head().record
    counts = head.counts
    assert {"inserted": counts.inserted, "updated": counts.updated, "deleted": counts.deleted} == (
        expected_counts(snapshot_one(), snapshot_two()))
    assert_every_sink_replays(spark, config, "T", "2.parquet", ALL_SINKS, servers)
    again = cli(*on_cluster, "--quiet", "--json")  # nothing pending: no Spark at all
    assert again.returncode == 0 and json.loads(again.stdout)["tables"][0]["outcome"] == "nothing to do"

    # The state Parquet is on the server; the local state root holds only documents.
    assert os.listdir(webhdfs.local(f"lake/diffcdc/T/{head.state_path}"))
    local = [os.path.join(d, n) for d, _, names in os.walk(os.path.join(root, "state")) for n in names]
    assert local and not [f for f in local if f.endswith(".parquet")], local
    assert webhdfs.count("CREATE") > 0


def test_executors_without_diffcdc_are_refused_before_anything_runs(spark_cluster, broker, tmp_path):
    """Every commit runs diffcdc's Python on the executors: an executor Python that cannot
    import diffcdc's dependencies is one line and exit 2, before any table reads or writes."""
    root = str(tmp_path)
    config = write_config(root, {"T": ALL_SINKS}, {"kafka": broker}, spark_cluster.master_url,
                          {"min_row_ratio": 0.0})
    write_snapshot(os.path.join(root, "src", "T"), "1.parquet", snapshot_one(), 0)
    bare = os.path.join(root, "python-without-site-packages")
    with open(bare, "w", encoding="utf-8") as handle:
        handle.write(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    os.chmod(bare, 0o755)
    env = {**cli_env(), "PYSPARK_PYTHON": bare}
    run = subprocess.run([sys.executable, "-m", "diffcdc.cli", "run", "--config", config, "--quiet"],
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 2, run.stderr[-3000:]
    (line,) = [x for x in run.stderr.splitlines() if x.strip()]
    assert "executors" in line and "table(s) T" in line and "ModuleNotFoundError" in line, line
    assert TableState(os.path.join(root, "state"), "T").head() is None
    assert not os.path.exists(os.path.join(root, "T", "landing"))

