"""A nightly job's shape: many small tables in one run, against one table with the same rows.

Steady runs (the previous snapshot loaded untimed first) of ``--tables`` tables of ``--rows``
rows each through ``run_many`` with parallelism 1 and with the default (or ``--parallelism``),
beside one table of tables × rows rows, all in one warm JVM, interleaved.

    python -m benchmarks.many_tables --tables 60 --rows 20000 [--repeat 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from typing import Any

from .diffcdc_runner import _link_snapshot
from .generate import Rates, generate
from .report import print_and_save


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=60)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--parallelism", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from diffcdc.engine.run import table_parallelism
    from diffcdc.spark.session import build_spark

    here = os.path.dirname(os.path.abspath(__file__))
    small = os.path.join(here, "data", f"many-n{args.rows}")
    large = os.path.join(here, "data", f"many-n{args.rows * args.tables}")
    generate(small, args.rows, rates=Rates())
    generate(large, args.rows * args.tables, rates=Rates())
    spark = build_spark()
    parallel = table_parallelism(args.parallelism)
    work = os.path.join(here, "work", "many")
    variants = {
        f"{args.tables} tables, one at a time": (small, args.tables, 1),
        f"{args.tables} tables, {parallel} at a time": (small, args.tables, parallel),
        f"1 table of {args.rows * args.tables} rows": (large, 1, 1),
    }
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeat):
        for i, (name, (data, tables, parallelism)) in enumerate(variants.items()):
            seconds[name].append(steady(spark, data, os.path.join(work, str(i)), tables, parallelism))
    median = {name: sorted(v)[len(v) // 2] for name, v in seconds.items()}
    many_serial, many, one = (median[name] for name in variants)
    result: dict[str, Any] = {
        "tables": args.tables,
        "rows_per_table": args.rows,
        "parallelism": parallel,
        "cores": os.cpu_count(),
        "seconds": seconds,
        "median_seconds": median,
        "many_parallel_vs_one_table": round(many / one, 2),
        "many_serial_vs_one_table": round(many_serial / one, 2),
        "command": f"python -m benchmarks.many_tables --tables {args.tables} --rows {args.rows} "
        f"--repeat {args.repeat}",
    }
    print_and_save(result, args.out)


def steady(spark: Any, data: str, work: str, tables: int, parallelism: int) -> float:
    """Seconds of one steady ``run_many`` over ``tables`` copies of a generated table."""
    from diffcdc.config import RunConfig, TableConfig
    from diffcdc.core.quality_config import QualityConfig
    from diffcdc.engine.run import run_many

    shutil.rmtree(work, ignore_errors=True)
    configs = []
    for t in range(tables):
        source = os.path.join(work, "source", f"t{t:03d}")
        os.makedirs(source)
        configs.append(TableConfig(name=f"t{t:03d}", source=source, keys=["id"],
                                   landing=os.path.join(work, "landing")))
    quality = QualityConfig(min_row_ratio=None, max_row_ratio=None, max_delete_ratio=None)
    config = RunConfig(state=os.path.join(work, "state"), tables=configs, quality=quality,
                       parallelism=parallelism)
    for table in configs:
        _link_snapshot(os.path.join(data, "snap-001"), table.source)
    _check(run_many(spark, config))  # the first load, untimed
    for table in configs:
        _link_snapshot(os.path.join(data, "snap-002"), table.source)
    started = time.perf_counter()
    _check(run_many(spark, config))
    return round(time.perf_counter() - started, 3)


def _check(reports: list[Any]) -> None:
    failed = [r for r in reports if r.error is not None]
    if failed:
        raise SystemExit(f"benchmark run failed: {failed[0].error}")


if __name__ == "__main__":
    main()
