"""Experiment: a base state stored pre-partitioned by key (a bucketed table) against today's.

Today a steady run classifies the snapshot against the previous state with one shuffle of
both sides (:func:`diffcdc.core.classify.classify`: the snapshot's ``(key, fingerprint)`` rows
UNION the state's rows, repartitioned by key, one hash aggregate). Every run therefore reads
*and shuffles* the previous state's rows beside the snapshot's. If the state were stored
bucketed by key into as many buckets as the session's shuffle partitions, a join of the
snapshot (shuffled by key) with the state would need no exchange on the state side.

Everything runs in one warm session built by :func:`diffcdc.spark.session.build_spark` (diffcdc's
settings, ``local[2]``, the in-memory catalog), on the steady scenario's snapshots
(``snap-001`` → its state, ``snap-002`` the new snapshot). Untimed set-up: the state of
``snap-001`` written the normal way (Parquet) and as two bucketed tables (``bucketBy(N, key)``
with and without ``sortBy(key)``, N = ``spark.sql.shuffle.partitions``). Timed, alternating,
after one warm-up of each variant:

* ``floor`` — :mod:`benchmarks.floor`'s ``spark_scan_hash_shuffle`` job;
* ``b_full`` / ``b_delta`` — today's ``classify`` of the snapshot against the Parquet state,
  the whole classified state (a base) / only its changes (``delta_rows``, what a steady run
  writes now) written as zstd Parquet;
* ``c_*`` — a join-based classify: the snapshot's ``(key, fingerprint)`` repartitioned by key
  into N partitions and aggregated (max fingerprint, row count), FULL OUTER JOIN the bucketed
  state on the key; same columns and classification as ``classify``. Each timed run first
  re-declares the table over its existing folder (``CREATE TABLE ... CLUSTERED BY ... INTO N
  BUCKETS LOCATION ...``), as a fresh process would have to. ``smj`` sort-merge join, ``shj``
  shuffled hash join (``shuffle_hash`` hint), ``sorted`` the table written with ``sortBy`` and
  ``spark.sql.legacy.bucketedTableScan.outputOrdering`` on (else Spark does not use the order),
  ``bwrite`` the new full state written bucketed again (what keeping the layout costs).

Untimed checks: each variant's final (adaptive) plan, its Exchange count and whether the state
is read as a bucketed scan; ``b_full`` and the ``c_*`` outputs hold the same rows (counts per
change kind, ``exceptAll`` both ways on the whole state).

    python -m benchmarks.bucketed_state --rows 5000000 --repeat 5 \
        --out benchmarks/results/bucketed-state-5m.json
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from .measure import cpu_seconds
from .report import print_and_save

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "id"


def _exchanges(plan: str) -> dict[str, Any]:
    """Operators in the plan that ran (an adaptive plan's final form, not its initial one)."""
    final, _, initial = plan.partition("== Initial Plan ==")
    return {
        "final": _operators(final),
        "initial": _operators(initial) if initial else None,
        "join": (re.findall(r"(SortMergeJoin|ShuffledHashJoin|BroadcastHashJoin)", final)
                 or [None])[0],
    }


def _operators(plan: str) -> dict[str, Any]:
    return {
        "Exchange": len(re.findall(r"(?<![A-Za-z])Exchange\b", plan)),
        "BroadcastExchange": plan.count("BroadcastExchange"),
        "ReusedExchange": plan.count("ReusedExchange"),
        "Sort": len(re.findall(r"(?<![A-Za-z])Sort \[", plan)),
        "state_bucketed_scan": "Bucketed: true" in plan,
    }


def snapshot_fingerprints(spark: Any, path: str) -> Any:
    """The benchmark snapshot at ``path`` as (key, 64-bit fingerprint), as a run diffs it."""
    from diffcdc.core.fingerprint import fingerprint_exprs

    df = spark.read.parquet(path)
    return df.select(KEY, *fingerprint_exprs(df.schema, [KEY], [], 64))


def steady_pair(args: Any) -> tuple[str, str]:
    """The steady data set's two snapshots (``--data``, ``--rows``, ``--seed``), with an empty
    ``--work`` folder made for the experiment."""
    folder = os.path.join(args.data, f"n{args.rows}-s{args.seed}", "steady")
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    return os.path.join(folder, "snap-001"), os.path.join(folder, "snap-002")


def write_first_state(spark: Any, snapshot: str, path: str) -> Any:
    """The state of a first load of ``snapshot`` (every key, a base) written to ``path``, as
    a run writes it; returns its schema."""
    from diffcdc.core.classify import classify
    from diffcdc.core.fingerprint import fingerprint_columns

    first = classify(snapshot_fingerprints(spark, snapshot), [], [KEY], fingerprint_columns(64))
    first.write.option("compression", "zstd").parquet(path)
    return first.schema


def final_plan(df: Any) -> str:
    """The plan ``df`` runs with: executed once (rows counted in the JVM), then the adaptive
    plan's final form."""
    qe = df._jdf.queryExecution()
    qe.toRdd().count()
    return str(qe.executedPlan().toString())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--data", default=os.path.join(HERE, "data"))
    parser.add_argument("--work", default=os.path.join(HERE, "work", "bucketed-state"))
    parser.add_argument("--only", default=None, help="comma-separated variants (default: all)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    os.environ.setdefault("DIFFCDC_SPARK_LOG_LEVEL", "ERROR")
    from pyspark.sql import functions as F

    from diffcdc.core.classify import (
        CHANGE,
        DELETE,
        DUP,
        INSERT,
        UNCHANGED,
        UPDATE,
        classify,
        delta_rows,
    )
    from diffcdc.core.fingerprint import FP, fingerprint_columns
    from diffcdc.spark.paths import read_written
    from diffcdc.spark.session import build_spark

    from .floor import _spark_probes

    prev, cur = steady_pair(args)
    started = time.perf_counter()
    spark = build_spark(master=args.master, app_name="diffcdc-bucketed-state")
    session_s = time.perf_counter() - started
    n = int(spark.conf.get("spark.sql.shuffle.partitions"))
    fp_cols = fingerprint_columns(64)

    narrow = functools.partial(snapshot_fingerprints, spark)

    # --- untimed: the state of snap-001, normal and bucketed -------------------------------
    plain = os.path.join(args.work, "state-plain")
    state_schema = write_first_state(spark, prev, plain)
    ddl_cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in state_schema.fields)
    buckets = {"unsorted": os.path.join(args.work, "state-bucketed"),
               "sorted": os.path.join(args.work, "state-bucketed-sorted")}
    for kind, path in buckets.items():
        writer = spark.read.parquet(plain).write.bucketBy(n, KEY)
        if kind == "sorted":
            writer = writer.sortBy(KEY)
        writer.option("compression", "zstd").option("path", path).saveAsTable(f"state_{kind}")
        spark.sql(f"DROP TABLE state_{kind}")  # external (a path): the files stay
    files = {kind: sorted(f for f in os.listdir(p) if f.endswith(".parquet"))
             for kind, p in buckets.items()}
    state_bytes = {"plain": _bytes(plain), **{k: _bytes(p) for k, p in buckets.items()}}

    def declare(kind: str) -> str:
        """The bucketed table over its existing folder, as a fresh run would declare it."""
        name = f"state_{kind}"
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        sort = f" SORTED BY ({KEY})" if kind == "sorted" else ""
        spark.sql(f"CREATE TABLE {name} ({ddl_cols}) USING parquet CLUSTERED BY ({KEY}){sort} "
                  f"INTO {n} BUCKETS LOCATION '{buckets[kind]}'")
        return name

    def classify_today() -> Any:
        return classify(narrow(cur), [read_written(spark, plain, state_schema)], [KEY], fp_cols)

    def classify_join(kind: str, hint: str | None) -> Any:
        new = (narrow(cur).repartition(n, F.col(KEY)).groupBy(KEY)
               .agg(F.max(FP).alias("new_fp"), F.count(F.lit(1)).alias("n")))
        old = (spark.table(declare(kind)).filter(f"{CHANGE} != {DELETE}")
               .select(KEY, F.col(FP).alias("old_fp")))
        if hint:
            old = old.hint(hint)
        joined = new.join(old, KEY, "full_outer")
        change = (f"CASE WHEN old_fp IS NULL THEN {INSERT} WHEN n IS NULL THEN {DELETE} "
                  f"WHEN new_fp = old_fp THEN {UNCHANGED} ELSE {UPDATE} END")
        return joined.selectExpr(KEY, f"coalesce(new_fp, old_fp) AS {FP}",
                                 f"{change} AS {CHANGE}", f"CAST(coalesce(n, 0) AS BIGINT) AS {DUP}")

    counter = iter(range(10**6))

    def target() -> str:
        return os.path.join(args.work, "out", f"{next(counter):05d}")

    def write(df: Any, path: str) -> None:
        df.write.mode("error").option("compression", "zstd").parquet(path)

    def write_bucketed(df: Any, path: str) -> None:
        name = f"out_{os.path.basename(path)}"
        (df.write.bucketBy(n, KEY).option("compression", "zstd").option("path", path)
         .saveAsTable(name))
        spark.sql(f"DROP TABLE {name}")

    floor_job = _spark_probes(spark, cur)["spark_scan_hash_shuffle"]
    # name -> (build the frame, write it, session settings for this query only)
    variants: dict[str, tuple[Callable[[], Any] | None, Callable[[Any, str], None], dict[str, str]]] = {
        "floor": (None, lambda _df, _p: floor_job(), {}),
        "b_full": (classify_today, write, {}),
        "b_delta": (lambda: delta_rows(classify_today(), [KEY]), write, {}),
        "c_smj_full": (lambda: classify_join("unsorted", None), write, {}),
        "c_smj_sorted_full": (lambda: classify_join("sorted", None), write,
                              {"spark.sql.legacy.bucketedTableScan.outputOrdering": "true"}),
        "c_shj_full": (lambda: classify_join("unsorted", "shuffle_hash"), write, {}),
        "c_shj_nopref_full": (lambda: classify_join("unsorted", None), write,
                              {"spark.sql.join.preferSortMergeJoin": "false"}),
        "c_smj_delta": (lambda: delta_rows(classify_join("unsorted", None), [KEY]), write, {}),
        "c_shj_delta": (lambda: delta_rows(classify_join("unsorted", "shuffle_hash"), [KEY]),
                        write, {}),
        "c_shj_full_bwrite": (lambda: classify_join("unsorted", "shuffle_hash"), write_bucketed,
                              {}),
    }
    if args.only:
        wanted = args.only.split(",")
        variants = {k: v for k, v in variants.items() if k in wanted or k == "floor"}

    def with_conf(settings: dict[str, str], fn: Callable[[], Any]) -> Any:
        saved = {k: spark.conf.get(k, None) for k in settings}
        for k, v in settings.items():
            spark.conf.set(k, v)
        try:
            return fn()
        finally:
            for k, v in saved.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)

    jvm_pid = int(str(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                      .getName()).split("@")[0])
    cpu: dict[str, list[float]] = {k: [] for k in variants}

    def run(name: str) -> float:
        build, sink, settings = variants[name]
        path = target()

        def once() -> None:
            sink(build() if build else None, path)

        cpu_before = cpu_seconds(jvm_pid)
        started = time.perf_counter()
        with_conf(settings, once)
        elapsed = time.perf_counter() - started
        cpu.setdefault(name, []).append(cpu_seconds(jvm_pid) - cpu_before)
        shutil.rmtree(path, ignore_errors=True)
        return elapsed

    # --- untimed: plans and agreement --------------------------------------------------------
    plans: dict[str, Any] = {}
    plan_text: list[str] = []
    for name, (build, _sink, settings) in variants.items():
        if build is None:
            df_plan = with_conf({}, lambda: final_plan(narrow(cur).repartition(KEY)))
        else:
            df_plan = with_conf(settings, lambda b=build: final_plan(b()))
        plans[name] = _exchanges(df_plan)
        plan_text.append(f"== {name} ==\n{df_plan}\n")
    # AQE off, for the plain join, if AQE left any extra exchange in the join variants
    aqe_extra = any(p["final"]["Exchange"] > 1 for k, p in plans.items() if k.startswith("c_"))
    if aqe_extra:
        build, sink, settings = variants["c_smj_full"]
        variants["c_smj_full_aqe_off"] = (build, sink, {**settings,
                                                        "spark.sql.adaptive.enabled": "false"})
        df_plan = with_conf(variants["c_smj_full_aqe_off"][2], lambda: final_plan(build()))
        plans["c_smj_full_aqe_off"] = _exchanges(df_plan)
        plan_text.append(f"== c_smj_full_aqe_off ==\n{df_plan}\n")

    checks: dict[str, Any] = {}
    ref = os.path.join(args.work, "check-b")
    write(classify_today(), ref)
    ref_df = spark.read.parquet(ref)

    def kinds(df: Any) -> dict[str, int]:
        return {str(r[0]): int(r[1]) for r in df.groupBy(CHANGE).count().collect()}

    checks["b_full"] = {"kinds": kinds(ref_df), "rows": ref_df.count()}
    for name in ("c_smj_full", "c_shj_full", "c_smj_sorted_full"):
        if name not in variants:
            continue
        build, _sink, settings = variants[name]
        path = os.path.join(args.work, f"check-{name}")
        with_conf(settings, lambda b=build, p=path: write(b(), p))
        got = spark.read.parquet(path)
        checks[name] = {
            "kinds": kinds(got),
            "b_except_c": ref_df.exceptAll(got).count(),
            "c_except_b": got.exceptAll(ref_df).count(),
        }
        shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(ref, ignore_errors=True)
    same = all(c["kinds"] == checks["b_full"]["kinds"] and c["b_except_c"] == 0
               and c["c_except_b"] == 0 for k, c in checks.items() if k != "b_full")
    print(f"agreement: {same} {checks}", file=sys.stderr)

    # --- timed, alternating -------------------------------------------------------------------
    times: dict[str, list[float]] = {k: [] for k in variants}
    warm: dict[str, float] = {}
    load_before = os.getloadavg()
    for name in variants:
        warm[name] = run(name)
        print(f"warm-up {name}: {warm[name]:.2f} s", file=sys.stderr)
    cpu.clear()
    for rep in range(args.repeat):
        order = list(variants) if rep % 2 == 0 else list(reversed(variants))
        for name in order:
            times[name].append(run(name))
            print(f"rep {rep} {name}: {times[name][-1]:.2f} s", file=sys.stderr)

    medians = {k: statistics.median(v) for k, v in times.items()}
    floor = medians["floor"]
    # each repetition's figure over the floor's in the same repetition (drift cancels)
    paired = {k: round(statistics.median(t / f for t, f in zip(v, times["floor"])), 2)
              for k, v in times.items()}
    cpu_medians = {k: statistics.median(v) for k, v in cpu.items()}
    document = {
        "command": "python -m benchmarks.bucketed_state "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "spark_version": spark.version,
        "master": args.master,
        "cpus": os.cpu_count(),
        "shuffle_partitions_and_buckets": n,
        "adaptive": spark.conf.get("spark.sql.adaptive.enabled"),
        "rows_prev_cur": [args.rows, checks["b_full"]["rows"]],
        "session_build_s": round(session_s, 2),
        "bucket_files": {k: len(v) for k, v in files.items()},
        "state_bytes": state_bytes,
        "seconds": {k: {"median": round(medians[k], 3), "min": round(min(v), 3),
                        "all": [round(t, 3) for t in v], "warm_up": round(warm[k], 3)}
                    for k, v in times.items()},
        "x_floor_median": {k: round(v / floor, 2) for k, v in medians.items()},
        "x_floor_paired_median": paired,
        "jvm_cpu_seconds_median": {k: round(v, 2) for k, v in cpu_medians.items()},
        "jvm_cpu_x_floor": {k: round(v / cpu_medians["floor"], 2)
                            for k, v in cpu_medians.items()},
        "load_average_before_after": [list(load_before), list(os.getloadavg())],
        "x_b_full_median": {k: round(v / medians["b_full"], 2) for k, v in medians.items()
                            if "b_full" in medians},
        "plans": plans,
        "agreement": {"same_rows": same, **checks},
    }
    if args.out:
        with open(os.path.splitext(args.out)[0] + "-plans.txt", "w", encoding="utf-8") as fh:
            fh.write("\n".join(plan_text))
    print_and_save(document, args.out)
    spark.stop()
    shutil.rmtree(args.work, ignore_errors=True)


def _bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if f.endswith(".parquet"))


if __name__ == "__main__":
    main()
