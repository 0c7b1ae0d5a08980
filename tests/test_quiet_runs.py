"""No Spark for no work, and nothing from the JVM on the terminal (issues 16 and 17).

Subprocess runs of the real CLI with Java made unreachable prove that no JVM is started for
an idle run or a typo; a failing run's terminal output is one line, while the run's log files
under the state root hold diffcdc's trace and the JVM's own log.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.workspace import Workspace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def cli(ws: Workspace, *extra: str, no_java: bool = False, source: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = ROOT
    if no_java:  # a JVM start would fail: proves that none is attempted
        env["JAVA_HOME"] = "/nonexistent"
        env["PATH"] = os.path.dirname(sys.executable)
    command = [sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--source",
               source or ws.source, "--keys", "id", "--table", "T", "--landing", ws.landing,
               "--state", ws.state, "--master", "local[1]", *extra]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_idle_run_and_typos_start_no_jvm(spark, tmp_path):
    ws = Workspace(str(tmp_path))
    ws.write("0001.parquet", [{"id": 1, "name": "a"}], SCHEMA)
    ws.run(spark)
    idle = cli(ws, no_java=True)
    assert idle.returncode == 0, idle.stderr
    assert idle.stderr == ""
    typo = cli(ws, no_java=True, source=str(tmp_path / "sorce"))
    assert typo.returncode == 2
    assert typo.stderr.strip().splitlines() == [typo.stderr.strip()]
    assert "sorce does not exist" in typo.stderr
    before = {f for f in os.listdir(os.path.join(ws.state, "T", "reports"))}
    assert cli(ws, no_java=True).returncode == 0  # an idle run keeps the last real report
    assert set(os.listdir(os.path.join(ws.state, "T", "reports"))) == before


@pytest.mark.slow
def test_a_failing_run_is_one_line_and_the_traces_go_to_the_log(spark, tmp_path):
    ws = Workspace(str(tmp_path))
    ws.write("0001.parquet", [{"id": 1, "name": "a"}], SCHEMA)
    ws.run(spark)
    folder = os.path.join(ws.source, "0002")
    os.makedirs(folder)
    bad = os.path.join(folder, "part-0.parquet")
    pq.write_table(pa.Table.from_pylist([{"id": i, "name": "x"} for i in range(500)], schema=SCHEMA),
                   bad, compression="zstd")
    with open(bad, "r+b") as handle:
        handle.seek(4)
        handle.write(b"\xff" * 64)  # the first page header: the footer still reads
    failed = cli(ws)
    assert failed.returncode == 3
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and "table T, snapshot 0002, file " in lines[0], lines
    assert "part-0.parquet" in lines[0]
    logs = glob.glob(os.path.join(ws.state, "_logs", "run-*.log"))
    (jvm,) = [p for p in logs if p.endswith(".spark.log")]
    (own,) = [p for p in logs if not p.endswith(".spark.log")]
    with open(own, encoding="utf-8") as handle:
        assert "Traceback" in handle.read()
    with open(jvm, encoding="utf-8") as handle:
        assert "part-0.parquet" in handle.read()


@pytest.mark.slow
def test_verify_keeps_the_jvm_output_in_the_log(spark, tmp_path):
    ws = Workspace(str(tmp_path))
    ws.write("0001.parquet", [{"id": 1, "name": "a"}], SCHEMA)
    ws.run(spark)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = ROOT
    verify = subprocess.run(
        [sys.executable, "-m", "diffcdc.cli", "verify", "--landing", ws.landing, "--table", "T",
         "--state", ws.state, "--snapshot", os.path.join(ws.source, "0001.parquet"),
         "--master", "local[1]"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert verify.returncode == 0, verify.stderr
    assert verify.stderr == ""
    assert "T: identical" in verify.stdout
    assert glob.glob(os.path.join(ws.state, "_logs", "run-*.spark.log"))
