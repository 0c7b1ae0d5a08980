"""Issue 30's goals (a changes-only state), each measured with whole ``diffcdc run`` processes.

Every diffcdc figure here is a whole process, ``python -m diffcdc.cli ...`` started fresh (its
own JVM), timed from spawn to exit, with the peak RSS of its process tree (``benchmarks.measure``)
and the phases of its run log; the next process starts only once the last one's tree is gone.
Data comes from ``benchmarks.generate`` (shared with ``benchmarks.run`` where the same files
serve), diffcdc's scratch folders go to ``benchmarks/work/state-growth/``.

``bytes``: state on disk after ``--versions`` versions, each its own ``diffcdc run`` (a first
load, then snapshots each changing ``--change`` of the rows: half updates, a quarter deletes,
a quarter inserts), with ``keep_versions = --keep-versions``. The state is every file under
``<state>/<table>/versions/*/state*`` (the state Parquet with its Hadoop ``.crc`` files), per
row of the newest snapshot; the commit records and marks under ``log/`` are counted apart, and
the state bytes of every version folder are listed::

    python -m benchmarks.state_growth bytes --rows 1000000 --versions 7 --change 0.02

``steady``: rounds alternating (a) a whole ``diffcdc run`` of the steady snapshot of
``benchmarks.run`` (1% updates, 0.5% deletes, 0.5% inserts, 0.1% key changes) against the state
of its first load, reset to the same copy before every round, and (b) the floor of a fresh Spark
process, ``python -m benchmarks.floor --cold`` (session start + one cold job: read the same
snapshot, fingerprint every row, shuffle ``(key, fingerprint)`` by key); medians and a / b. The
order flips every round. ``--modes cold,warm`` adds ``floor.py``'s warm comparison in one JVM
after the cold rounds: a complete steady ``run_table`` (``diffcdc_runner.steady_runs``) against
the same floor job, alternating, after a warm-up of each::

    python -m benchmarks.state_growth steady --rows 5000000 [--rounds 5] [--modes cold,warm]

``others``: what must not get slower, one whole process each in this order: the first load, a
snapshot with half its rows updated, a snapshot with no change, ``diffcdc verify --state``, and
``diffcdc rollback --to-version 1`` (diffs snapshot 1 against the head state: half the rows
change back). Run it on the commit before and after a change for a before/after table::

    python -m benchmarks.state_growth others --rows 1000000 [--repeat 1]

``many``: ``--tables`` tables of ``--rows`` rows in one ``diffcdc run --config`` process against
one table of tables × rows rows in another, both steady (the same files as
``benchmarks.many_tables``, which compares them inside one warm JVM), reset before every round,
alternating; then one more untimed run of each with Spark's event log, which gives the Spark
jobs per table (jobs are told apart by the table's FAIR pool)::

    python -m benchmarks.state_growth many --tables 60 --rows 20000 [--rounds 3]

Results go to ``benchmarks/results/``: ``state-bytes-<rows>.json``, ``steady-vs-floor-<rows>.json``,
``others-<rows>.json``, ``many-tables-whole-<tables>x<rows>.json``, unless ``--out`` says
otherwise. A state records the landing root it published to, so every repeated run happens in
the very folder of the run that made its starting state, put back from a copy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict
from typing import Any

from .generate import Rates, generate, generate_next
from .measure import PeakSampler
from .report import print_and_save
from .run import REPO, machine_info, prepare, save

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = "bench"
#: The issue's goals, written beside the figures they are about.
GOAL_BYTES_PER_ROW = 16.0
GOAL_STEADY_X_FLOOR = 1.5
GOAL_MANY_X_ONE = 2.0
HALF = Rates(updates=0.5, deletes=0.0, inserts=0.0, key_changes=0.0)
ZERO = Rates(updates=0.0, deletes=0.0, inserts=0.0, key_changes=0.0)


def change_rates(change: float) -> Rates:
    """``change`` of the rows touched: half updated, a quarter deleted, a quarter inserted (the
    steady scenario's mix; its key changes are a delete plus an insert to the state)."""
    return Rates(updates=change / 2, deletes=change / 4, inserts=change / 4, key_changes=0.0)


# --- whole processes ---------------------------------------------------------------------------


def _env() -> dict[str, str]:
    """This checkout's diffcdc and benchmarks first on the path."""
    path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path)


def process(args: list[str], log: str, timeout: float) -> dict[str, Any]:
    """Run ``python args...`` as a fresh process: wall seconds from spawn to exit, peak RSS of
    its tree; stdout (parsed as JSON when it is) and stderr kept in ``log``.{out,err}."""
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log + ".out", "wb") as out, open(log + ".err", "wb") as err:
        load = os.getloadavg()[0]
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env=_env(), stdout=out,
                                stderr=err, start_new_session=True)
        with PeakSampler(proc.pid) as sampler:
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait()
        seconds = time.perf_counter() - started
    _wait_gone(proc.pid)  # its JVM may outlive it by a moment: not into the next measurement
    with open(log + ".out", encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    record: dict[str, Any] = {"seconds": round(seconds, 3), "peak_rss_bytes": sampler.peak,
                              "peak_pss_bytes": sampler.peak_pss,
                              "exit_code": code, "load_average_1m": round(load, 2)}
    for candidate in (text, text.strip().rsplit("\n", 1)[-1]):  # a JSON document, or line
        try:
            record["output"] = json.loads(candidate)
            break
        except ValueError:
            record["output"] = text[-2000:]
    if code != 0:
        with open(log + ".err", encoding="utf-8", errors="replace") as handle:
            record["stderr_tail"] = handle.read()[-3000:]
    return record


def _wait_gone(group: int, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.killpg(group, signal.SIGKILL)


def _ok(record: dict[str, Any], what: str) -> dict[str, Any]:
    if record["exit_code"] != 0:
        raise SystemExit(f"{what} failed (exit {record['exit_code']}):\n"
                         f"{record.get('stderr_tail', '')}{record['output']}")
    return record


def cli(*args: str) -> list[str]:
    return ["-m", "diffcdc.cli", *args]


def table_args(folder: str, keep_versions: int | None) -> list[str]:
    """``diffcdc run`` options of the one benchmark table whose folders are under ``folder``."""
    args = ["--source", os.path.join(folder, "source"), "--keys", "id", "--table", TABLE,
            "--landing", os.path.join(folder, "landing"), "--state", os.path.join(folder, "state")]
    return args + (["--keep-versions", str(keep_versions)] if keep_versions else [])


def diffcdc_run(args: list[str], log: str, timeout: float, what: str = "diffcdc run",
                command: str = "run") -> dict[str, Any]:
    """One whole ``diffcdc <command>`` process; its report's counts, table seconds and the phase
    seconds from its run log beside the process figures."""
    record = _ok(process(cli(command, *args, "--json"), log, timeout), what)
    report = record.pop("output")
    tables = report.get("tables", []) if isinstance(report, dict) else []
    snaps = [s for t in tables for s in t.get("snapshots", [])]
    record["table_seconds"] = round(sum(t.get("seconds") or 0 for t in tables), 3)
    record["counts"] = {k: sum(s.get(k) or 0 for s in snaps)
                        for k in ("rows", "inserted", "updated", "deleted")}
    record["versions"] = [s.get("version") for s in snaps]
    if len(tables) == 1 and isinstance(report, dict) and report.get("log"):
        record["phases"] = run_log_phases(report["log"])
    return record


_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO \S+ [^:]+: (.*)$")


def run_log_phases(path: str) -> dict[str, float]:
    """Seconds per step of a one-table run from its run log: ``plan`` (from listing the waiting
    snapshots), then per snapshot ``read``, ``fingerprint and diff``, ``quality gate``,
    ``stage``, ``commit version``, ``publish`` (whatever the log names); each step lasts until
    the table's next line. Lines without a step (a rollback's notice) end the step before."""
    steps: list[tuple[float, str]] = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                match = _LINE.match(line)
                if not match:
                    continue
                stamp = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
                text = match.group(3)
                if re.match(r"\d+ snapshot\(s\) waiting", text):
                    name = "plan"
                else:  # "<snapshot>: <step> ..."; the last line "<snapshot>: +1 ~2 -3 (...)"
                    _, _, step = text.partition(": ")
                    found = re.match(r"[a-z][a-z ]*[a-z]", step)
                    name = found.group(0) if found else ""
                steps.append((stamp + int(match.group(2)) / 1000, name))
    except OSError:
        return {}
    phases: Counter[str] = Counter()
    for (at, name), (after, _) in zip(steps, steps[1:]):
        if name:
            phases[name] += after - at
    return {k: round(v, 3) for k, v in phases.items()}


def expected_counts(data: str, index: int) -> dict[str, int]:
    """The generator's ground truth for snapshot ``index`` of ``data`` (1: the first load)."""
    with open(os.path.join(data, "truth.json")) as handle:
        snaps = json.load(handle)["snapshots"]
    if index == 1:
        return {"inserted": snaps[0]["rows"], "updated": 0, "deleted": 0}
    want = snaps[index - 1]["expected"]
    return {"inserted": want["insert"], "updated": want["update"], "deleted": want["delete"]}


def _check(record: dict[str, Any], want: dict[str, int]) -> dict[str, Any]:
    got = {k: record["counts"][k] for k in want}
    record["matches_truth"] = got == want
    if got != want:
        print(f"  WARNING: changes {got} differ from the generator's truth {want}")
    return record


def _link(snapshot: str, source: str, name: str) -> None:
    """The snapshot folder as entry ``name`` of a source folder: a symlink, so its files'
    identity (inode, ctime) never changes (a hard link would touch their ctime)."""
    os.makedirs(source, exist_ok=True)
    os.symlink(snapshot, os.path.join(source, name))


def _fresh(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def _line(what: str, record: dict[str, Any]) -> None:
    phases = " ".join(f"{k} {v:.1f}" for k, v in (record.get("phases") or {}).items())
    print(f"  {what:<28} {record['seconds']:8.2f} s  peak {record['peak_rss_bytes'] / 2**30:.2f} GiB"
          f"  {record.get('counts', '')}  {phases}", flush=True)


# --- state on disk -----------------------------------------------------------------------------


def footprint(table_dir: str) -> dict[str, Any]:
    """Bytes of a table's state folder by kind: ``state`` (everything under
    ``versions/*/state*``), ``log`` (commit records and marks), ``sinks`` (staged output not
    yet published and removed) and ``other`` (reports, last_*.json, ...; by entry)."""
    kinds: Counter[str] = Counter()
    per_version: Counter[str] = Counter()
    other: Counter[str] = Counter()
    for folder, _, files in os.walk(table_dir):
        parts = os.path.relpath(folder, table_dir).split(os.sep)
        for name in files:
            full = os.path.join(folder, name)
            if os.path.islink(full):
                continue
            size = os.path.getsize(full)
            below = [*parts, name]
            if below[0] == "versions" and len(below) >= 3 and below[2].startswith("state"):
                kinds["state"] += size
                kinds["state_parquet"] += size if name.endswith(".parquet") else 0
                kinds["state_files"] += 1
                per_version[below[1]] += size
            elif below[0] == "log":
                kinds["log"] += size
                kinds["log_files"] += 1
            elif below[0] == "versions" and len(below) >= 3 and below[2] == "sinks":
                kinds["sinks"] += size
            else:
                kinds["other"] += size
                other[below[0] if below[0] != "." else name] += size
    return {
        **{f"{k}_bytes" if not k.endswith("_files") else k: kinds[k]
           for k in ("state", "state_parquet", "state_files", "log", "log_files", "sinks", "other")},
        "per_version_state_bytes": dict(sorted(per_version.items())),
        "other_by_entry": dict(sorted(other.items())),
    }


# --- bytes -------------------------------------------------------------------------------------


def cmd_bytes(args: argparse.Namespace) -> dict[str, Any]:
    rates = change_rates(args.change)
    data = os.path.join(args.data, f"n{args.rows}-s{args.seed}", f"growth-c{args.change:g}-v{args.versions}")
    print(f"data: {data}", flush=True)
    generate(data, args.rows, args.seed, rates, snapshots=args.versions,
             base_cache=os.path.join(args.data, f"n{args.rows}-s{args.seed}", "base"))
    work = _fresh(os.path.join(args.work, f"bytes-{args.rows}"))
    table_dir = os.path.join(work, "state", TABLE)
    doc: dict[str, Any] = {"meta": machine_info(), "rows": args.rows, "versions": args.versions,
                           "change": args.change, "rates": asdict(rates), "keep_versions": args.keep_versions, "runs": []}
    for index in range(1, args.versions + 1):
        name = f"snap-{index:03d}"
        _link(os.path.join(data, name), os.path.join(work, "source"), name)
        record = diffcdc_run(table_args(work, args.keep_versions),
                             os.path.join(work, "logs", name), args.timeout)
        _check(record, expected_counts(data, index))
        after = footprint(table_dir)
        record.update(snapshot=name, state_bytes_after=after["state_bytes"],
                      log_bytes_after=after["log_bytes"])
        doc["runs"].append(record)
        _line(f"{name} (state {after['state_bytes'] / 2**20:.1f} MiB)", record)
        save(doc, args.out)
    rows = doc["runs"][-1]["counts"]["rows"]
    state = footprint(table_dir)
    doc.update(
        head_rows=rows,
        state=state,
        state_bytes_per_row=round(state["state_bytes"] / rows, 2),
        log_bytes_per_row=round(state["log_bytes"] / rows, 2),
        state_and_log_bytes_per_row=round((state["state_bytes"] + state["log_bytes"]) / rows, 2),
        goal={"state_bytes_per_row_at_most": GOAL_BYTES_PER_ROW,
              "met": state["state_bytes"] / rows <= GOAL_BYTES_PER_ROW},
        all_match_truth=all(r["matches_truth"] for r in doc["runs"]),
    )
    summary = [f"state of {len(state['per_version_state_bytes'])} kept version folder(s), "
               f"{rows:,} rows in the head:"]
    summary += [f"  {folder}  {size:>14,} B  {size / rows:6.2f} B/row"
                for folder, size in state["per_version_state_bytes"].items()]
    summary += [f"  state in all  {state['state_bytes']:,} B = {doc['state_bytes_per_row']} B/row "
                f"(goal <= {GOAL_BYTES_PER_ROW:g}); log/ {state['log_bytes']:,} B = "
                f"{doc['log_bytes_per_row']} B/row; other {state['other_bytes']:,} B"]
    doc["summary"] = summary
    return doc


# --- steady against the floor ------------------------------------------------------------------


def cmd_steady(args: argparse.Namespace) -> dict[str, Any]:
    modes = [m for m in args.modes.split(",") if m]
    prev, cur, _ = prepare(args.data, args.rows, "steady", args.seed)
    assert prev is not None
    truth = os.path.dirname(cur)
    work = _fresh(os.path.join(args.work, f"steady-{args.rows}"))
    doc: dict[str, Any] = {"meta": machine_info(), "rows": args.rows, "rounds": args.rounds,
                           "modes": modes, "snapshot": cur}
    if "cold" in modes:
        # the state records the landing root it published to: every round runs in the folder
        # of the first load, put back from its copy
        folder, base = os.path.join(work, "round"), os.path.join(work, "base")
        _link(prev, os.path.join(folder, "source"), "snap-001")
        first = diffcdc_run(table_args(folder, None), os.path.join(work, "logs", "first-load"),
                            args.timeout, "the first load")
        os.rename(folder, base)
        doc["first_load"] = _check(first, expected_counts(truth, 1))
        _line("first load (untimed setup)", first)
        cold: dict[str, list[dict[str, Any]]] = {"steady": [], "floor": []}
        doc["cold"] = cold
        for n in range(args.rounds):
            order = ["steady", "floor"] if n % 2 == 0 else ["floor", "steady"]
            for what in order:
                log = os.path.join(work, "logs", f"round{n}-{what}")
                if what == "steady":
                    shutil.copytree(base, folder, symlinks=True)  # the same state every round
                    _link(cur, os.path.join(folder, "source"), "snap-002")
                    record = _check(diffcdc_run(table_args(folder, None), log, args.timeout),
                                    expected_counts(truth, 2))
                    shutil.rmtree(folder)
                else:
                    record = _ok(process(["-m", "benchmarks.floor", "--cold", cur], log,
                                         args.timeout), "the floor")
                    record.update(record.pop("output"))
                record["round"] = n
                cold[what].append(record)
                _line(f"round {n + 1}: {what}", record)
            save(doc, args.out)
        steady = _median([r["seconds"] for r in cold["steady"]])
        floor = _median([r["seconds"] for r in cold["floor"]])
        doc["cold_summary"] = {
            "steady_median_seconds": steady,
            "floor_median_seconds": floor,
            "steady_x_floor": round(steady / floor, 2),
            "floor_session_median_seconds": _median([r["session_seconds"] for r in cold["floor"]]),
            "floor_job_median_seconds": _median([r["job_seconds"] for r in cold["floor"]]),
            "steady_table_median_seconds": _median([r["table_seconds"] for r in cold["steady"]]),
            "steady_peak_rss_max_bytes": max(r["peak_rss_bytes"] for r in cold["steady"]),
            "goal": {"steady_x_floor_at_most": GOAL_STEADY_X_FLOOR,
                     "met": steady / floor <= GOAL_STEADY_X_FLOOR},
        }
        save(doc, args.out)
    if "warm" in modes:
        doc["warm"] = warm(prev, cur, os.path.join(work, "warm"), args.rounds)
        w = doc["warm"]
        w["goal"] = {"steady_x_floor_at_most": GOAL_STEADY_X_FLOOR,
                     "met": w["steady_x_floor"] <= GOAL_STEADY_X_FLOOR}
    summary = []
    if "cold_summary" in doc:
        c = doc["cold_summary"]
        summary.append(f"whole process: steady {c['steady_median_seconds']} s, fresh session + "
                       f"cold floor job {c['floor_median_seconds']} s (session "
                       f"{c['floor_session_median_seconds']} s, job {c['floor_job_median_seconds']}"
                       f" s): {c['steady_x_floor']}x (goal <= {GOAL_STEADY_X_FLOOR})")
    if "warm" in doc:
        w = doc["warm"]
        summary.append(f"warm, one JVM: steady {w['steady_median_seconds']} s, floor job "
                       f"{w['floor_median_seconds']} s: {w['steady_x_floor']}x "
                       f"(goal <= {GOAL_STEADY_X_FLOOR})")
    doc["summary"] = summary
    return doc


def warm(prev: str, cur: str, work: str, rounds: int) -> dict[str, Any]:
    """``floor.py``'s warm comparison, alternating: a complete steady ``run_table`` on a copy of
    the first load's state against the floor job, in this process's one JVM."""
    from diffcdc.spark.session import build_spark

    from .diffcdc_runner import steady_runs
    from .floor import _spark_probes

    os.environ.setdefault("DIFFCDC_SPARK_LOG_LEVEL", "ERROR")  # as benchmarks.run's sessions
    spark = build_spark(app_name="diffcdc-state-growth")
    try:
        steady = steady_runs(spark, prev, cur, work)
        floor = _spark_probes(spark, cur)["spark_scan_hash_shuffle"]
        steady()  # warm-up of each: code generation and JIT of both query shapes
        floor()
        seconds: dict[str, list[float]] = {"steady": [], "floor": []}
        for n in range(rounds):
            for what in (["steady", "floor"] if n % 2 == 0 else ["floor", "steady"]):
                started = time.perf_counter()
                if what == "steady":
                    took, _ = steady()
                else:
                    floor()
                    took = time.perf_counter() - started
                seconds[what].append(round(took, 3))
                print(f"  warm round {n + 1}: {what:<7} {took:8.2f} s", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    steady_s, floor_s = _median(seconds["steady"]), _median(seconds["floor"])
    return {"seconds": seconds, "steady_median_seconds": steady_s,
            "floor_median_seconds": floor_s, "steady_x_floor": round(steady_s / floor_s, 2)}


# --- first load, half, zero, verify, rollback --------------------------------------------------


def others_data(data_root: str, rows: int, seed: int) -> str:
    """snap-001, snap-002 (half the rows updated), snap-003 (snap-002's rows, rewritten)."""
    out = os.path.join(data_root, f"n{rows}-s{seed}", "others")
    meta = generate(out, rows, seed, HALF, snapshots=2,
                    base_cache=os.path.join(data_root, f"n{rows}-s{seed}", "base"))
    if not os.path.isdir(os.path.join(out, "snap-003")):
        info = generate_next(os.path.join(out, "snap-002"), os.path.join(out, "snap-003"),
                             os.path.join(out, "truth-003.parquet"), ZERO, seed, 3,
                             meta["snapshots"][-1]["next_id"])
        meta["snapshots"].append(info)
        with open(os.path.join(out, "truth.json"), "w") as handle:
            json.dump(meta, handle, indent=2)
    return out


def cmd_others(args: argparse.Namespace) -> dict[str, Any]:
    data = others_data(args.data, args.rows, args.seed)
    doc: dict[str, Any] = {"meta": machine_info(), "rows": args.rows, "repeat": args.repeat,
                           "half_rates": asdict(HALF), "rollback_to": 1, "sequences": []}
    steps = ["first_load", "half", "zero", "verify_state", "rollback"]
    for n in range(args.repeat):
        work = _fresh(os.path.join(args.work, f"others-{args.rows}"))
        logs = os.path.join(work, "logs")
        sequence: dict[str, Any] = {}
        for index, step in enumerate(steps[:3], start=1):
            name = f"snap-{index:03d}"
            _link(os.path.join(data, name), os.path.join(work, "source"), name)
            record = diffcdc_run(table_args(work, None), os.path.join(logs, step), args.timeout,
                                 f"the {step} run")
            sequence[step] = _check(record, expected_counts(data, index))
            _line(step, record)
        record = _ok(process(cli("verify", "--state", os.path.join(work, "state"), "--table",
                                 TABLE), os.path.join(logs, "verify"), args.timeout),
                     "verify --state")
        sequence["verify_state"] = record
        _line("verify --state", record)
        record = diffcdc_run([*table_args(work, None), "--to-version", "1", "--yes"],
                             os.path.join(logs, "rollback"), args.timeout, "the rollback",
                             command="rollback")
        want = expected_counts(data, 2)  # snapshot 2's changes, undone
        sequence["rollback"] = _check(record, {"inserted": want["deleted"],
                                               "updated": want["updated"],
                                               "deleted": want["inserted"]})
        _line("rollback --to-version 1", record)
        doc["sequences"].append(sequence)
        save(doc, args.out)
    doc["median_seconds"] = {s: _median([q[s]["seconds"] for q in doc["sequences"]])
                             for s in steps}
    doc["median_table_seconds"] = {
        s: _median([q[s]["table_seconds"] for q in doc["sequences"]])
        for s in steps if s != "verify_state"}
    doc["all_match_truth"] = all(q[s]["matches_truth"] for q in doc["sequences"]
                                 for s in steps if s != "verify_state")
    doc["summary"] = [f"{s:<13} {v:8.2f} s (whole process, median of {args.repeat})"
                      for s, v in doc["median_seconds"].items()]
    return doc


# --- many small tables against one large one ---------------------------------------------------


def _many_config(folder: str, tables: int, event_dir: str | None) -> str:
    lines = ['[diffcdc]', 'state = "state"', 'landing = "landing"', ""]
    if event_dir:
        lines += ["[spark]", 'conf = { "spark.eventLog.enabled" = "true", '
                  f'"spark.eventLog.dir" = "{event_dir}", "spark.eventLog.compress" = "false" }}',
                  ""]
    for t in range(tables):
        lines += [f"[tables.t{t:03d}]", f'source = "source/t{t:03d}"', 'keys = ["id"]', ""]
    path = os.path.join(folder, "diffcdc.toml")
    with open(path, "w") as handle:
        handle.write("\n".join(lines))
    return path


def jobs_per_pool(event_dir: str) -> Counter[str]:
    """Spark jobs per scheduler pool (diffcdc gives each table its own) in an event log."""
    from .floor import _event_lines

    jobs: Counter[str] = Counter()
    for line in _event_lines(event_dir):
        event = json.loads(line)
        if event["Event"] == "SparkListenerJobStart":
            jobs[(event.get("Properties") or {}).get("spark.scheduler.pool") or "(none)"] += 1
    return jobs


def cmd_many(args: argparse.Namespace) -> dict[str, Any]:
    total = args.rows * args.tables
    small = os.path.join(args.data, f"many-n{args.rows}")  # benchmarks.many_tables' files
    large = os.path.join(args.data, f"many-n{total}")
    generate(small, args.rows, rates=Rates())
    generate(large, total, rates=Rates())
    work = _fresh(os.path.join(args.work, f"many-{args.tables}x{args.rows}"))
    variants = {"many": (small, args.tables), "one": (large, 1)}
    doc: dict[str, Any] = {"meta": machine_info(), "tables": args.tables,
                           "rows_per_table": args.rows, "rounds": args.rounds, "setup": {},
                           "seconds": {k: [] for k in variants}, "runs": {k: [] for k in variants}}

    def prepared(variant: str, event_dir: str | None = None) -> str:
        folder = os.path.join(work, "round")
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(os.path.join(work, variant), folder, symlinks=True)
        data, tables = variants[variant]
        for t in range(tables):
            _link(os.path.join(data, "snap-002"), os.path.join(folder, "source", f"t{t:03d}"),
                  "snap-002")
        return _many_config(folder, tables, event_dir)

    for variant, (data, tables) in variants.items():  # first loads, untimed: the base copies
        base = os.path.join(work, "round")  # where every round runs (the state records it)
        for t in range(tables):
            _link(os.path.join(data, "snap-001"), os.path.join(base, "source", f"t{t:03d}"),
                  "snap-001")
        record = diffcdc_run(["--config", _many_config(base, tables, None)],
                             os.path.join(work, "logs", f"{variant}-first-load"), args.timeout)
        os.rename(base, os.path.join(work, variant))
        doc["setup"][variant] = record
        _line(f"{variant}: first load (setup)", record)
    for n in range(args.rounds):
        for variant in (["many", "one"] if n % 2 == 0 else ["one", "many"]):
            record = diffcdc_run(["--config", prepared(variant)],
                                 os.path.join(work, "logs", f"round{n}-{variant}"), args.timeout)
            data, tables = variants[variant]
            _check(record, {k: v * tables for k, v in expected_counts(data, 2).items()})
            record["round"] = n
            doc["runs"][variant].append(record)
            doc["seconds"][variant].append(record["seconds"])
            _line(f"round {n + 1}: {variant}", record)
        save(doc, args.out)
    jobs: dict[str, Any] = {}
    for variant, (_, tables) in variants.items():  # one more, untimed, with the event log
        events = _fresh(os.path.join(work, "events", variant))
        diffcdc_run(["--config", prepared(variant, events)],
                    os.path.join(work, "logs", f"jobs-{variant}"), args.timeout)
        per_pool = jobs_per_pool(events)
        per_table = [per_pool.get(f"diffcdc-t{t:03d}", 0) for t in range(tables)]
        jobs[variant] = {"per_table_median": statistics.median(per_table),
                         "per_table_min": min(per_table), "per_table_max": max(per_table),
                         "total": sum(per_pool.values()), "by_pool": dict(per_pool)}
    shutil.rmtree(os.path.join(work, "round"), ignore_errors=True)
    many, one = _median(doc["seconds"]["many"]), _median(doc["seconds"]["one"])
    doc.update(
        median_seconds={"many": many, "one": one},
        many_x_one=round(many / one, 2),
        spark_jobs=jobs,
        goal={"many_x_one_at_most": GOAL_MANY_X_ONE, "met": many / one <= GOAL_MANY_X_ONE},
        summary=[f"{args.tables} x {args.rows:,} rows: {many} s, one table of {total:,} rows: "
                 f"{one} s (whole processes, median of {args.rounds}): {round(many / one, 2)}x "
                 f"(goal <= {GOAL_MANY_X_ONE:g}); Spark jobs per small table "
                 f"{jobs['many']['per_table_median']} (min {jobs['many']['per_table_min']}, max "
                 f"{jobs['many']['per_table_max']}), the one table {jobs['one']['total']}"],
    )
    return doc


# --- command line ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--seed", type=int, default=42)
    common.add_argument("--timeout", type=float, default=7200, help="seconds per process")
    common.add_argument("--data", default=os.path.join(HERE, "data"))
    common.add_argument("--work", default=os.path.join(HERE, "work", "state-growth"))
    common.add_argument("--out", default=None, help="result JSON (default benchmarks/results/...)")
    p = sub.add_parser("bytes", parents=[common], help="state bytes after N versions")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--versions", type=int, default=7)
    p.add_argument("--change", type=float, default=0.02, help="fraction of rows changed per version")
    p.add_argument("--keep-versions", type=int, default=7)
    p = sub.add_parser("steady", parents=[common], help="whole steady run against the floor")
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--modes", default="cold,warm", help="cold (whole processes), warm (one JVM)")
    p = sub.add_parser("others", parents=[common], help="first load, half, zero, verify, rollback")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=1, help="whole sequences, from scratch")
    p = sub.add_parser("many", parents=[common], help="many small tables against one large")
    p.add_argument("--tables", type=int, default=60)
    p.add_argument("--rows", type=int, default=20_000, help="rows per small table")
    p.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.command == "steady" and set(args.modes.split(",")) - {"cold", "warm", ""}:
        parser.error("--modes: cold, warm or cold,warm")
    names = {"bytes": f"state-bytes-{args.rows}", "steady": f"steady-vs-floor-{args.rows}",
             "others": f"others-{args.rows}",
             "many": f"many-tables-whole-{getattr(args, 'tables', 0)}x{args.rows}"}
    args.out = args.out or os.path.join(HERE, "results", names[args.command] + ".json")
    run = {"bytes": cmd_bytes, "steady": cmd_steady, "others": cmd_others, "many": cmd_many}
    doc = run[args.command](args)
    print_and_save(doc, args.out, indent=1)
    print("\n".join(doc.get("summary", [])))
    print("results:", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
