"""The benchmark suite's smoke tests: every script in benchmarks/ runs here on tiny data.

Not timing tests (times at 2,000 rows mean nothing): they keep the suite from rotting. Whole
``diffcdc run`` processes are run inline (``--inline``: the same commands in this process, on
the test session), so each test takes seconds.
"""

from __future__ import annotations

import importlib.util
import os

import pyarrow.parquet as pq
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("deltalake")

from benchmarks.generate import SCENARIOS, Rates, generate
from benchmarks.run import run_matrix

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
#: Every module of the suite; a new script must be added here (and get a smoke test below).
MODULES = ("avro_encode", "baselines", "chart", "diffcdc_runner", "floor", "generate", "goals",
           "jdbc", "measure", "postgres", "processes", "report", "run", "sinks", "sparkjobs",
           "state_growth", "text_encode", "verify")
#: Those that are commands: ``python -m benchmarks.<name> --help`` answers.
#: Commands that are also shared modules: the generator, the result files' table and chart.
SHARED_COMMANDS = {"chart", "generate", "report"}
COMMANDS = ("avro_encode", "chart", "floor", "generate", "goals", "jdbc", "postgres", "report",
            "run", "sinks", "state_growth", "text_encode")


def _rows(path: str) -> dict[int, tuple]:
    table = pq.read_table(path)
    cols = [table.column(n).to_pylist() for n in table.column_names]
    return {row[0]: row[1:] for row in zip(*cols)}


def test_every_module_of_the_suite_is_listed_and_every_command_answers_help(capsys):
    import importlib

    found = sorted(n[:-3] for n in os.listdir(BENCHMARKS) if n.endswith(".py") and n != "__init__.py")
    assert found == sorted(MODULES)
    for name in MODULES:
        module = importlib.import_module(f"benchmarks.{name}")
        assert (name in COMMANDS) == hasattr(module, "main"), name
        if name in COMMANDS:
            with pytest.raises(SystemExit) as done:
                module.main(["--help"])
            assert done.value.code == 0
            assert "usage:" in capsys.readouterr().out
    # a command imports only the suite's shared modules, never another command's internals
    import ast

    for name in MODULES:
        with open(os.path.join(BENCHMARKS, f"{name}.py"), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        imported = {node.module.rsplit(".", 1)[-1] for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module
                    and (node.level == 1 or node.module.startswith("benchmarks."))}
        assert not imported & (set(COMMANDS) - SHARED_COMMANDS), (name, imported)


def test_generator_truth_matches_a_brute_force_diff(tmp_path):
    def gen(folder: str) -> dict:
        return generate(
            str(tmp_path / folder),
            rows=3000,
            seed=7,
            snapshots=3,
            rates=Rates(updates=0.05, deletes=0.02, inserts=0.03, key_changes=0.01),
            chunk_rows=1000,
        )

    meta = gen("d")
    for index in (2, 3):
        old = _rows(str(tmp_path / "d" / f"snap-{index - 1:03d}"))
        new = _rows(str(tmp_path / "d" / f"snap-{index:03d}"))
        truth = pq.read_table(str(tmp_path / "d" / f"truth-{index:03d}.parquet")).to_pylist()
        got = {
            kind: {t["id"] for t in truth if t["kind"] == kind}
            for kind in ("insert", "update", "delete")
        }
        assert got["insert"] == new.keys() - old.keys()
        assert got["delete"] == old.keys() - new.keys()
        assert got["update"] == {k for k in old.keys() & new.keys() if old[k] != new[k]}
        expected = meta["snapshots"][index - 1]["expected"]
        assert expected == {kind: len(ids) for kind, ids in got.items()}
        assert all(expected.values())
    # same seed, same bytes
    again = gen("e")
    assert again["snapshots"] == meta["snapshots"]
    assert _rows(str(tmp_path / "e" / "snap-003")) == _rows(str(tmp_path / "d" / "snap-003"))


@pytest.mark.default_tier
def test_all_engines_agree_with_ground_truth(spark, tmp_path):
    engines = ["duckdb", "delta", "exceptall"]
    if importlib.util.find_spec("diffcdc.engine.run") is not None:
        engines.insert(0, "diffcdc")
    results = run_matrix(
        [2000],
        list(SCENARIOS),
        engines,
        data_root=str(tmp_path / "data"),
        work_root=str(tmp_path / "work"),
        isolate=False,
        spark=spark,
        out_path=str(tmp_path / "results.json"),
        log=lambda _: None,
    )
    assert os.path.exists(tmp_path / "results.json")
    for run in results["runs"]:
        where = f"{run['engine']} / {run['scenario']}"
        assert run["status"] == "ok", f"{where}: {run.get('error')}\n{run.get('traceback', '')}"
        assert run["matches_truth"], f"{where}: {run['mismatch']}"
        assert run["seconds"] > 0 and run["peak_rss_bytes"] > 0
    for entry in results["agreement"]:
        assert entry["engines_agree"] and entry["all_match_truth"], entry
    steady = next(a for a in results["agreement"] if a["scenario"] == "steady")
    assert all(steady["expected"].values())  # the smoke data really has every kind of change

    from benchmarks.chart import draw
    from benchmarks.report import markdown

    assert "| 2,000 | steady |" in markdown(results)
    assert os.path.getsize(draw(results, str(tmp_path / "chart.png"))) > 1000


@pytest.mark.default_tier
def test_floor_benchmark_runs_and_reads_an_event_log(spark, tmp_path):
    import json

    from benchmarks import floor, sparkjobs

    out = tmp_path / "floor.json"
    floor.main(["--rows", "2000", "--repeat", "1", "--data", str(tmp_path / "data"),
                "--out", str(out)])
    doc = json.loads(out.read_text())
    assert set(doc["seconds"]) == {"duckdb", "spark_scan_hash", "spark_scan_hash_shuffle",
                                   "spark_scan_rows", "diffcdc", "exceptall"}
    assert doc["exceptall_x_median"]["exceptall"] == 1.0
    assert all(v["min"] > 0 for v in doc["seconds"].values())

    # The profile parser on a hand-written event log: only the profiled group's jobs count.
    log = tmp_path / "events" / "app" / "events_1"
    log.parent.mkdir(parents=True)
    events = [
        {"Event": "SparkListenerJobStart", "Job ID": 1, "Submission Time": 1000,
         "Stage IDs": [4], "Properties": {"spark.jobGroup.id": sparkjobs.PROFILE_GROUP}},
        {"Event": "SparkListenerJobStart", "Job ID": 2, "Submission Time": 1000,
         "Stage IDs": [5], "Properties": {}},
        {"Event": "SparkListenerStageCompleted", "Stage Info": {
            "Stage ID": 4, "Number of Tasks": 3, "Accumulables": [
                {"Name": "internal.metrics.executorCpuTime", "Value": 2_500_000_000},
                {"Name": "internal.metrics.executorRunTime", "Value": 3000},
                {"Name": "internal.metrics.input.recordsRead", "Value": 42}]}},
        {"Event": "SparkListenerJobEnd", "Job ID": 1, "Completion Time": 2500},
        {"Event": "SparkListenerJobEnd", "Job ID": 2, "Completion Time": 9000},
    ]
    log.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    assert sparkjobs.jobs_per_pool(str(tmp_path / "events")) == {"(none)": 2}
    assert sparkjobs.profile_jobs(str(tmp_path / "events")) == [{
        "job": 1, "wall_s": 1.5, "tasks": 3, "task_run_s": 3.0, "task_cpu_s": 2.5,
        "gc_s": 0.0, "records_read": 42}]


@pytest.mark.default_tier
def test_sinks_benchmark_runs_every_variant(spark, tmp_path):
    from benchmarks import sinks

    generate(str(tmp_path / "d"), rows=2000, seed=3, rates=Rates(), chunk_rows=1000)
    result = sinks.measure(spark, str(tmp_path / "d"), str(tmp_path / "w"), repeat=1)
    assert set(result["median_seconds"]) == {"landing zone", "delta", "both", "history"}
    assert result["history_vs_delta"] > 0 and result["both_vs_two_separate_runs"] > 0
    changes = list(result["changes"].values())
    assert all(c == changes[0] for c in changes) and changes[0]["updated"] > 0


def test_text_benchmark_runs(tmp_path):
    import json

    from benchmarks import text_encode

    out = tmp_path / "text.json"
    text_encode.main(["--rows", "300", "--repeat", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["rows"] == 300 and set(result["results"]) == {"all columns", "integers and strings"}
    assert all(r["bytes"] > 300 * len(r["columns"]) for r in result["results"].values())


def test_encoder_benchmark_runs_and_both_sides_agree(tmp_path):
    import json

    from benchmarks import avro_encode

    out = tmp_path / "encode.json"
    avro_encode.main(["--rows", "500", "--repeat", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["avro"]["same_records"] and result["avro"]["rows"] > 0
    assert result["snappy"]["text_bytes"] > 500 and min(result["snappy"]["framed_bytes"].values()) > 0


@pytest.mark.integration
def test_jdbc_benchmark_loads_every_partition_count(spark, postgres, tmp_path):
    from benchmarks import jdbc

    jdbc.fill(postgres, 3000)
    result = jdbc.measure(spark, postgres.jdbc_url, postgres.user, postgres.password,
                          str(tmp_path / "w"), [1, 2])
    for kind in ("diffcdc", "plain"):
        assert [result[kind][n]["rows"] for n in ("1", "2")] == [3000, 3000]
        assert all(result[kind][n]["rows_per_s"] > 0 for n in ("1", "2"))


def _goals(tmp_path, *argv: str) -> dict:
    import json

    from benchmarks import goals

    out = tmp_path / "goals.json"
    assert goals.main([*argv, "--inline", "--data", str(tmp_path / "data"), "--work",
                       str(tmp_path / "work"), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["all_match_truth"] and doc["meta"]["git_commit"]
    if "goal" in doc:  # one bound and whether it was met
        assert len(doc["goal"]) == 2 and isinstance(doc["goal"]["met"], bool)
    return doc


@pytest.mark.default_tier
def test_goals_many_tables_and_per_table(spark, tmp_path):
    many = _goals(tmp_path / "many", "many", "--tables", "2", "--rows", "300", "--rounds", "1")
    assert many["many_x_one"] > 0 and many["spark_jobs"]["many"]["per_table_median"] > 0
    assert many["goal"]["many_x_one_at_most"] == 2.0
    per = _goals(tmp_path / "per", "per-table", "--tables", "2", "--rows", "300", "--rounds", "1")
    assert per["goal"]["extra_seconds_per_table_at_most"] == 0.15
    assert set(per["median_seconds"]) == {"many", "one"} and "extra_seconds_per_table" in per


@pytest.mark.default_tier
def test_goals_steady_against_the_floor(spark, tmp_path):
    doc = _goals(tmp_path, "floor", "--rows", "2000", "--rounds", "1")
    assert doc["steady_x_floor"] > 0 and doc["goal"]["steady_x_floor_at_most"] == 1.6
    assert doc["runs"]["floor"][0]["job_seconds"] > 0


@pytest.mark.default_tier
def test_goals_delta_check_on_a_table_of_many_files(spark, tmp_path):
    doc = _goals(tmp_path, "delta-check", "--rows", "2000", "--files", "12", "--rounds", "1")
    assert doc["data_files"]["many"] == 12 and doc["data_files"]["few"] < 12
    many = doc["per_variant"]["many"]
    assert many["verify_calls"] >= 1 and many["listings"] >= 1 and many["verify_seconds"] > 0


@pytest.mark.default_tier
def test_state_growth_bytes_and_others(spark, tmp_path):
    import json

    from benchmarks import state_growth

    common = ["--inline", "--data", str(tmp_path / "data"), "--work", str(tmp_path / "work")]
    out = tmp_path / "bytes.json"
    assert state_growth.main(["bytes", "--rows", "2000", "--versions", "2", "--keep-versions", "2",
                              "--out", str(out), *common]) == 0
    doc = json.loads(out.read_text())
    assert doc["all_match_truth"] and doc["state_bytes_per_row"] > 0
    out = tmp_path / "others.json"
    assert state_growth.main(["others", "--rows", "2000", "--out", str(out), *common]) == 0
    doc = json.loads(out.read_text())
    assert doc["all_match_truth"] and set(doc["median_seconds"]) == {
        "first_load", "half", "zero", "verify_state", "rollback"}
