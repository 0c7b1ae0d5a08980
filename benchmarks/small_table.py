"""A small table's fixed cost: one table of ``--rows`` rows, run steady again and again.

Each run gets a new snapshot (the generator's two snapshots in turn, under ever larger names)
and is timed with the CPU it cost the driver's JVM and this Python process, and the Spark jobs
it ran. The first runs pay for the JIT warming up; the median is over the last half.

    python -m benchmarks.small_table --rows 20000 --runs 30 [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from typing import Any

from .diffcdc_runner import _link_snapshot
from .generate import Rates, generate
from .report import print_and_save


def _jobs_started(tracker: Any) -> int:
    """The newest job id + 1: Spark retains only the newest 1000 jobs' ids, so their count stalls."""
    return max(tracker.getJobIdsForGroup(None), default=-1) + 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from diffcdc.config import RunConfig, TableConfig
    from diffcdc.core.quality_config import QualityConfig
    from diffcdc.engine.run import run_many
    from diffcdc.spark.session import build_spark

    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.join(here, "data", f"many-n{args.rows}")
    generate(data, args.rows, rates=Rates())
    spark = build_spark()
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
    work = os.path.join(here, "work", "small-table")
    shutil.rmtree(work, ignore_errors=True)
    source = os.path.join(work, "source")
    os.makedirs(source)
    table = TableConfig(name="t", source=source, keys=["id"], landing=os.path.join(work, "landing"))
    quality = QualityConfig(min_row_ratio=None, max_row_ratio=None, max_delete_ratio=None)
    config = RunConfig(state=os.path.join(work, "state"), tables=[table], quality=quality,
                       parallelism=1)
    tracker = spark.sparkContext.statusTracker()
    runs: list[dict[str, float]] = []
    for n in range(args.runs + 1):  # run 0 is the first load, untimed
        _link_snapshot(os.path.join(data, f"snap-00{1 + n % 2}"), source, f"snap-{n:05d}")
        jobs, jvm, py = _jobs_started(tracker), _cpu(jvm_pid), _own_cpu()
        started = time.perf_counter()
        (report,) = run_many(spark, config)
        wall = time.perf_counter() - started
        if report.error is not None:
            raise SystemExit(f"benchmark run failed: {report.error}")
        if n:
            runs.append({
                "seconds": round(wall, 3),
                "jvm_cpu_seconds": round(_cpu(jvm_pid) - jvm, 2),
                "python_cpu_seconds": round(_own_cpu() - py, 2),
                "spark_jobs": _jobs_started(tracker) - jobs,
            })
    settled = runs[len(runs) // 2:]
    result: dict[str, Any] = {
        "rows": args.rows,
        "runs": runs,
        "median_of_last_half": {k: round(statistics.median(r[k] for r in settled), 3) for k in runs[0]},
        "command": f"python -m benchmarks.small_table --rows {args.rows} --runs {args.runs}",
    }
    print_and_save(result, args.out)


def _cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


if __name__ == "__main__":
    main()
