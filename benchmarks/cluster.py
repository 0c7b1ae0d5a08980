"""Steady runs on a Spark standalone cluster (1 worker, 2 cores) beside ``local[2]``.

The same generated snapshots, the same diffcdc settings and the same driver memory; the only
difference is where the executors run: in the driver's JVM (``local[2]``) or in a separate
executor JVM started by a standalone worker on this machine (master and worker from the
pip-installed pyspark on 127.0.0.1, ``tests/support/spark_cluster.py``). Each run is the ``steady``
scenario of ``benchmarks.run``: the first load of snapshot 1 (``setup s``) then the timed run of
snapshot 2 (1% updates, 0.5% deletes, 0.5% inserts, 0.1% key changes), each master in a fresh
process, every result checked against the generator's ground truth.

    python -m benchmarks.cluster [--rows 20000000] [--out benchmarks/results/cluster-20m.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

from .report import print_and_save
from .run import HERE, REPO, parse_size, run_matrix, spark_conf

LOCAL = "local[2]"


def compare_masters(rows: int, executor_memory: str, driver_memory: str, seed: int,
                    data: str, work: str, log: Any = print) -> dict[str, Any]:
    """Start the cluster, run the steady scenario on it and on ``local[2]``; stop the cluster."""
    sys.path.insert(0, REPO)  # tests/ is not a package: its cluster launcher is imported by path
    from tests.support.spark_cluster import StandaloneCluster

    folder = tempfile.mkdtemp(prefix="cluster-", dir=work if os.path.isdir(work) else None)
    cluster = StandaloneCluster(folder, cores=2, memory="3g")
    started = time.perf_counter()
    cluster.start()
    log(f"cluster {cluster.master_url} up in {time.perf_counter() - started:.1f} s (logs: {folder})")
    conf = spark_conf(driver_memory, [f"spark.executor.memory={executor_memory}",
                                      "spark.cores.max=2"])
    out: dict[str, Any] = {"rows": rows, "spark_conf": conf, "masters": {}}
    try:
        for label, master in (("standalone", cluster.master_url), ("local[2]", LOCAL)):
            results = run_matrix([rows], ["steady"], ["diffcdc"], data_root=data,
                                 work_root=os.path.join(work, label.replace("[", "").replace("]", "")),
                                 seed=seed, master=master, conf=conf, max_rss=parse_size("50%"),
                                 log=log)
            (record,) = results["runs"]
            out.setdefault("meta", results["meta"])
            out["masters"][label] = {
                "master": master,
                "status": record.get("status"),
                "matches_truth": record.get("matches_truth"),
                "first_load_s": round(record.get("setup_seconds", 0.0), 2),
                "steady_s": round(record.get("seconds", 0.0), 2),
                "jvm_startup_s": round(record.get("jvm_startup_seconds", 0.0), 2),
                "load_average": record.get("load_average"),
                "error": record.get("error"),
            }
            log(f"{label}: {out['masters'][label]}")
    finally:
        cluster.stop()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--executor-memory", default="2g",
                        help="the standalone executor's heap (the worker offers 3g)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--data", default=os.path.join(HERE, "data"))
    parser.add_argument("--work", default=os.path.join(HERE, "work", "cluster"))
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # driver and cluster on loopback
    result = compare_masters(args.rows, args.executor_memory, args.driver_memory, args.seed,
                             args.data, args.work, log=lambda m: print(m, file=sys.stderr))
    print_and_save(result, args.out or os.path.join(
        HERE, "results", f"cluster-{args.rows // 1_000_000}m.json"))


if __name__ == "__main__":
    main()
