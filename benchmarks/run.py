"""Time diffcdc and the baselines on the same generated snapshots, check they agree, chart it.

    python -m benchmarks.run --sizes 1000000,5000000 --scenarios steady,first-load,zero,half \
        --engines diffcdc,duckdb,delta,exceptall --spark-driver-memory 2g
    python -m benchmarks.run --smoke          # 2,000 rows, in-process, well under a minute

Each (size, scenario, engine) runs by default in its own Python process (``--isolate process``)
so peak memory is that engine's alone; Spark engines build their session in that process and the
session build (JVM start-up) is recorded apart from the engine's time. ``--isolate none`` runs
everything in this process on one shared SparkSession (faster; memory figures then overlap).

Scenarios (rates are fractions of snapshot 1's rows):
  steady      1% updates, 0.5% deletes, 0.5% inserts, 0.1% key changes (state of snapshot 1 exists)
  zero        snapshot 2 has the same rows as snapshot 1 (rewritten files)
  half        40% updates, 5% deletes, 5% inserts: half the rows change
  first-load  snapshot 1 against nothing: every row is an INSERT
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from typing import Any

from .baselines import ENGINES, NEEDS_SPARK, Case, EngineUnavailable
from .diffcdc_runner import run_diffcdc
from .generate import SCENARIOS, prepare
from .measure import tree_rss
from .report import REPO, git_commit, machine_info, save
from .verify import compare, read_changes, summarize, truth_changes

HERE = os.path.dirname(os.path.abspath(__file__))
ALL_ENGINES = {"diffcdc": run_diffcdc, **ENGINES}


# --- data --------------------------------------------------------------------------------------


# --- Spark -------------------------------------------------------------------------------------


def spark_conf(driver_memory: str | None, extra: list[str]) -> dict[str, str]:
    conf = {"spark.driver.memory": driver_memory} if driver_memory else {}
    for item in extra:
        key, _, value = item.partition("=")
        conf[key.strip()] = value.strip()
    return conf


def start_spark(master: str | None, conf: dict[str, str]) -> tuple[Any, float]:
    """Build the SparkSession; the time taken is the JVM start-up figure."""
    os.environ.setdefault("DIFFCDC_SPARK_LOG_LEVEL", "ERROR")
    from diffcdc.spark.session import build_spark

    started = time.perf_counter()
    spark = build_spark(master=master, conf=conf, app_name="diffcdc-bench")
    spark.range(1).count()  # the session is usable, not just constructed
    return spark, time.perf_counter() - started


# --- one engine on one case --------------------------------------------------------------------


def run_engine(engine: str, case: Case, spark: Any = None) -> dict[str, Any]:
    """Run one engine; never raises: the record's ``status`` says what happened."""
    shutil.rmtree(case.work, ignore_errors=True)
    os.makedirs(case.work)
    try:
        run = ALL_ENGINES[engine](case, spark)
    except EngineUnavailable as exc:
        return {"status": "unavailable", "error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - recorded, the other engines still run
        return {
            "status": "error",
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-4000:],
        }
    return {"status": "ok", **asdict(run)}


def _worker(spec_path: str) -> None:
    with open(spec_path) as handle:
        spec = json.load(handle)
    case = Case(**spec["case"])
    record: dict[str, Any] = {}
    spark = None
    try:
        if spec["engine"] in NEEDS_SPARK:
            spark, record["jvm_startup_seconds"] = start_spark(spec["master"], spec["spark_conf"])
        record.update(run_engine(spec["engine"], case, spark))
    finally:
        if spark is not None:
            spark.stop()
        with open(spec["result"], "w") as handle:
            json.dump(record, handle, default=str)


def run_isolated(
    engine: str,
    case: Case,
    master: str | None,
    conf: dict[str, str],
    timeout: float,
    max_rss: int | None = None,
) -> dict[str, Any]:
    """Run one engine in a fresh Python process (its own JVM for Spark engines)."""
    os.makedirs(os.path.dirname(case.work), exist_ok=True)
    fd, spec_path = tempfile.mkstemp(prefix="spec-", suffix=".json", dir=os.path.dirname(case.work))
    result = spec_path.replace("spec-", "result-")
    with os.fdopen(fd, "w") as handle:
        json.dump(
            {
                "engine": engine,
                "case": asdict(case),
                "master": master,
                "spark_conf": conf,
                "result": result,
            },
            handle,
        )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    )
    log_path = case.work + ".log"  # beside, not inside: the worker starts by emptying case.work
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.run", "--worker", spec_path],
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    # watch the worker's whole tree: a runaway engine is stopped before it starves the machine
    started, peak, killed = time.monotonic(), 0, None
    while proc.poll() is None:
        rss = tree_rss(proc.pid)
        peak = max(peak, rss)
        if max_rss and rss > max_rss:
            killed = {
                "status": "memory-limit",
                "error": f"stopped at {rss / 2**30:.1f} GiB RSS (limit {max_rss / 2**30:.1f} GiB)",
            }
        elif time.monotonic() - started > timeout:
            killed = {"status": "timeout", "error": f"stopped after {timeout:.0f} s"}
        if killed:
            os.killpg(proc.pid, 9)  # the worker's own process group: it and its JVM
            proc.wait()
            break
        time.sleep(0.1)
    os.remove(spec_path)
    if killed:
        return {**killed, "worker_peak_rss_bytes": peak, "log": log_path}
    try:
        with open(result) as handle:
            record = json.load(handle)
        os.remove(result)
    except (OSError, ValueError):
        record = {}
    if not record.get("status"):
        with open(log_path, "rb") as handle:
            tail = handle.read()[-3000:].decode(errors="replace")
        record.update(status="error", error=f"worker exit code {proc.returncode}", log_tail=tail)
    else:
        os.remove(log_path)
    record["worker_peak_rss_bytes"] = peak  # whole worker life, setup and JVM start included
    return record


# --- the matrix --------------------------------------------------------------------------------


def run_matrix(
    sizes: list[int],
    scenarios: list[str],
    engines: list[str],
    *,
    data_root: str,
    work_root: str,
    seed: int = 42,
    isolate: bool = True,
    spark: Any = None,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    timeout: float = 3600,
    max_rss: int | None = None,
    keep_work: bool = False,
    out_path: str | None = None,
    log: Any = print,
) -> dict[str, Any]:
    """Run every engine on every (size, scenario); verify; return (and save) the results."""
    conf = conf or {}
    results: dict[str, Any] = {"meta": machine_info(), "runs": [], "agreement": []}
    results["meta"].update(
        sizes=sizes,
        scenarios=scenarios,
        engines=engines,
        seed=seed,
        isolate="process" if isolate else "none",
        spark_conf=conf,
        master=master,
    )
    shared_jvm = None
    for rows in sizes:
        for scenario in scenarios:
            started = time.perf_counter()
            prev, cur, truth_path = prepare(data_root, rows, scenario, seed)
            log(f"[{rows:,} rows / {scenario}] data ready in {time.perf_counter() - started:.1f} s")
            want = truth_changes(truth_path, cur)
            digests = {}
            for engine in engines:
                case = Case(
                    prev=prev, cur=cur, work=os.path.join(work_root, f"n{rows}-{scenario}-{engine}")
                )
                if isolate:
                    record = run_isolated(engine, case, master, conf, timeout, max_rss)
                else:
                    if engine in NEEDS_SPARK and spark is None:
                        spark, shared_jvm = start_spark(master, conf)
                    record = run_engine(engine, case, spark)
                    if engine in NEEDS_SPARK and shared_jvm is not None:
                        record["jvm_startup_seconds"] = shared_jvm
                record.update(
                    rows=rows,
                    scenario=scenario,
                    engine=engine,
                    load_average=os.getloadavg(),
                    git_commit=git_commit(),  # others may commit to the engine during a long run
                )
                if record["status"] == "ok":
                    got = read_changes(record.pop("output_files"), case.key)
                    record["changes"] = {k: v["count"] for k, v in summarize(got).items()}
                    record["mismatch"] = compare(got, want)
                    record["matches_truth"] = not record["mismatch"]
                    digests[engine] = {k: v["sha1"] for k, v in summarize(got).items()}
                    del got
                results["runs"].append(record)
                log(_line(record))
                if not keep_work:
                    shutil.rmtree(case.work, ignore_errors=True)
                if out_path:
                    save(results, out_path)
            truth_digest = {k: v["sha1"] for k, v in summarize(want).items()}
            results["agreement"].append(
                {
                    "rows": rows,
                    "scenario": scenario,
                    "expected": {k: len(v) for k, v in want.items()},
                    "engines_agree": len({json.dumps(d, sort_keys=True) for d in digests.values()})
                    <= 1,
                    "all_match_truth": all(d == truth_digest for d in digests.values()),
                    "compared": sorted(digests),
                }
            )
    results["ratios"] = ratios(results["runs"])
    if out_path:
        save(results, out_path)
    return results


def _line(r: dict[str, Any]) -> str:
    if r["status"] != "ok":
        return f"  {r['engine']:<10} {r['status'].upper()}: {str(r.get('error', ''))[:300]}"
    jvm = f" (+{r['jvm_startup_seconds']:.1f} s JVM)" if "jvm_startup_seconds" in r else ""
    check = "matches truth" if r["matches_truth"] else f"MISMATCH {r['mismatch']}"
    return (
        f"  {r['engine']:<10} {r['seconds']:8.2f} s{jvm}  peak {r['peak_rss_bytes'] / 2**30:.2f} GiB"
        f"  state {r['state_bytes'] / 2**20:.1f} MiB  out {r['output_bytes'] / 2**20:.1f} MiB"
        f"  {r['changes']}  {check}"
    )


def ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (rows, scenario): each engine's time relative to DuckDB and diffcdc's speed-ups."""
    out = []
    keys = sorted({(r["rows"], r["scenario"]) for r in runs})
    for rows, scenario in keys:
        secs = {
            r["engine"]: r["seconds"]
            for r in runs
            if r["rows"] == rows and r["scenario"] == scenario and r["status"] == "ok"
        }
        entry: dict[str, Any] = {"rows": rows, "scenario": scenario, "seconds": secs}
        if "duckdb" in secs:
            entry["vs_duckdb"] = {e: round(s / secs["duckdb"], 2) for e, s in secs.items()}
        if "diffcdc" in secs:
            entry["diffcdc_speedup"] = {
                e: round(s / secs["diffcdc"], 2) for e, s in secs.items() if e != "diffcdc"
            }
        out.append(entry)
    return out


def parse_size(text: str) -> int | None:
    """'12g', '800m', '50%' (of physical memory), a byte count, or '0'/'none' for no limit."""
    text = text.strip().lower()
    if text in ("", "0", "none"):
        return None
    if text.endswith("%"):
        return int(machine_info()["memory_bytes"] * float(text[:-1]) / 100)
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    if text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="1000000", help="comma-separated row counts")
    parser.add_argument("--scenarios", default="steady,first-load,zero,half")
    parser.add_argument("--engines", default="diffcdc,duckdb,delta,exceptall")
    parser.add_argument("--spark-driver-memory", default="2g")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--isolate", choices=["process", "none"], default="process")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per engine run")
    parser.add_argument(
        "--max-rss",
        default="50%",
        help="stop a worker whose process tree exceeds this (bytes, 12g, or %% of RAM)",
    )
    parser.add_argument("--data", default=os.path.join(HERE, "data"))
    parser.add_argument("--work", default=os.path.join(HERE, "work"))
    parser.add_argument(
        "--out", default=None, help="results JSON (default benchmarks/results/<time>.json)"
    )
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--keep-work", action="store_true")
    parser.add_argument(
        "--smoke", action="store_true", help="2,000 rows, in-process, all scenarios"
    )
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.worker)
        return 0
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    scenarios = [s for s in args.scenarios.split(",") if s]
    engines = [e for e in args.engines.split(",") if e]
    for name, known in (("scenario", SCENARIOS), ("engine", ALL_ENGINES)):
        bad = [x for x in (scenarios if name == "scenario" else engines) if x not in known]
        if bad:
            parser.error(f"unknown {name}(s) {bad}; choose from {sorted(known)}")
    if args.smoke:
        sizes, args.isolate = [2000], "none"
    out = args.out or os.path.join(
        HERE,
        "results",
        time.strftime("run-%Y%m%d-%H%M%S") + ("-smoke" if args.smoke else "") + ".json",
    )
    if args.smoke and not args.out:
        out = os.path.join(args.work, "smoke.json")
    results = run_matrix(
        sizes,
        scenarios,
        engines,
        data_root=args.data,
        work_root=args.work,
        seed=args.seed,
        isolate=args.isolate == "process",
        master=args.master,
        conf=spark_conf(args.spark_driver_memory, args.spark_conf),
        timeout=args.timeout,
        max_rss=parse_size(args.max_rss),
        keep_work=args.keep_work,
        out_path=out,
    )
    from .report import markdown

    table = markdown(results)
    with open(os.path.splitext(out)[0] + ".md", "w") as handle:
        handle.write(table)
    print(table)
    if not args.no_chart:
        from .chart import draw

        print("chart:", draw(results, os.path.splitext(out)[0] + ".png"))
    print("results:", out)
    bad = [r for r in results["runs"] if r["status"] == "ok" and not r["matches_truth"]]
    failed = [r for r in results["runs"] if r["status"] == "error"]
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main())
