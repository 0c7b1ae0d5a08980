"""Where a steady diffcdc run spends its time, against what any Spark diff must spend.

Everything runs in one process with a warm JVM, each measurement repeated, so the ratios are
between figures taken on the same machine minutes apart:

* ``duckdb`` — the DuckDB baseline's whole steady diff (the issue's yardstick);
* ``spark_scan_hash`` — Spark reading the new snapshot and computing diffcdc's fingerprint for
  every row, reduced to one value: no shuffle, no write. Any Spark diff that compares rows
  pays at least this;
* ``spark_scan_hash_shuffle`` — the same plus shuffling ``(key, fingerprint)`` by key, which
  any Spark diff that matches keys across snapshots pays as well;
* ``spark_scan_rows`` — Spark reading the snapshot's full rows (what fetching the changed
  rows costs when they are spread over every row group);
* ``diffcdc`` — a complete steady run (``run_table``) on the same files;
* ``exceptall`` — the hand-written Spark ``exceptAll`` baseline on the same files (unless
  ``--no-exceptall``): warm, like everything here, so its ratio to the Spark floors above
  bounds how much faster than it any Spark diff can be;

and, with ``--profile``, the Spark jobs of one extra steady run with their wall time and task
CPU time from Spark's event log.

``--cold SNAPSHOT`` does something else: the floor of a *fresh* process, which is what a whole
``diffcdc run`` process is compared with (``benchmarks.state_growth steady``). This process
builds diffcdc's session (its default settings, as ``diffcdc run`` builds it) and runs the
``spark_scan_hash_shuffle`` job once, cold, on SNAPSHOT; it prints the seconds of each as JSON.

    python -m benchmarks.floor --rows 5000000 [--repeat 3] [--profile] [--no-exceptall] [--out FILE]
    python -m benchmarks.floor --cold benchmarks/data/n5000000-s42/steady/snap-002
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from .baselines import Case, run_duckdb, run_except_all
from .diffcdc_runner import steady_runs
from .generate import SCENARIOS, prepare
from .report import print_and_save
from .sparkjobs import PROFILE_GROUP, cold_floor, floor_probes, profile_jobs

HERE = os.path.dirname(os.path.abspath(__file__))


def _timed(fn: Callable[[], Any], repeat: int) -> dict[str, Any]:
    fn()  # warm-up: code generation and JIT of this query shape
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return {
        "min": round(min(times), 3),
        "median": round(statistics.median(times), 3),
        "all": [round(t, 3) for t in times],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--spark-driver-memory", default="2g")
    parser.add_argument("--profile", action="store_true", help="per-job profile of one more run")
    parser.add_argument("--no-exceptall", action="store_true", help="skip the exceptAll baseline")
    parser.add_argument("--data", default=os.path.join(HERE, "data"))
    parser.add_argument("--out", default=None)
    parser.add_argument("--cold", metavar="SNAPSHOT",
                        help="only: session start + one cold floor job on SNAPSHOT, as JSON")
    args = parser.parse_args(argv)
    if args.cold:
        print(json.dumps(cold_floor(args.cold)))
        return

    from diffcdc.spark.session import build_spark

    prev, cur, _ = prepare(args.data, args.rows, "steady", args.seed)
    assert prev is not None and SCENARIOS["steady"] is not None
    work = tempfile.mkdtemp(prefix="diffcdc-floor-")
    event_dir = os.path.join(work, "events")
    os.makedirs(event_dir)
    conf = {"spark.driver.memory": args.spark_driver_memory}
    if args.profile:
        conf.update(
            {
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": event_dir,
                "spark.eventLog.compress": "false",
            }
        )
    spark = build_spark(master="local[*]", conf=conf, app_name="diffcdc-floor")
    try:
        case = Case(prev=prev, cur=cur, work=os.path.join(work, "duckdb"))
        results = {"duckdb": _timed(lambda: run_duckdb(case), args.repeat)}
        for name, fn in floor_probes(spark, cur).items():
            results[name] = _timed(fn, args.repeat)
        steady = steady_runs(spark, prev, cur, os.path.join(work, "diffcdc"))
        results["diffcdc"] = _timed(steady, args.repeat)
        if not args.no_exceptall:
            baseline = Case(prev=prev, cur=cur, work=os.path.join(work, "exceptall"))
            results["exceptall"] = _timed(lambda: run_except_all(baseline, spark), args.repeat)
        jobs = None
        if args.profile:
            spark.sparkContext.setJobGroup(PROFILE_GROUP, "one profiled steady run")
            steady()
            spark.sparkContext.stop()  # flushes the event log
            jobs = profile_jobs(event_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    duck = results["duckdb"]["median"]
    document = {
        "command": "python -m benchmarks.floor "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "rows": args.rows,
        "cpus": os.cpu_count(),
        "seconds": results,
        "x_duckdb_median": {k: round(v["median"] / duck, 2) for k, v in results.items()},
        "exceptall_x_median": (
            {k: round(results["exceptall"]["median"] / v["median"], 2) for k, v in results.items()}
            if "exceptall" in results else None
        ),
        "diffcdc_jobs": jobs,
    }
    print_and_save(document, args.out)


if __name__ == "__main__":
    main()
