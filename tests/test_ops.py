"""Running it nightly: no Spark for no work, the run's log file, progress, plan, status."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from diffcdc.cli.main import main
from diffcdc.state.requests import reload_wanted
from diffcdc.state.store import TableState
from tests.support.cli_runs import rows, run_args, write

ISO_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d \S")


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_spark(monkeypatch):
    """Fail the test if anything asks for a SparkSession."""
    import diffcdc.spark.session

    def refuse(*args, **kwargs):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(diffcdc.spark.session, "build_spark", refuse)


def config_file(base, *tables: str) -> str:
    text = '[diffcdc]\nstate = "state"\nlanding = "landing"\n'
    for name in tables:
        text += f'[tables.{name}]\nsource = "src/{name}"\nkeys = ["id"]\n'
    (base / "diffcdc.toml").write_text(text)
    return str(base / "diffcdc.toml")


# -- no Spark before it is needed ---------------------------------------------------------


def test_idle_run_and_early_refusals_start_no_spark(spark, base, capsys, monkeypatch):
    write(str(base / "src" / "1.parquet"), rows(3))
    assert main(run_args(base)) == 0
    import diffcdc.spark.session

    monkeypatch.setattr(diffcdc.spark.session, "build_spark", lambda *a, **k: pytest.fail("Spark started"))
    capsys.readouterr()
    assert main(run_args(base)) == 0
    out = capsys.readouterr().out
    assert "nothing to do" in out and "total: 1 table(s) (1 nothing to do)" in out
    # A wrong --source, an unknown override name: refused before Spark, nothing created.
    wrong = run_args(base)
    wrong[2] = str(base / "typo")
    assert main([*wrong[:6], "Typo", *wrong[7:]]) == 2
    assert "typo does not exist" in capsys.readouterr().err
    assert not (base / "state" / "Typo").exists()
    assert main(run_args(base, "--override-check", "delete_ration")) == 2
    assert "unknown check name(s) to override: delete_ration" in capsys.readouterr().err
    assert main(run_args(base, "--override-check", "keys_unique")) == 2
    assert "cannot be overridden" in capsys.readouterr().err


@pytest.mark.slow
def test_idle_run_subprocess_is_fast_and_starts_no_jvm(spark, base):
    write(str(base / "src" / "1.parquet"), rows(3))
    assert main(run_args(base)) == 0
    probe = (
        "import json, resource, sys, time\n"
        "from diffcdc.cli.main import main\n"
        "code = main(sys.argv[1:])\n"
        "import diffcdc.spark.session\n"
        "ctx = sys.modules.get('pyspark.core.context')\n"
        "use = resource.getrusage(resource.RUSAGE_SELF)\n"
        "print(json.dumps({'code': code, 'jvm_starts': diffcdc.spark.session.jvm_starts,\n"
        "    'gateway': bool(ctx and ctx.SparkContext._gateway),\n"
        "    'cpu': use.ru_utime + use.ru_stime}))\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", probe, *run_args(base, "--json")],
                          capture_output=True, text=True, timeout=60)
    seconds = time.monotonic() - started
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    cpu = facts.pop("cpu")
    assert facts == {"code": 0, "jvm_starts": 0, "gateway": False}, done.stderr
    # Under 2 s of the machine's time (about 1 s wall on an idle 2-core machine); the wall
    # clock only has to stay far below a JVM start (10+ s) on a machine other jobs share.
    assert cpu < 2.0 and seconds < 6.0, f"an idle run took {seconds:.2f} s, {cpu:.2f} s CPU"


def test_failed_first_run_leaves_no_state_folder(spark, base, capsys):
    os.makedirs(base / "src")
    (base / "src" / "1.parquet").write_bytes(b"not parquet at all")
    assert main(run_args(base)) == 3
    assert "cannot read snapshot" in capsys.readouterr().err
    assert not (base / "state" / "T").exists()  # nothing committed or requested: no table
    os.makedirs(base / "state" / "Ghost" / "reports")  # what older versions left behind
    assert main(["status", "--state", str(base / "state")]) == 0
    assert "no tables" in capsys.readouterr().out


# -- the run's log file -------------------------------------------------------------------


def test_failed_table_trace_goes_to_the_log_file(spark, base, capsys):
    cfg = config_file(base, "Good", "Bad")
    write(str(base / "src" / "Good" / "1.parquet"), rows(3))
    write(str(base / "src" / "Bad" / "1.parquet"), rows(3) + rows(1))  # duplicate key 0
    assert main(["run", "--config", cfg, "--json"]) == 3
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert "Traceback" not in captured.err and "table Bad" in captured.err
    with open(doc["log"], encoding="utf-8") as handle:
        text = handle.read()
    assert "Traceback (most recent call last)" in text and "QualityGateFailed" in text
    assert "Good: 1.parquet: +3 ~0 -0" in text and "total: 2 table(s)" in text
    assert os.path.dirname(doc["log"]) == str(base / "state" / "_logs")


@pytest.mark.slow
def test_jvm_output_goes_to_the_log_file_not_the_terminal(base):
    write(str(base / "src" / "1.parquet"), rows(3))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    done = subprocess.run(
        [sys.executable, "-m", "diffcdc.cli", *run_args(base, "--master", "local[1]", "--json")],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)  # nothing from the JVM on stdout either
    lines = done.stderr.strip().splitlines()
    assert lines and all(ISO_LINE.match(line) for line in lines), done.stderr
    assert not re.search(r"log4j|WARN|Setting default log level", done.stderr)
    with open(doc["log"], encoding="utf-8") as handle:
        assert "T: 1.parquet: +3 ~0 -0" in handle.read()
    assert os.path.exists(doc["log"][: -len(".log")] + ".spark.log")  # the JVM's own output


# -- progress -------------------------------------------------------------------------------


def test_plain_progress_lines_and_quiet(spark, base, capsys):
    write(str(base / "src" / "1.parquet"), rows(3))
    assert main(run_args(base)) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert all(ISO_LINE.match(line) for line in err)
    assert any("T: 1.parquet: fingerprint and diff (version 1)" in line for line in err)
    assert any("T: 1.parquet: +3 ~0 -0 (3 rows, 1 file(s))" in line for line in err)
    write(str(base / "src" / "2.parquet"), rows(3, changed=1))
    assert main(run_args(base, "--quiet")) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "total: 1 table(s) (1 ok); 1 snapshot(s), +0 ~1 -0" in captured.out


def test_live_display_shows_tables_steps_rows_and_spark_stages(spark):
    from rich.console import Console

    from diffcdc.cli.progress import LiveProgress, active_stages
    from diffcdc.engine.report import SnapshotResult, TableReport

    out = io.StringIO()
    live = LiveProgress(Console(file=out, force_terminal=True, width=140))
    live.spark_started(spark)
    live.table_started("Orders", None)
    live.stage("Orders", "2026-11-21.parquet", "fingerprint and diff (version 4)")
    job = threading.Thread(target=lambda: spark.range(0, 2, numPartitions=2).selectExpr(
        "java_method('java.lang.Thread', 'sleep', id * 0 + 4000)").collect())
    job.start()
    seen = []
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:
        seen = [s for s in active_stages(spark, {}) if s.tasks == 2]
        time.sleep(0.1)
    screen = ""
    while "spark stage" not in screen and job.is_alive():  # shown once older than 1 s
        rendered = Console(file=io.StringIO(), width=140)
        rendered.print(live._render())
        screen = rendered.file.getvalue()
        time.sleep(0.2)
    job.join()
    live.snapshot_done("Orders", SnapshotResult("2026-11-21.parquet", 4, 10, 1, 2, 3, 4, [], None, 1.0))
    live.table_done(TableReport("Orders", "r", "t", outcome="ok"))
    live.close()
    assert seen and seen[0].done <= 2 and "tasks" in seen[0].line()
    assert "fingerprint and diff (version 4)" in screen and "spark stage" in screen
    final = out.getvalue()
    assert "Orders" in final and "10 (+1 ~2 -3)" in final and "ok" in final


# -- plan -----------------------------------------------------------------------------------


def test_plan_shows_work_without_spark(spark, base, capsys, monkeypatch):
    cfg = config_file(base, "A", "B")
    write(str(base / "src" / "A" / "1.parquet"), rows(3))
    os.makedirs(base / "src" / "B")
    assert main(["run", "--config", cfg]) == 0
    write(str(base / "src" / "A" / "2.parquet"), rows(3, changed=1))
    state = TableState(str(base / "state"), "A")
    os.unlink(os.path.join(state.storage.describe("log"), f"{1:020d}.published.open_mirroring.json"))
    state.requests.save_reload(reload_wanted(None, "requested with diffcdc reload"))
    import diffcdc.spark.session

    monkeypatch.setattr(diffcdc.spark.session, "build_spark", lambda *a, **k: pytest.fail("Spark started"))
    capsys.readouterr()
    assert main(["plan", "--config", cfg]) == 0
    out = capsys.readouterr().out
    assert "last commit: version 1, snapshot 1.parquet" in out
    assert "unpublished: open_mirroring has not published version(s) 1 (superseded by the requested reload)" in out
    assert "reload requested" in out and "would process 1 snapshot(s), oldest first: 2.parquet" in out
    assert "B:\n  sinks: open_mirroring (open_mirroring)\n  last commit: none" in out
    assert "1 of 2 table(s) have work" in out
    assert main(["plan", "--config", cfg, "--json"]) == 0
    a, b = json.loads(capsys.readouterr().out)["tables"]
    assert a["snapshots"][0]["snapshot"] == "2.parquet" and a["unpublished"]["sinks"] == ["open_mirroring"]
    assert b["has_work"] is False and b["last_commit"] is None
    os.rename(base / "src" / "B", base / "src" / "gone")
    assert main(["plan", "--config", cfg]) == 2  # the code the run would fail with
    assert "refused: table B" in capsys.readouterr().out


# -- status -----------------------------------------------------------------------------------


def test_status_waiting_last_change_failures_and_sinks(spark, base, capsys):
    cfg = config_file(base, "A", "B")
    write(str(base / "src" / "A" / "1.parquet"), rows(4))
    os.makedirs(base / "src" / "B")
    assert main(["run", "--config", cfg]) == 0
    write(str(base / "src" / "A" / "2.parquet"), rows(4, changed=2))
    assert main(["run", "--config", cfg]) == 0
    assert main(["run", "--config", cfg]) == 0  # nothing to do: the last counts stay
    write(str(base / "src" / "A" / "3.parquet"), rows(4, changed=3))
    write(str(base / "src" / "A" / "4.parquet"), rows(4, changed=3))
    capsys.readouterr()
    assert main(["status", "--config", cfg, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    a, b = doc["tables"]
    assert a["waiting"] == ["3.parquet", "4.parquet"] and b["waiting"] == []
    assert a["last_run"]["outcome"] == "nothing to do"
    assert (a["last_change"]["last_snapshot"], a["last_change"]["updated"]) == ("2.parquet", 2)
    assert a["sinks"][0]["published"] is True
    assert b["version"] is None and b["configured"] is True
    assert main(["status", "--state", "state", "--table", "A", "--source", "src/A"]) == 0
    out = capsys.readouterr().out
    assert "A: waiting: 3.parquet, 4.parquet" in out and "open_mirroring:published" in out
    assert re.search(r"\+0 ~2 -0", out) and "nothing to do" in out
    # A failed run: its one-line reason; the last change stays.
    write(str(base / "src" / "A" / "3.parquet"), rows(4) + rows(1))  # duplicate key
    assert main(["run", "--config", cfg, "--only", "A"]) == 3
    capsys.readouterr()
    assert main(["status", "--config", cfg]) == 0
    out = capsys.readouterr().out
    assert re.search(r"A: last run failed \S+ \S+: table A, snapshot 3\.parquet: .*keys_unique", out)
    assert "B: no snapshot committed yet" in out
    assert "~2" in out


def test_status_from_an_empty_state_root_and_without_source(base, capsys):
    os.makedirs(base / "empty")
    assert main(["status", "--state", str(base / "empty")]) == 0
    assert "no tables in state root" in capsys.readouterr().out
    # a state root that is not there is a typo or the wrong folder, not an empty root
    assert main(["status", "--state", str(base / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"diffcdc: error: the state root {base / 'none'} does not exist — check "
                   "--state: give the state root the tables were run with (--state ROOT)")
    assert main(["status"]) == 2  # the default ./state, not there either
    assert "check the default state root ./state" in capsys.readouterr().err
    assert not (base / "none").exists() and not (base / "state").exists()
    assert main(["status", "--source", "src"]) == 2
    assert "--source needs --table" in capsys.readouterr().err


def test_a_refused_concurrent_first_run_leaves_the_other_runs_folder(base):
    from diffcdc.cli.settings import table_from_options
    from diffcdc.engine.run import run_table
    from diffcdc.errors import ConcurrentRunError

    write(str(base / "src" / "1.parquet"), rows(3))
    table = table_from_options(name="T", source=str(base / "src"), keys=["id"],
                               landing=str(base / "landing"))
    state = TableState(str(base / "state"), "T")
    with state.lock():  # another run's first load, still working
        marker = base / "state" / "T" / "versions" / "00000000000000000001-other"
        os.makedirs(marker)
        with pytest.raises(ConcurrentRunError):
            run_table(None, table, str(base / "state"))  # type: ignore[arg-type]
        assert marker.is_dir()
