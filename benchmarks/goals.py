"""The project's goals for a nightly job over many tables, each measured with whole ``diffcdc
run`` processes, the two sides of every ratio side by side in one run (alternating rounds).

``many``: 60 tables of 20k rows in one ``diffcdc run --config`` against one table of the same
1.2M rows (goal: at most 2.0x); steady snapshots (1% updates, 0.5% deletes, 0.5% inserts, the
landing sink only), every round from the same state; then one more untimed run of each with
Spark's event log, which gives the Spark jobs per table (told apart by the table's FAIR pool)::

    python -m benchmarks.goals many [--tables 60] [--rows 20000] [--rounds 3]

``per-table``: the same with 500 tables of 2k rows against one table of 1M rows: the extra wall
time per table, (many - one) / tables (goal: at most 0.15 s), and the Spark jobs per table::

    python -m benchmarks.goals per-table [--tables 500] [--rows 2000] [--rounds 1]

``floor``: a steady run of 5M rows, whole process, against a fresh Spark process that only
reads the same snapshot, fingerprints every row and shuffles ``(key, fingerprint)`` by key
(``python -m benchmarks.floor --cold``; goal: at most 1.6x)::

    python -m benchmarks.goals floor [--rows 5000000] [--rounds 3]

``delta-check``: a steady run publishing to a Delta sink whose table holds 2,000 data files
(the first load's files split by a compaction-shaped commit, ``dataChange = false``, which the
sink accepts as harmless) beside the same table in the first load's few files; each run under
cProfile, which gives the time and calls of the sink's target check (``check`` / ``verify``)
and of delta-rs's file listing (``DeltaTable.repair``) and history reads per version::

    python -m benchmarks.goals delta-check [--rows 1000000] [--files 2000] [--rounds 1]

Each writes ``benchmarks/results/goals-<name>-<sizes>-<commit>.json`` (``--out`` to change):
the commit measured, the command, every process's figures, the medians, the ratio and whether
the goal is met; compare two commits' files side by side. The machine's load average is kept
beside every process: on a shared machine, read ratios, not seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from .generate import Rates, generate, prepare
from .processes import (
    Runner,
    check,
    diffcdc_run,
    expected_counts,
    fresh,
    line,
    link,
    median,
    profiled_seconds,
    run_log_steps,
)
from .report import HERE, finish, machine_info, save
from .sparkjobs import SqlExecution, jobs_per_pool, sql_executions

GOAL_MANY_X_ONE = 2.0
GOAL_EXTRA_SECONDS_PER_TABLE = 0.15
GOAL_STEADY_X_FLOOR = 1.6


# --- many small tables against one large one ---------------------------------------------------


def _config(folder: str, tables: int, event_dir: str | None,
            sink: Callable[[int], str] | None = None) -> str:
    """A config of ``tables`` tables ``t000``... with sources under ``folder/source``; with
    ``event_dir``, Spark's event log written there; ``sink(t)`` a table's sinks (TOML)."""
    lines = ["[diffcdc]", 'state = "state"', 'landing = "landing"', ""]
    if event_dir:
        lines += ["[spark]", 'conf = { "spark.eventLog.enabled" = "true", '
                  f'"spark.eventLog.dir" = "{event_dir}", "spark.eventLog.compress" = "false" }}',
                  ""]
    for t in range(tables):
        lines += [f"[tables.t{t:03d}]", f'source = "source/t{t:03d}"', 'keys = ["id"]']
        lines += [sink(t)] if sink else []
        lines.append("")
    path = os.path.join(folder, "diffcdc.toml")
    with open(path, "w") as handle:
        handle.write("\n".join(lines))
    return path


def _jobs_started() -> int:
    """Spark jobs started so far by this process's session (inline runs: no event log)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None), default=-1) + 1


def many_vs_one(args: argparse.Namespace, runner: Runner) -> dict[str, Any]:
    """Steady runs of ``--tables`` tables of ``--rows`` rows in one process against one table
    of all their rows in another; medians, their ratio, the Spark jobs per table."""
    total = args.rows * args.tables
    small = os.path.join(args.data, f"many-n{args.rows}-s{args.seed}")
    large = os.path.join(args.data, f"many-n{total}-s{args.seed}")
    generate(small, args.rows, args.seed, rates=Rates())
    generate(large, total, args.seed, rates=Rates())
    work = fresh(os.path.join(args.work, f"{args.command}-{args.tables}x{args.rows}"))
    variants = {"many": (small, args.tables), "one": (large, 1)}
    doc: dict[str, Any] = {"meta": machine_info(), "goal_name": args.command,
                           "tables": args.tables, "rows_per_table": args.rows,
                           "rounds": args.rounds, "setup": {},
                           "seconds": {k: [] for k in variants}, "runs": {k: [] for k in variants}}
    # A state records the landing root it published to: every round runs in the folder of
    # the first load, put back from its copy.
    folder = os.path.join(work, "round")

    def prepared(variant: str, event_dir: str | None = None) -> str:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(os.path.join(work, variant), folder, symlinks=True)
        data, tables = variants[variant]
        for t in range(tables):
            link(os.path.join(data, "snap-002"), os.path.join(folder, "source", f"t{t:03d}"),
                 "snap-002")
        return _config(folder, tables, event_dir)

    for variant, (data, tables) in variants.items():  # first loads, untimed: the base copies
        for t in range(tables):
            link(os.path.join(data, "snap-001"), os.path.join(folder, "source", f"t{t:03d}"),
                 "snap-001")
        record = diffcdc_run(runner, ["--config", _config(folder, tables, None)],
                             os.path.join(work, "logs", f"{variant}-first-load"))
        os.rename(folder, os.path.join(work, variant))
        doc["setup"][variant] = record
        line(f"{variant}: first load (setup)", record)
    for n in range(args.rounds):
        for variant in (["many", "one"] if n % 2 == 0 else ["one", "many"]):
            data, tables = variants[variant]
            record = diffcdc_run(runner, ["--config", prepared(variant)],
                                 os.path.join(work, "logs", f"round{n}-{variant}"))
            check(record, {k: v * tables for k, v in expected_counts(data, 2).items()})
            record["round"] = n
            doc["runs"][variant].append(record)
            doc["seconds"][variant].append(record["seconds"])
            line(f"round {n + 1}: {variant}", record)
        save(doc, args.out)
    jobs: dict[str, Any] = {}
    where: dict[str, Any] = {}
    for variant, (_, tables) in variants.items():  # one more, untimed, counting Spark jobs
        events = fresh(os.path.join(work, "events", variant))
        before = _jobs_started() if runner.inline else 0
        record = diffcdc_run(runner, ["--config", prepared(variant, None if runner.inline
                                                            else events)],
                             os.path.join(work, "logs", f"jobs-{variant}"))
        if runner.inline:  # one session, no event log: the jobs it started, spread evenly
            total_jobs = _jobs_started() - before
            per_table = [total_jobs / tables] * tables
            by_pool: dict[str, int] = {}
        else:
            per_pool = jobs_per_pool(events)
            per_table = [per_pool.get(f"diffcdc-t{t:03d}", 0) for t in range(tables)]
            total_jobs, by_pool = sum(per_pool.values()), dict(per_pool)
            where[variant] = time_per_table(run_log_steps(record.get("log", "")),
                                            sql_executions(events))
        jobs[variant] = {"per_table_median": median(per_table), "per_table_min": min(per_table),
                         "per_table_max": max(per_table), "total": total_jobs,
                         "outside_tables": total_jobs - sum(per_table), "by_pool": by_pool}
    shutil.rmtree(folder, ignore_errors=True)
    many, one = median(doc["seconds"]["many"]), median(doc["seconds"]["one"])
    doc.update(median_seconds={"many": many, "one": one}, many_x_one=round(many / one, 2),
               extra_seconds_per_table=round((many - one) / args.tables, 3), spark_jobs=jobs,
               where_the_time_goes=where,
               all_match_truth=all(r["matches_truth"] for v in doc["runs"].values() for r in v))
    jobs_text = (f"Spark jobs per small table {jobs['many']['per_table_median']:g} (min "
                 f"{jobs['many']['per_table_min']:g}, max {jobs['many']['per_table_max']:g}), "
                 f"the one table {jobs['one']['total']}")
    head = (f"{args.tables} x {args.rows:,} rows: {many} s, one table of {total:,} rows: {one} s "
            f"(whole processes, median of {args.rounds})")
    if args.command == "many":
        doc["goal"] = {"many_x_one_at_most": GOAL_MANY_X_ONE,
                       "met": doc["many_x_one"] <= GOAL_MANY_X_ONE}
        doc["summary"] = [f"{head}: {doc['many_x_one']}x (goal <= {GOAL_MANY_X_ONE:g}); {jobs_text}"]
        doc["summary"] += where_lines(where)
    else:
        extra = doc["extra_seconds_per_table"]
        doc["goal"] = {"extra_seconds_per_table_at_most": GOAL_EXTRA_SECONDS_PER_TABLE,
                       "met": extra <= GOAL_EXTRA_SECONDS_PER_TABLE}
        doc["summary"] = [f"{head}: {extra} s extra per table (goal <= "
                          f"{GOAL_EXTRA_SECONDS_PER_TABLE:g}); {jobs_text}"]
        doc["summary"] += where_lines(where)
    return doc


def time_per_table(steps: dict[str, dict[str, float]],
                   executions: list[SqlExecution]) -> dict[str, Any]:
    """Where a table's time goes, from the run log's steps of each table and the event log's
    SQL executions (each table runs in its own pool, ``diffcdc-<table>``): per step, and per
    SQL execution in the order a table runs them (its planning, its jobs, its commit), the
    median over the tables; the table's time outside any SQL execution (the driver's own
    work: Python, Py4J calls, file listings, the state's and landing zone's small files)."""
    by_table: dict[str, list[SqlExecution]] = {}
    for execution in executions:
        by_table.setdefault(execution.pool.removeprefix("diffcdc-"), []).append(execution)
    names = sorted({step for table in steps.values() for step in table})
    per_step = {name: median([table.get(name, 0.0) for table in steps.values()])
                for name in names}
    totals = [sum(table.values()) for table in steps.values()]
    in_sql = [sum(e.seconds for e in by_table.get(table, [])) for table in steps]
    sql: list[dict[str, Any]] = []
    for index in range(max((len(v) for v in by_table.values()), default=0)):
        nth = [runs[index] for runs in by_table.values() if len(runs) > index]
        sql.append({
            "tables": len(nth),
            "seconds": median([e.seconds for e in nth]),
            "planning_seconds": median([e.planning_seconds for e in nth]),
            "jobs_seconds": median([e.jobs_seconds for e in nth]),
            "after_jobs_seconds": median([e.after_jobs_seconds for e in nth]),
            "jobs": median([e.jobs for e in nth]),
            "tasks": median([e.tasks for e in nth]),
        })
    return {
        "tables": len(steps),
        "table_seconds_median": median(totals) if totals else 0.0,
        "steps_median_seconds": per_step,
        "sql_executions_median": sql,
        "in_sql_seconds_median": median(in_sql) if in_sql else 0.0,
        "outside_sql_seconds_median": median([t - s for t, s in zip(totals, in_sql)])
        if totals else 0.0,
    }


def where_lines(where: dict[str, Any]) -> list[str]:
    """The breakdown of :func:`time_per_table` as summary lines, one per variant."""
    out = []
    for variant, got in where.items():
        steps = ", ".join(f"{k} {v:g}" for k, v in got["steps_median_seconds"].items())
        sqls = "; ".join(
            f"#{n + 1} {e['seconds']:g} s (planning {e['planning_seconds']:g}, "
            f"{e['jobs']:g} job(s) {e['jobs_seconds']:g}, after {e['after_jobs_seconds']:g})"
            for n, e in enumerate(got["sql_executions_median"]))
        out.append(f"{variant}: a table {got['table_seconds_median']:g} s (median of "
                   f"{got['tables']}): steps {steps}; SQL executions {sqls}; outside them "
                   f"{got['outside_sql_seconds_median']:g} s")
    return out


# --- steady against the floor ------------------------------------------------------------------


def table_args(folder: str) -> list[str]:
    """``diffcdc run`` options of one table ``bench`` whose folders are under ``folder``."""
    return ["--source", os.path.join(folder, "source"), "--keys", "id", "--table", "bench",
            "--landing", os.path.join(folder, "landing"), "--state", os.path.join(folder, "state")]


def steady_vs_floor(args: argparse.Namespace, runner: Runner) -> dict[str, Any]:
    prev, cur, _ = prepare(args.data, args.rows, "steady", args.seed)
    assert prev is not None
    truth = os.path.dirname(cur)
    work = fresh(os.path.join(args.work, f"floor-{args.rows}"))
    doc: dict[str, Any] = {"meta": machine_info(), "goal_name": "floor", "rows": args.rows,
                           "rounds": args.rounds, "snapshot": cur}
    folder, base = os.path.join(work, "round"), os.path.join(work, "base")
    link(prev, os.path.join(folder, "source"), "snap-001")
    first = diffcdc_run(runner, table_args(folder), os.path.join(work, "logs", "first-load"),
                        "the first load")
    os.rename(folder, base)
    doc["first_load"] = check(first, expected_counts(truth, 1))
    line("first load (untimed setup)", first)
    runs: dict[str, list[dict[str, Any]]] = {"steady": [], "floor": []}
    doc["runs"] = runs
    for n in range(args.rounds):
        for what in (["steady", "floor"] if n % 2 == 0 else ["floor", "steady"]):
            log = os.path.join(work, "logs", f"round{n}-{what}")
            if what == "steady":
                shutil.copytree(base, folder, symlinks=True)  # the same state every round
                link(cur, os.path.join(folder, "source"), "snap-002")
                record = check(diffcdc_run(runner, table_args(folder), log),
                               expected_counts(truth, 2))
                shutil.rmtree(folder)
            else:
                record = runner.python(["-m", "benchmarks.floor", "--cold", cur], log,
                                       "the floor")
                record.update(record.pop("output"))
            record["round"] = n
            runs[what].append(record)
            line(f"round {n + 1}: {what}", record)
        save(doc, args.out)
    steady = median([r["seconds"] for r in runs["steady"]])
    floor = median([r["seconds"] for r in runs["floor"]])
    doc.update(
        median_seconds={"steady": steady, "floor": floor},
        steady_x_floor=round(steady / floor, 2),
        floor_session_median_seconds=median([r["session_seconds"] for r in runs["floor"]]),
        floor_job_median_seconds=median([r["job_seconds"] for r in runs["floor"]]),
        steady_table_median_seconds=median([r["table_seconds"] for r in runs["steady"]]),
        steady_phases=runs["steady"][-1].get("phases"),
        all_match_truth=all(r["matches_truth"] for r in runs["steady"]),
        goal={"steady_x_floor_at_most": GOAL_STEADY_X_FLOOR,
              "met": steady / floor <= GOAL_STEADY_X_FLOOR},
        summary=[f"steady {args.rows:,} rows, whole process: {steady} s; fresh session + cold "
                 f"floor job: {floor} s (median of {args.rounds}): {round(steady / floor, 2)}x "
                 f"(goal <= {GOAL_STEADY_X_FLOOR:g})"],
    )
    return doc


# --- a Delta sink on a table of many files -----------------------------------------------------

#: What the profile of a run reports: the Delta sink's target check and delta-rs's table reads.
CHECK_MODULES = ("diffcdc/sinks/delta/",)
CHECK_NAMES = ("check", "verify", "stage", "publish")
DELTA_MODULES = ("deltalake/table.py",)
DELTA_NAMES = ("repair", "history", "__init__", "get_add_actions", "files", "file_uris")


def split_delta_files(path: str, files: int) -> int:
    """Rewrite the Delta table at ``path`` into ``files`` data files with one commit shaped as
    a compaction (every ``remove`` and ``add`` with ``dataChange = false``: no row changes,
    which diffcdc's Delta sink accepts from another writer); returns the data files it holds."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    table = DeltaTable(path)
    data = table.to_pyarrow_table()
    old = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = [{"commitInfo": {
        "timestamp": now, "operation": "OPTIMIZE", "operationParameters": {},
        "isBlindAppend": False, "engineInfo": "benchmarks.goals"}}]
    actions += [{"remove": {"path": p, "deletionTimestamp": now, "dataChange": False,
                            "extendedFileMetadata": True, "partitionValues": {}, "size": s}}
                for p, s in zip(old["path"], old["size_bytes"])]
    per = max(1, math.ceil(data.num_rows / files))
    written = 0
    for start in range(0, data.num_rows, per):
        name = f"part-{written:05d}-{uuid.uuid4()}.zstd.parquet"
        pq.write_table(data.slice(start, per), os.path.join(path, name), compression="zstd")
        actions.append({"add": {"path": name, "partitionValues": {}, "dataChange": False,
                                "size": os.path.getsize(os.path.join(path, name)),
                                "modificationTime": now}})
        written += 1
    commit = os.path.join(path, "_delta_log", f"{table.version() + 1:020d}.json")
    with open(commit, "x", encoding="utf-8") as handle:  # put-if-absent, as Delta commits
        handle.write("".join(json.dumps(a) + "\n" for a in actions))
    return written


def delta_check(args: argparse.Namespace, runner: Runner) -> dict[str, Any]:
    prev, cur, _ = prepare(args.data, args.rows, "steady", args.seed)
    assert prev is not None
    truth = os.path.dirname(cur)
    work = fresh(os.path.join(args.work, f"delta-check-{args.rows}"))
    doc: dict[str, Any] = {"meta": machine_info(), "goal_name": "delta-check", "rows": args.rows,
                           "files": args.files, "rounds": args.rounds, "setup": {}, "runs": {}}
    folder = os.path.join(work, "round")
    lake = os.path.join(folder, "lake")

    def config(folder: str) -> str:
        return _config(folder, 1, None, lambda _: f'sinks = [{{ type = "delta", path = "{lake}" }}]')

    link(prev, os.path.join(folder, "source", "t000"), "snap-001")
    first = diffcdc_run(runner, ["--config", config(folder)],
                        os.path.join(work, "logs", "first-load"), "the first load")
    doc["setup"]["first_load"] = check(first, expected_counts(truth, 1))
    line("first load (untimed setup)", first)
    from deltalake import DeltaTable

    few = len(DeltaTable(lake).file_uris())
    os.rename(folder, os.path.join(work, "few"))
    shutil.copytree(os.path.join(work, "few"), folder, symlinks=True)
    many = split_delta_files(lake, args.files)
    os.rename(folder, os.path.join(work, "many"))
    doc["data_files"] = {"few": few, "many": many}
    for variant in ("few", "many"):
        doc["runs"][variant] = []
    for n in range(args.rounds):
        for variant in (["many", "few"] if n % 2 == 0 else ["few", "many"]):
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(os.path.join(work, variant), folder, symlinks=True)
            link(cur, os.path.join(folder, "source", "t000"), "snap-002")
            log = os.path.join(work, "logs", f"round{n}-{variant}")
            record = check(diffcdc_run(runner, ["--config", config(folder)], log,
                                       profile=log + ".prof"), expected_counts(truth, 2))
            record["profile"] = {
                "sink": profiled_seconds(log + ".prof", CHECK_MODULES, CHECK_NAMES),
                "deltalake": profiled_seconds(log + ".prof", DELTA_MODULES, DELTA_NAMES)}
            record["round"] = n
            doc["runs"][variant].append(record)
            line(f"round {n + 1}: {variant} ({doc['data_files'][variant]} files)", record)
        save(doc, args.out)
    shutil.rmtree(folder, ignore_errors=True)

    def summary(variant: str) -> dict[str, Any]:
        runs = doc["runs"][variant]
        def total(kind: str, key: str, field: str) -> float:
            return median([r["profile"][kind].get(key, {}).get(field, 0) for r in runs])
        return {"data_files": doc["data_files"][variant],
                "seconds": median([r["seconds"] for r in runs]),
                "check_seconds": total("sink", "sink.py:check", "seconds"),
                "check_calls": total("sink", "sink.py:check", "calls"),
                "verify_seconds": total("sink", "target_check.py:verify", "seconds"),
                "verify_calls": total("sink", "target_check.py:verify", "calls"),
                "listing_seconds": total("deltalake", "table.py:repair", "seconds"),
                "listings": total("deltalake", "table.py:repair", "calls"),
                "history_reads": total("deltalake", "table.py:history", "calls")}
    doc["per_variant"] = {v: summary(v) for v in ("few", "many")}
    doc["all_match_truth"] = all(r["matches_truth"] for v in doc["runs"].values() for r in v)
    doc["summary"] = [
        f"Delta sink, steady {args.rows:,} rows, table of {s['data_files']} data files: run "
        f"{s['seconds']} s; target checks (verify) {s['verify_calls']:g} call(s), "
        f"{s['verify_seconds']} s; file listings (repair) {s['listings']:g}, "
        f"{s['listing_seconds']} s; history reads {s['history_reads']:g}"
        for s in doc["per_variant"].values()]
    return doc


# --- command line ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="The project's goals for a nightly job over many tables, as whole diffcdc runs.")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--seed", type=int, default=42)
    common.add_argument("--timeout", type=float, default=7200, help="seconds per process")
    common.add_argument("--data", default=os.path.join(HERE, "data"),
                        help="generated snapshots (kept and reused)")
    common.add_argument("--work", default=os.path.join(HERE, "work", "goals"),
                        help="scratch folders of the runs")
    common.add_argument("--out", default=None, help="result JSON (default benchmarks/results/...)")
    common.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)  # smoke tests
    p = sub.add_parser("many", parents=[common], help="60 x 20k tables against one of 1.2M rows")
    p.add_argument("--tables", type=int, default=60)
    p.add_argument("--rows", type=int, default=20_000, help="rows per small table")
    p.add_argument("--rounds", type=int, default=3)
    p = sub.add_parser("per-table", parents=[common],
                       help="500 x 2k tables against one of 1M rows: extra seconds per table")
    p.add_argument("--tables", type=int, default=500)
    p.add_argument("--rows", type=int, default=2_000, help="rows per small table")
    p.add_argument("--rounds", type=int, default=1)
    p = sub.add_parser("floor", parents=[common], help="steady 5M against a fresh floor job")
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p = sub.add_parser("delta-check", parents=[common],
                       help="a Delta sink on a table of 2,000 data files: the target check")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=2_000, help="data files of the Delta table")
    p.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    sizes = {"many": lambda: f"{args.tables}x{args.rows}",
             "per-table": lambda: f"{args.tables}x{args.rows}",
             "floor": lambda: f"{args.rows}",
             "delta-check": lambda: f"{args.rows}-{args.files}files"}[args.command]()
    commit = machine_info()["git_commit"]
    args.out = args.out or os.path.join(HERE, "results", f"goals-{args.command}-{sizes}-{commit}.json")
    runner = Runner(args.timeout, inline=args.inline)
    run = {"many": many_vs_one, "per-table": many_vs_one, "floor": steady_vs_floor,
           "delta-check": delta_check}[args.command]
    return finish(run(args, runner), args.out)


if __name__ == "__main__":
    sys.exit(main())
