"""Where a table's time goes (benchmarks.goals' breakdown): the run log's steps per table and
the event log's SQL executions split into planning, jobs and the rest, on hand-written logs."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.unit


def test_run_log_steps_are_per_table_when_tables_run_side_by_side(tmp_path):
    from benchmarks.processes import run_log_phases, run_log_steps

    log = tmp_path / "run.log"
    log.write_text("\n".join([
        "2026-11-27 12:00:00,000 INFO diffcdc-table_0 t000: 1 snapshot(s) waiting: s2",
        "2026-11-27 12:00:00,100 INFO diffcdc-table_1 t001: 1 snapshot(s) waiting: s2",
        "2026-11-27 12:00:00,200 INFO diffcdc-table_0 t000: s2: read",
        "2026-11-27 12:00:00,300 INFO diffcdc-table_1 t001: s2: read",
        "2026-11-27 12:00:00,700 INFO diffcdc-table_0 t000: s2: fingerprint and diff (version 2)",
        "2026-11-27 12:00:01,300 INFO diffcdc-table_1 t001: s2: fingerprint and diff (version 2)",
        "2026-11-27 12:00:02,700 INFO diffcdc-table_0 t000: s2: +1 ~2 -3 (9 rows, 1 file(s))",
        "2026-11-27 12:00:02,300 INFO diffcdc-table_1 t001: s2: +1 ~2 -3 (9 rows, 1 file(s))",
        "a line of something else",
    ]) + "\n")
    assert run_log_steps(str(log)) == {
        "t000": {"plan": 0.2, "read": 0.5, "fingerprint and diff": 2.0},
        "t001": {"plan": 0.2, "read": 1.0, "fingerprint and diff": 1.0},
    }
    assert run_log_phases(str(log)) == {"plan": 0.4, "read": 1.5, "fingerprint and diff": 3.0}
    assert run_log_steps(str(tmp_path / "missing.log")) == {}


def _events(tmp_path, events):
    log = tmp_path / "events" / "app" / "events_1"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    return str(tmp_path / "events")


def test_sql_executions_split_planning_jobs_and_commit_per_table(tmp_path):
    from benchmarks.goals import time_per_table, where_lines
    from benchmarks.sparkjobs import SqlExecution, sql_executions

    start = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart"
    end = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd"

    def job(job_id, execution, pool, at, tasks=1):
        return {"Event": "SparkListenerJobStart", "Job ID": job_id, "Submission Time": at,
                "Stage Infos": [{"Number of Tasks": tasks}],
                "Properties": {"spark.sql.execution.id": str(execution),
                               "spark.scheduler.pool": pool}}

    def done(job_id, at):
        return {"Event": "SparkListenerJobEnd", "Job ID": job_id, "Completion Time": at}

    events = _events(tmp_path, [
        {"Event": start, "executionId": 0, "time": 1000, "description": "parquet"},
        job(0, 0, "diffcdc-t000", 1200), done(0, 1500),
        {"Event": end, "executionId": 0, "time": 1550},
        {"Event": start, "executionId": 1, "time": 2000, "description": "parquet"},
        job(1, 1, "diffcdc-t000", 2100, tasks=2), done(1, 2200),
        job(2, 1, "diffcdc-t000", 2250, tasks=3), done(2, 2600),
        {"Event": end, "executionId": 1, "time": 2700},
        # a listing without a job, and a job outside any SQL execution: neither counts
        {"Event": start, "executionId": 2, "time": 3000, "description": "listing"},
        {"Event": end, "executionId": 2, "time": 3100},
        {"Event": "SparkListenerJobStart", "Job ID": 3, "Submission Time": 3200,
         "Stage Infos": [], "Properties": {}},
    ])
    got = sql_executions(events)
    assert got == [
        SqlExecution("diffcdc-t000", 1000, 0.55, 0.2, 0.3, 0.05, 1, 1, "parquet"),
        SqlExecution("diffcdc-t000", 2000, 0.7, 0.1, 0.5, 0.1, 2, 5, "parquet"),
    ]
    where = time_per_table({"t000": {"read": 0.25, "fingerprint and diff": 1.5}}, got)
    assert where["table_seconds_median"] == 1.75
    assert where["in_sql_seconds_median"] == 1.25
    assert where["outside_sql_seconds_median"] == 0.5
    assert [e["jobs"] for e in where["sql_executions_median"]] == [1, 2]
    (text,) = where_lines({"many": where})
    assert "#2 0.7 s (planning 0.1, 2 job(s) 0.5, after 0.1)" in text
    assert text.endswith("outside them 0.5 s")
