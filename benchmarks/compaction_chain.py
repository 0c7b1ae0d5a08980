"""Experiment: how a steady run's classify step grows with the length of the state's chain.

A version's state is a base plus the deltas on top of it (:mod:`diffcdc.state.chain`); the
next run reads every link and resolves the chain in its one aggregate (``max_by`` the link's
position). Compaction (``compaction_due``: default ``max_deltas`` 30, ``max_delta_ratio`` 0.5)
bounds the chain. This measures what a longer chain costs, in one warm session built by
:func:`diffcdc.spark.session.build_spark` (``local[2]``):

* base: the state of the steady scenario's ``snap-001`` (``classify`` with no previous state);
* deltas: synthesized, each ~``--change`` of the base's keys (default 2%): 8 in 9 of them updated
  (a new fingerprint, ``__diffcdc_change`` 2), 1 in 9 deleted (tombstones, change 3, n 0), and
  1/9 of ``--change`` × rows new keys inserted (change 1); each delta written as zstd Parquet in
  as many files as a real steady delta of ``snap-002`` has (one is written first to count them);
* timed, alternating, after one warm-up each: ``classify`` of ``snap-002`` against the base +
  0, 1, 10, 30 deltas (``--chains``), the whole classified state written as zstd Parquet (a
  constant output, so that only the input side grows; a delta's size would depend on the
  synthetic deltas).

    python -m benchmarks.compaction_chain --rows 5000000 --repeat 3 \
        --out benchmarks/results/compaction-chain-5m.json
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import time

from .bucketed_state import KEY, snapshot_fingerprints, steady_pair, write_first_state
from .measure import cpu_seconds
from .report import print_and_save

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--change", type=float, default=0.02)
    parser.add_argument("--chains", default="0,1,10,30")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--data", default=os.path.join(HERE, "data"))
    parser.add_argument("--work", default=os.path.join(HERE, "work", "compaction-chain"))
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    os.environ.setdefault("DIFFCDC_SPARK_LOG_LEVEL", "ERROR")
    from diffcdc.core.classify import CHANGE, DELETE, DUP, INSERT, UPDATE, classify, delta_rows
    from diffcdc.core.fingerprint import FP, fingerprint_columns
    from diffcdc.spark.paths import read_written
    from diffcdc.spark.session import build_spark

    prev, cur = steady_pair(args)
    spark = build_spark(master=args.master, app_name="diffcdc-compaction-chain")
    fp_cols = fingerprint_columns(64)
    chains = [int(c) for c in args.chains.split(",")]

    narrow = functools.partial(snapshot_fingerprints, spark)

    # --- untimed: base, one real delta (for its file count), synthetic deltas ---------------
    base = os.path.join(args.work, "base")
    schema = write_first_state(spark, prev, base)
    real = os.path.join(args.work, "real-delta")
    delta_rows(classify(narrow(cur), [read_written(spark, base, schema)], [KEY], fp_cols),
               [KEY]).write.option("compression", "zstd").parquet(real)
    real_files = len([f for f in os.listdir(real) if f.endswith(".parquet")])
    real_rows = spark.read.parquet(real).count()

    pct = int(round(args.change * 1000))  # per mille of keys touched per delta
    deltas: list[str] = []
    delta_counts: list[int] = []
    for i in range(1, max(chains) + 1):
        touched = spark.range(1, args.rows + 1).selectExpr(
            f"id AS {KEY}", f"pmod(xxhash64(id, {i}), 1000) AS r"
        ).filter(f"r < {pct}")
        gone = f"pmod(xxhash64(id, {i}, 'd'), 9) = 0"
        changed = touched.selectExpr(
            KEY,
            f"xxhash64(id, {i}, 'u') AS {FP}",
            # 8 of 9 touched keys updated, 1 of 9 deleted (a tombstone)
            f"CASE WHEN {gone} THEN {DELETE} ELSE {UPDATE} END AS {CHANGE}",
            f"CAST(CASE WHEN {gone} THEN 0 ELSE 1 END AS BIGINT) AS {DUP}",
        )
        n_ins = int(args.rows * args.change / 9)
        start = 10 * args.rows + i * args.rows
        inserted = spark.range(start, start + n_ins).selectExpr(
            f"id AS {KEY}", f"xxhash64(id, {i}, 'i') AS {FP}", f"{INSERT} AS {CHANGE}",
            f"CAST(1 AS BIGINT) AS {DUP}")
        frame = changed.unionByName(inserted).selectExpr(
            *[f"CAST({f.name} AS {f.dataType.simpleString()}) AS {f.name}" for f in schema.fields])
        path = os.path.join(args.work, f"delta-{i:03d}")
        frame.repartition(real_files, KEY).write.option("compression", "zstd").parquet(path)
        deltas.append(path)
        delta_counts.append(spark.read.parquet(path).count())
    print(f"base + {len(deltas)} deltas written; real delta {real_rows} rows in {real_files} "
          f"files; synthetic deltas ~{statistics.mean(delta_counts):.0f} rows", file=sys.stderr)

    counter = iter(range(10**6))

    jvm_pid = int(str(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                      .getName()).split("@")[0])
    cpu: dict[int, list[float]] = {c: [] for c in chains}

    def run(length: int) -> float:
        target = os.path.join(args.work, "out", f"{next(counter):05d}")
        cpu_before = cpu_seconds(jvm_pid)
        started = time.perf_counter()
        links = [read_written(spark, p, schema) for p in [base, *deltas[:length]]]
        classify(narrow(cur), links, [KEY], fp_cols).write.mode("error").option(
            "compression", "zstd").parquet(target)
        elapsed = time.perf_counter() - started
        cpu[length].append(cpu_seconds(jvm_pid) - cpu_before)
        shutil.rmtree(target, ignore_errors=True)
        return elapsed

    # untimed: the chains resolve as chain.py says (live keys of each chain)
    live = {}
    for length in chains:
        links = [read_written(spark, p, schema) for p in [base, *deltas[:length]]]
        out = classify(narrow(cur), links, [KEY], fp_cols)
        live[length] = {str(r[0]): int(r[1]) for r in out.groupBy(CHANGE).count().collect()}

    times: dict[int, list[float]] = {c: [] for c in chains}
    warm = {}
    load_before = os.getloadavg()
    for length in chains:
        warm[length] = run(length)
        print(f"warm-up {length}: {warm[length]:.2f} s", file=sys.stderr)
    for v in cpu.values():
        v.clear()
    for rep in range(args.repeat):
        for length in (chains if rep % 2 == 0 else list(reversed(chains))):
            times[length].append(run(length))
            print(f"rep {rep} chain {length}: {times[length][-1]:.2f} s", file=sys.stderr)
    medians = {c: statistics.median(v) for c, v in times.items()}
    document = {
        "command": "python -m benchmarks.compaction_chain "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "spark_version": spark.version,
        "master": args.master,
        "cpus": os.cpu_count(),
        "base_rows": args.rows,
        "delta_rows_mean": round(statistics.mean(delta_counts)),
        "delta_files": real_files,
        "real_steady_delta_rows": real_rows,
        "sink": "the whole classified state, zstd Parquet",
        "seconds": {f"deltas_{c}": {"median": round(medians[c], 3), "min": round(min(v), 3),
                                    "all": [round(t, 3) for t in v],
                                    "warm_up": round(warm[c], 3)}
                    for c, v in times.items()},
        "x_no_deltas_median": {f"deltas_{c}": round(medians[c] / medians[chains[0]], 2)
                               for c in chains},
        "x_no_deltas_paired_median": {
            f"deltas_{c}": round(statistics.median(
                t / z for t, z in zip(times[c], times[chains[0]])), 2) for c in chains},
        "jvm_cpu_seconds_median": {f"deltas_{c}": round(statistics.median(v), 2)
                                   for c, v in cpu.items()},
        "load_average_before_after": [list(load_before), list(os.getloadavg())],
        "chain_delta_rows_share_of_base": {
            f"deltas_{c}": round(sum(delta_counts[:c]) / args.rows, 3) for c in chains},
        "classified_kinds": {f"deltas_{c}": v for c, v in live.items()},
    }
    print_and_save(document, args.out)
    spark.stop()
    shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
