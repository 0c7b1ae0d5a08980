"""Spark Connect, as it fails in the field (issue 29.3): a server in a process of its own,
started from the pip wheel, and clients that cannot start a JVM (no Java on their ``PATH``:
a JVM call on that path fails instead of being answered by a hidden local JVM, as
``.remote("local")`` would).

* the sink contract through the server: every sink's output replays to each snapshot of
  random sequences, nothing applied twice;
* a client killed while the server runs its job: the rerun is exact, the orphaned job neither
  publishes nor commits;
* ``run_dataframe`` on a Connect session's DataFrame: the caller's settings mean what they
  mean, the session comes back as it was, the server reports progress;
* every command over Connect (``--remote``, ``[spark] remote``, ``SPARK_REMOTE``), and an
  unreachable server as one line with nothing written.

The test process checks each sink's output with its own classic session (``spark``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings

from diffcdc.config import TableConfig
from diffcdc.engine.verify import verify_table
from diffcdc.spark.settings import SESSION_KEYS
from diffcdc.state.store import TableState
from tests.support.config_text import table_toml
from tests.support.connect_server import client_env
from tests.support.contract import assert_once, assert_replays
from tests.support.hypothesis_profiles import examples
from tests.support.sink_kinds import KINDS
from tests.support.snapshots import snapshot_one, snapshot_sequences, snapshot_two, write_snapshot

pytestmark = [pytest.mark.slow, pytest.mark.connect]
KEYS = ("k1", "k2")


def _cli(cwd: str, *args: str, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``diffcdc ARGS`` in a client process without Java."""
    return subprocess.run([sys.executable, "-m", "diffcdc.cli", *args], cwd=cwd,
                          env=client_env(cwd, **(env or {})), capture_output=True, text=True,
                          timeout=timeout, check=False)


def _table(root: str, servers: dict[str, Any], source: Any = None, keys=KEYS) -> TableConfig:
    return TableConfig(name="T", source=source or os.path.join(root, "source"), keys=list(keys),
                       sinks=[kind.entry(root, servers) for kind in KINDS])


def _config(root: str, table: TableConfig, url: str) -> str:
    path = os.path.join(root, "diffcdc.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(table_toml(table, os.path.join(root, "state"), spark={"remote": url}))
    return path


#: The Connect replay's example count under the full profile (one under the default): the
#: in-process contract (tests/test_sink_contract.py) runs the same data path (the engine, every
#: sink's publishing, verify) over the same strategy at its own count; through the server each
#: example costs a client process per snapshot. Each example still sends every sink kind and
#: the awkward-types snapshots (tests/support/snapshots.py) through the server.
CONNECT_REPLAY_EXAMPLES = 3


@pytest.mark.default_tier
def test_every_sink_replays_each_snapshot_through_a_connect_server(spark, servers, connect_server):
    @settings(max_examples=examples(CONNECT_REPLAY_EXAMPLES), deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(snapshots=snapshot_sequences())
    def body(snapshots):
        with tempfile.TemporaryDirectory() as root:
            table = _table(root, servers)
            config = _config(root, table, connect_server.url)
            state = os.path.join(root, "state")
            for i, rows in enumerate(snapshots):
                sid = f"{i + 1:08d}.parquet"
                write_snapshot(table.source, sid, rows, seed=i)
                done = _cli(root, "run", "--quiet", "--config", config)
                assert done.returncode == 0, done.stderr[-3000:]
                assert_replays(spark, table, state, os.path.join(table.source, sid))
            assert_once(table, state, servers)

    body()


def _client_job(root: str, job: dict[str, Any]) -> subprocess.Popen[str]:
    path = os.path.join(root, f"job-{time.monotonic_ns()}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(job, f)
    return subprocess.Popen([sys.executable, "-m", "tests.support.connect_client", path],
                            cwd=root, env=client_env(root), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _finished(process: subprocess.Popen[str], timeout: float = 300) -> dict[str, Any]:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _slow_job(root: str, url: str, sinks: list[dict[str, Any]], sid: str, sleep: float) -> dict:
    return {"remote": url, "frame": "slow", "rows": 40, "sleep": sleep, "tag": "v",
            "run": {"table": "T", "keys": ["k"], "sinks": sinks, "snapshot_id": sid,
                    "state": os.path.join(root, "state"),
                    "quality": {"min_row_ratio": 0.0, "max_delete_ratio": 1.0}}}


@pytest.mark.default_tier
def test_a_client_killed_while_the_server_runs_its_job_changes_nothing(
        spark, servers, connect_server, tmp_path):
    root = str(tmp_path)
    table = _table(root, servers, source={"type": "dataframe"}, keys=("k",))
    sinks = [kind.entry(root, servers) for kind in KINDS]
    state = os.path.join(root, "state")
    expected = os.path.join(root, "expected.parquet")
    pq.write_table(pa.table({"k": pa.array(range(40), pa.int64()),
                             "v": [f"v{i}" for i in range(40)]}), expected)

    first = _finished(_client_job(root, _slow_job(root, connect_server.url, sinks, "001", 0)))
    assert first["report"]["outcome"] == "ok", first
    # The second snapshot's copy takes the server ~20 s (one task, a sleeping UDF): the
    # client is killed once that job runs, and the rerun comes while it still runs.
    jobs_before = connect_server.running_jobs()
    doomed = _client_job(root, _slow_job(root, connect_server.url, sinks, "002", 0.5))
    deadline = time.monotonic() + 120
    while not (connect_server.running_jobs() - jobs_before) and time.monotonic() < deadline:
        assert doomed.poll() is None, doomed.communicate()[1][-3000:]
        time.sleep(0.2)
    orphaned = connect_server.running_jobs() - jobs_before
    assert orphaned, "the server never started the copy's job"
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.communicate()
    heads = [c.version for c in TableState(state, "T").commits()]

    rerun = _finished(_client_job(root, _slow_job(root, connect_server.url, sinks, "002", 0)))
    assert rerun["report"]["outcome"] == "ok", rerun
    assert connect_server.running_jobs() & orphaned, "the orphaned job ended before the rerun"
    assert_replays(spark, table, state, expected)

    # The orphaned job ends on its own; it neither committed nor published anything.
    deadline = time.monotonic() + 120
    while connect_server.running_jobs() & orphaned and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not connect_server.running_jobs() & orphaned
    commits = TableState(state, "T").commits()
    assert [c.version for c in commits] == heads + [heads[-1] + 1]
    assert commits[-1].snapshot_id == "002" and commits[-1].published
    assert_replays(spark, table, state, expected)
    assert_once(table, state, servers)
    # and the next run on that state is as exact
    again = _finished(_client_job(root, _slow_job(root, connect_server.url, sinks, "003", 0)))
    assert again["report"]["outcome"] == "ok", again
    assert_replays(spark, table, state, expected)
    # ... which also cleared what the orphaned job left: its copy, its version folder
    assert os.listdir(os.path.join(state, "T", "snapshots")) == []
    committed = [f"{c.version:020d}-{c.record.run_id}" for c in TableState(state, "T").commits()]
    assert sorted(os.listdir(os.path.join(state, "T", "versions"))) == committed


CALLER = {
    "spark.sql.session.timeZone": "America/New_York",
    "spark.sql.parquet.outputTimestampType": "INT96",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY",
    "spark.sql.shuffle.partitions": "3",
}
MEANT = [dt.datetime(2026, 1, 15, 13, 30, tzinfo=dt.timezone.utc),
         dt.datetime(2026, 7, 2, 3, 15, tzinfo=dt.timezone.utc)]


def test_run_dataframe_on_a_connect_session_means_what_the_caller_meant(
        spark, servers, connect_server, tmp_path):
    root = str(tmp_path)
    (tmp_path / "in.csv").write_text("k,at,v\n1,2026-01-15 08:30:00,a\n2,2026-07-01 23:15:00,b\n")
    table = _table(root, servers, source={"type": "dataframe"}, keys=("k",))
    job = {"remote": connect_server.url, "frame": "csv", "csv": str(tmp_path / "in.csv"),
           "schema": "k INT, at TIMESTAMP, v STRING", "settings": CALLER, "long_job": 1.5,
           "watched": sorted({*CALLER, *SESSION_KEYS}),
           "run": {"table": "T", "keys": ["k"], "snapshot_id": "001",
                   "sinks": [kind.entry(root, servers) for kind in KINDS],
                   "state": os.path.join(root, "state")}}
    out = _finished(_client_job(root, job))
    assert out["report"]["outcome"] == "ok", out
    assert out["after"] == out["before"]
    assert out["before"]["spark.sql.session.timeZone"] == "America/New_York"
    assert out["stages_seen"] > 0, "no progress reported by the server"
    expected = os.path.join(root, "expected.parquet")
    pq.write_table(pa.table({"k": pa.array([1, 2], pa.int32()),
                             "at": pa.array(MEANT, pa.timestamp("us", tz="UTC")),
                             "v": ["a", "b"]}), expected)
    assert_replays(spark, table, os.path.join(root, "state"), expected)


def test_every_command_works_through_a_connect_server(spark, servers, connect_server, tmp_path):
    root = str(tmp_path)
    table = _table(root, servers)
    config = _config(root, table, connect_server.url)
    state = os.path.join(root, "state")
    write_snapshot(table.source, "1.parquet", snapshot_one(), seed=0)
    write_snapshot(table.source, "2.parquet", snapshot_two(), seed=1)
    url = connect_server.url

    def ok(*args: str, env: dict[str, str] | None = None) -> str:
        done = _cli(root, *args, env=env)
        assert done.returncode == 0, (args, done.stderr[-3000:])
        return done.stdout

    ok("plan", "--config", config)
    ok("run", "--quiet", "--config", config)
    assert_replays(spark, table, state, os.path.join(table.source, "2.parquet"))
    assert_once(table, state, servers)
    assert "2.parquet" in ok("status", "--config", config)
    ok("rollback", "--quiet", "--config", config, "--table", "T", "--to-version", "1", "--yes")
    assert_replays(spark, table, state, os.path.join(table.source, "1.parquet"))
    ok("reload", "--quiet", "--config", config, "--table", "T", "--yes")  # the head: 1.parquet
    assert_replays(spark, table, state, os.path.join(table.source, "1.parquet"))
    for sink in table.sinks:  # the command line's --remote
        ok("verify", "--config", config, "--table", "T", "--sink", sink.sink_id,
           "--snapshot", os.path.join(table.source, "1.parquet"), "--remote", url)
    ok("verify", "--state", state, "--table", "T")
    # a damaged head state is rebuilt through the server
    head = TableState(state, "T").head()
    state_files = sorted(p for p in os.listdir(os.path.join(state, "T", head.record.state_path))
                         if p.endswith(".parquet"))
    os.remove(os.path.join(state, "T", head.record.state_path, state_files[0]))
    out = ok("repair", "--source", table.source, "--table", "T", "--state", state,
             env={"SPARK_REMOTE": url})  # the environment's server
    assert "rebuilt the state of version" in out, out
    ok("verify", "--state", state, "--table", "T")


def test_an_unreachable_server_is_one_line_and_nothing_is_written(tmp_path):
    root = str(tmp_path)
    write_snapshot(os.path.join(root, "source"), "1.parquet", snapshot_one(3), seed=0)
    from tests.support.kafka_broker import free_port

    url = f"sc://127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = _cli(root, "run", "--source", "source", "--keys", "k1,k2", "--table", "T",
                "--landing", "landing", "--state", "state", "--remote", url, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and f"Spark Connect server at {url} does not answer" in lines[0], \
        done.stderr
    assert time.monotonic() - started < 60
    assert not os.path.exists(os.path.join(root, "landing"))
    assert not os.path.exists(os.path.join(root, "state", "T"))
    # master and remote together are refused before anything starts
    both = _cli(root, "run", "--source", "source", "--keys", "k1,k2", "--table", "T",
                "--landing", "landing", "--state", "state", "--remote", url, "--master", "local[1]")
    assert both.returncode == 2 and "master and remote exclude each other" in both.stderr, \
        both.stderr


@pytest.mark.integration
def test_a_postgres_source_reads_the_same_through_a_connect_server(
        spark, postgres, connect_server, tmp_path):
    """The server's Spark reads the rows over JDBC, the client holds the exported snapshot
    (psycopg): the copy holds what a classic read gives, every type and a partitioned read."""
    from diffcdc.engine.run import RunOptions, run_table
    from tests.support.postgres_tables import TYPED, WIDE
    from tests.support.workspace import PERMISSIVE

    postgres.sql(TYPED + WIDE)
    secret = "DIFFCDC_TEST_CONNECT_PG"
    root = str(tmp_path)
    for relation, keys, split in (("public.typed", ["region", "id"], {}),
                                  ("wide", ["id"], {"partition_column": "id", "num_partitions": 3,
                                                    "wide_numeric": "string"})):
        source = {"type": "jdbc", "url": postgres.jdbc_url, "user": postgres.user,
                  "password_env": secret, "table": relation, **split}
        name = relation.split(".")[-1]
        connect = TableConfig(name=name, source=source, keys=keys, keep_snapshots=1,
                              landing=os.path.join(root, "landing"))
        config = os.path.join(root, f"{name}.toml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(table_toml(connect, os.path.join(root, "state"),
                               spark={"remote": connect_server.url}, fields={"keep_snapshots": 1}))
        done = _cli(root, "run", "--quiet", "--config", config, env={secret: postgres.password})
        assert done.returncode == 0, done.stderr[-3000:]
        head = TableState(os.path.join(root, "state"), name).head()
        copy = os.path.join(root, "state", name, "snapshots", head.snapshot_id)
        results = verify_table(spark, connect, os.path.join(root, "state"), copy)
        assert results and all(r.identical for r in results.values()), results

        os.environ[secret] = postgres.password
        try:  # the same source read classically, for comparison
            classic_root = os.path.join(root, "classic")
            run_table(spark, connect.with_table_fields(landing=os.path.join(classic_root, "l")),
                      os.path.join(classic_root, "state"), RunOptions(quality=PERMISSIVE))
        finally:
            del os.environ[secret]
        chead = TableState(os.path.join(classic_root, "state"), name).head()
        ccopy = os.path.join(classic_root, "state", name, "snapshots", chead.snapshot_id)
        a, b = spark.read.parquet(copy), spark.read.parquet(ccopy)
        assert a.schema == b.schema, relation
        assert a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0, relation
