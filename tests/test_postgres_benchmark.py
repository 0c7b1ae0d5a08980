"""The PostgreSQL benchmark (benchmarks/postgres.py, issue 42 item 5) on tiny data, so it cannot
rot: both commands' measuring code against the test server, the pipeline's ``diffcdc run``
processes inline on the test session (their times mean nothing here)."""

from __future__ import annotations

import pytest

pytest.importorskip("deltalake")


@pytest.mark.integration
def test_postgres_benchmark_measures_copy_and_the_pipeline(spark, postgres, tmp_path,
                                                           monkeypatch):
    from benchmarks import postgres as bench
    from benchmarks.processes import Runner

    monkeypatch.setenv(bench.PASSWORD_ENV, postgres.password)
    copy = bench.measure_copy(spark, postgres, str(tmp_path / "data"), 3000, 7, [1000], 500)
    assert [copy["copy_into"][k]["rows"] for k in ("spark_tasks", "in_process")] == [3000, 3000]
    assert copy["crossover"]["1000"]["in_process"]["rows"] == 1000
    assert copy["encoding"]["rows_that_differ"] == 0
    assert copy["encoding"]["csv_text"]["rows"] == copy["encoding"]["binary_write_row"]["rows"] == 500
    pipeline = bench.measure_pipeline(Runner(inline=True), postgres, str(tmp_path / "data"),
                                      str(tmp_path / "work"), 3000, 7, 1, history=True)
    assert pipeline["all_match_truth"], pipeline
    assert pipeline["first_load"]["postgres_rows_per_s"] > 0
    assert pipeline["steady"]["postgres_vs_delta"] > 0
    assert isinstance(pipeline["goal"]["met"], bool)
    assert pipeline["history"]["steady_postgres_vs_delta"] > 0
