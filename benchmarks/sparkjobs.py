"""Spark jobs shared by the suite: the floor job any Spark diff pays, and Spark's event log read.

* :func:`floor_probes`: Spark reading a snapshot and fingerprinting every row (``spark_scan_hash``),
  the same plus shuffling ``(key, fingerprint)`` by key (``spark_scan_hash_shuffle``, the floor
  a whole ``diffcdc run`` is compared with), reading the full rows (``spark_scan_rows``);
* :func:`cold_floor`: a fresh session plus one cold floor job, what ``python -m benchmarks.floor
  --cold SNAPSHOT`` runs in its own process;
* :func:`profile_jobs` and :func:`jobs_per_pool`: Spark jobs from an uncompressed event log
  (``spark.eventLog.enabled``, ``spark.eventLog.compress = false``);
* :func:`sql_executions`: each SQL execution (a write, a collect) of such a log, split into its
  planning (from its start to its first job), its jobs and what follows them.
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


def floor_probes(spark: Any, cur: str) -> dict[str, Callable[[], Any]]:
    from pyspark.sql import functions as F

    from diffcdc.core.fingerprint import FP, fingerprint_exprs

    def narrow() -> Any:
        df = spark.read.parquet(cur)
        return df.select("id", *fingerprint_exprs(df.schema, ["id"], [], 64))

    return {
        "spark_scan_hash": lambda: narrow().agg(F.max(FP)).collect(),
        "spark_scan_hash_shuffle": lambda: (
            narrow().repartition("id").write.format("noop").mode("overwrite").save()
        ),
        "spark_scan_rows": lambda: (
            spark.read.parquet(cur).write.format("noop").mode("overwrite").save()
        ),
    }


def cold_floor(snapshot: str) -> dict[str, float]:
    """In this (fresh) process: diffcdc's session start, then one cold floor job on ``snapshot``
    (read, fingerprint every row, shuffle ``(key, fingerprint)`` by key); seconds of each."""
    os.environ.setdefault("DIFFCDC_SPARK_LOG_LEVEL", "ERROR")
    from diffcdc.spark.session import build_spark

    started = time.perf_counter()
    spark = build_spark(app_name="diffcdc-floor")  # as `diffcdc run`: no extra settings
    session = time.perf_counter() - started
    job = floor_probes(spark, snapshot)["spark_scan_hash_shuffle"]
    started = time.perf_counter()
    job()
    done = time.perf_counter() - started
    started = time.perf_counter()
    spark.stop()
    return {"session_seconds": round(session, 3), "job_seconds": round(done, 3),
            "stop_seconds": round(time.perf_counter() - started, 3)}


PROFILE_GROUP = "diffcdc-profile"


def event_lines(event_dir: str) -> Iterator[str]:
    """Lines of every (uncompressed) event log under ``event_dir``, rolled files in order."""
    for path in sorted(glob.glob(os.path.join(event_dir, "**", "*"), recursive=True)):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                yield from fh


def profile_jobs(event_dir: str, group: str = PROFILE_GROUP) -> list[dict[str, Any]]:
    """The Spark jobs of one job group: wall time, tasks, task run, CPU and GC time."""
    stages: dict[int, dict[str, Any]] = {}
    jobs: dict[int, dict[str, Any]] = {}
    for line in event_lines(event_dir):
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            acc = {a["Name"].rsplit(".", 1)[-1]: a.get("Value") for a in info["Accumulables"]}
            stages[info["Stage ID"]] = {
                "tasks": info["Number of Tasks"],
                "cpu_s": int(acc.get("executorCpuTime", 0)) / 1e9,
                "run_s": int(acc.get("executorRunTime", 0)) / 1e3,
                "gc_s": int(acc.get("jvmGCTime", 0)) / 1e3,
                "records_read": int(acc.get("recordsRead", 0)),
            }
        elif kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            if props.get("spark.jobGroup.id") != group:
                continue
            jobs[event["Job ID"]] = {
                "start": event["Submission Time"],
                "stages": event["Stage IDs"],
                "what": props.get("spark.job.description") or props.get("callSite.short", ""),
            }
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]]["end"] = event["Completion Time"]
    out = []
    for job_id, job in sorted(jobs.items()):
        done = [stages[s] for s in job["stages"] if s in stages]
        out.append(
            {
                "job": job_id,
                "wall_s": round((job.get("end", job["start"]) - job["start"]) / 1e3, 3),
                "tasks": sum(s["tasks"] for s in done),
                "task_run_s": round(sum(s["run_s"] for s in done), 3),
                "task_cpu_s": round(sum(s["cpu_s"] for s in done), 3),
                "gc_s": round(sum(s["gc_s"] for s in done), 3),
                "records_read": sum(s["records_read"] for s in done),
            }
        )
    return out


def jobs_started(event_dir: str) -> list[dict[str, Any]]:
    """Every ``SparkListenerJobStart`` of the event logs under ``event_dir``: job id and the
    scheduler pool it ran in (diffcdc gives each table its own FAIR pool, ``diffcdc-<table>``)."""
    out = []
    for line in event_lines(event_dir):
        event = json.loads(line)
        if event["Event"] == "SparkListenerJobStart":
            pool = (event.get("Properties") or {}).get("spark.scheduler.pool") or "(none)"
            out.append({"job": event["Job ID"], "pool": pool})
    return out


def jobs_per_pool(event_dir: str) -> Counter[str]:
    """Spark jobs per scheduler pool in the event logs under ``event_dir``."""
    return Counter(job["pool"] for job in jobs_started(event_dir))


@dataclass(frozen=True)
class SqlExecution:
    """One SQL execution of an event log: its scheduler pool (diffcdc's table), its wall time
    split into planning (start to the first job: analysis, optimization, the file index, the
    write's set-up), its jobs (first job's start to the last one's end) and the rest (the
    write's commit); the number of jobs and tasks."""

    pool: str
    start_ms: int
    seconds: float
    planning_seconds: float
    jobs_seconds: float
    after_jobs_seconds: float
    jobs: int
    tasks: int
    what: str


def sql_executions(event_dir: str) -> list[SqlExecution]:
    """Every SQL execution of the event logs under ``event_dir`` that ran a Spark job, oldest
    first (executions without a job, e.g. a file listing, are left out)."""
    starts: dict[int, tuple[int, str]] = {}
    ends: dict[int, int] = {}
    jobs: dict[int, list[dict[str, Any]]] = {}
    by_job: dict[int, dict[str, Any]] = {}
    for line in event_lines(event_dir):
        event = json.loads(line)
        kind = event["Event"]
        if kind.endswith("SparkListenerSQLExecutionStart"):
            starts[event["executionId"]] = (event["time"], event.get("description", ""))
        elif kind.endswith("SparkListenerSQLExecutionEnd"):
            ends[event["executionId"]] = event["time"]
        elif kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            execution = props.get("spark.sql.execution.id")
            if execution is None:
                continue
            job = {"start": event["Submission Time"], "end": event["Submission Time"],
                   "pool": props.get("spark.scheduler.pool") or "(none)",
                   "tasks": sum(s["Number of Tasks"] for s in event["Stage Infos"])}
            jobs.setdefault(int(execution), []).append(job)
            by_job[event["Job ID"]] = job
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in by_job:
            by_job[event["Job ID"]]["end"] = event["Completion Time"]
    out = []
    for execution, (start, what) in sorted(starts.items(), key=lambda item: item[1][0]):
        ran = jobs.get(execution)
        if not ran or execution not in ends:
            continue
        first, last = min(j["start"] for j in ran), max(j["end"] for j in ran)
        out.append(SqlExecution(
            pool=ran[0]["pool"], start_ms=start, seconds=(ends[execution] - start) / 1e3,
            planning_seconds=(first - start) / 1e3, jobs_seconds=(last - first) / 1e3,
            after_jobs_seconds=(ends[execution] - last) / 1e3, jobs=len(ran),
            tasks=sum(j["tasks"] for j in ran), what=what))
    return out
