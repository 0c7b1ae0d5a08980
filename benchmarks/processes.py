"""Whole ``diffcdc`` processes, timed: the runner shared by ``benchmarks.goals`` and
``benchmarks.state_growth``.

A figure is a whole process, ``python -m diffcdc.cli ...`` started fresh (its own JVM), timed
from spawn to exit, with the peak RSS and PSS of its process tree (:mod:`benchmarks.measure`)
and the steps of its run log; the next process starts only once the last one's tree is gone.

``Runner(inline=True)`` runs the same commands in this process instead, on its active Spark
session (``diffcdc.cli.main`` and the floor job): what the smoke tests use, so that the suite's
code runs in seconds; its times mean nothing.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import os
import pstats
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from typing import Any

from .measure import PeakSampler
from .report import REPO


def _env() -> dict[str, str]:
    """This checkout's diffcdc and benchmarks first on the path."""
    path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path)


class Runner:
    """Runs ``python -m MODULE ...`` commands as whole processes (or inline, see the module)."""

    def __init__(self, timeout: float = 7200.0, inline: bool = False) -> None:
        self.timeout = timeout
        self.inline = inline

    def python(self, args: list[str], log: str, what: str,
               profile: str | None = None) -> dict[str, Any]:
        """Run ``python args...``: wall seconds, peak RSS/PSS of its tree, exit code, its
        stdout (parsed as JSON when it is); stdout and stderr kept in ``log``.{out,err}. With
        ``profile``, the command runs under cProfile, its statistics written there. A command
        that fails stops the benchmark (SystemExit naming ``what``)."""
        os.makedirs(os.path.dirname(log), exist_ok=True)
        if self.inline:
            record = self._inline(args, log, profile)
        else:
            if profile:
                args = ["-m", "cProfile", "-o", profile, *args]
            record = self._process(args, log)
        if record["exit_code"] != 0:
            raise SystemExit(f"{what} failed (exit {record['exit_code']}):\n"
                             f"{record.get('stderr_tail', '')}{record['output']}")
        return record

    def _process(self, args: list[str], log: str) -> dict[str, Any]:
        with open(log + ".out", "wb") as out, open(log + ".err", "wb") as err:
            load = os.getloadavg()[0]
            started = time.perf_counter()
            proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env=_env(), stdout=out,
                                    stderr=err, start_new_session=True)
            with PeakSampler(proc.pid) as sampler:
                try:
                    code = proc.wait(self.timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    code = proc.wait()
            seconds = time.perf_counter() - started
        _wait_gone(proc.pid)  # its JVM may outlive it by a moment: not into the next measurement
        record: dict[str, Any] = {"seconds": round(seconds, 3), "peak_rss_bytes": sampler.peak,
                                  "peak_pss_bytes": sampler.peak_pss, "exit_code": code,
                                  "load_average_1m": round(load, 2)}
        return _outputs(record, log)

    def _inline(self, args: list[str], log: str, profile: str | None) -> dict[str, Any]:
        out, err = io.StringIO(), io.StringIO()
        profiler = cProfile.Profile() if profile else None
        started = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if profiler:
                profiler.enable()
            try:
                code = _inline_command(args)
            finally:
                if profiler:
                    profiler.disable()
        seconds = time.perf_counter() - started
        if profiler and profile:
            profiler.dump_stats(profile)
        with open(log + ".out", "w", encoding="utf-8") as handle:
            handle.write(out.getvalue())
        with open(log + ".err", "w", encoding="utf-8") as handle:
            handle.write(err.getvalue())
        record: dict[str, Any] = {"seconds": round(seconds, 3), "peak_rss_bytes": 0,
                                  "peak_pss_bytes": 0, "exit_code": code,
                                  "load_average_1m": round(os.getloadavg()[0], 2)}
        return _outputs(record, log)


def _inline_command(args: list[str]) -> int:
    """``-m diffcdc.cli ...`` or ``-m benchmarks.floor --cold SNAPSHOT``, in this process."""
    if args[:2] == ["-m", "diffcdc.cli"]:
        from diffcdc.cli.main import main

        return main(args[2:])
    if args[:3] == ["-m", "benchmarks.floor", "--cold"]:
        from pyspark.sql import SparkSession

        from .sparkjobs import floor_probes

        spark = SparkSession.getActiveSession()
        assert spark is not None, "an inline floor job runs on this process's Spark session"
        started = time.perf_counter()
        floor_probes(spark, args[3])["spark_scan_hash_shuffle"]()
        print(json.dumps({"session_seconds": 0.0, "stop_seconds": 0.0,
                          "job_seconds": round(time.perf_counter() - started, 3)}))
        return 0
    raise ValueError(f"no inline form of: python {' '.join(args)}")


def _outputs(record: dict[str, Any], log: str) -> dict[str, Any]:
    with open(log + ".out", encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    for candidate in (text, text.strip().rsplit("\n", 1)[-1]):  # a JSON document, or line
        try:
            record["output"] = json.loads(candidate)
            break
        except ValueError:
            record["output"] = text[-2000:]
    if record["exit_code"] != 0:
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


def cli(*args: str) -> list[str]:
    return ["-m", "diffcdc.cli", *args]


def diffcdc_run(runner: Runner, args: list[str], log: str, what: str = "diffcdc run",
                command: str = "run", profile: str | None = None) -> dict[str, Any]:
    """One ``diffcdc <command> ... --json``; its report's counts, table seconds and the step
    seconds from its run log (summed over its tables) beside the process figures."""
    record = runner.python(cli(command, *args, "--json"), log, what, profile)
    report = record.pop("output")
    tables = report.get("tables", []) if isinstance(report, dict) else []
    snaps = [s for t in tables for s in t.get("snapshots", [])]
    record["table_seconds"] = round(sum(t.get("seconds") or 0 for t in tables), 3)
    record["counts"] = {k: sum(s.get(k) or 0 for s in snaps)
                        for k in ("rows", "inserted", "updated", "deleted")}
    record["versions"] = [s.get("version") for s in snaps]
    if isinstance(report, dict) and report.get("log"):
        record["log"] = report["log"]
        record["phases"] = run_log_phases(report["log"])
    return record


_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO \S+ ([^:]+): (.*)$")


def run_log_steps(path: str) -> dict[str, dict[str, float]]:
    """Seconds per step of each table of a run, from its run log: ``plan`` (from listing the
    waiting snapshots), then per snapshot ``read``, ``fingerprint and diff``, ``quality gate``,
    ``stage``, ``commit version``, ``publish`` (whatever the log names); a step lasts until
    the same table's next line (tables run side by side). Lines without a step (a rollback's
    notice) end the step before. ``{table: {step: seconds}}``."""
    lines: dict[str, list[tuple[float, str]]] = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                match = _LINE.match(line)
                if not match:
                    continue
                stamp = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
                text = match.group(4)
                if re.match(r"\d+ snapshot\(s\) waiting", text):
                    name = "plan"
                else:  # "<snapshot>: <step> ..."; the last line "<snapshot>: +1 ~2 -3 (...)"
                    _, _, step = text.partition(": ")
                    found = re.match(r"[a-z][a-z ]*[a-z]", step)
                    name = found.group(0) if found else ""
                lines.setdefault(match.group(3), []).append(
                    (stamp + int(match.group(2)) / 1000, name))
    except OSError:
        return {}
    out = {}
    for table, steps in lines.items():
        phases: Counter[str] = Counter()
        for (at, name), (after, _) in zip(steps, steps[1:]):
            if name:
                phases[name] += after - at
        out[table] = {k: round(v, 3) for k, v in phases.items()}
    return out


def run_log_phases(path: str) -> dict[str, float]:
    """Seconds per step of a run from its run log (:func:`run_log_steps`), summed over its
    tables (tables that run side by side count each)."""
    total: Counter[str] = Counter()
    for steps in run_log_steps(path).values():
        total.update(steps)
    return {k: round(v, 3) for k, v in total.items()}


def profiled_seconds(path: str, modules: tuple[str, ...], names: tuple[str, ...]
                     ) -> dict[str, dict[str, float]]:
    """From a cProfile file: per function of ``modules`` (path fragments) whose name is one of
    ``names``, its calls and cumulative seconds (``module:function``)."""
    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    out: dict[str, dict[str, float]] = {}
    for (file, _, function), (_, calls, _, cumulative, _) in stats.items():
        if function in names and any(m in file.replace(os.sep, "/") for m in modules):
            key = f"{os.path.basename(file)}:{function}"
            entry = out.setdefault(key, {"calls": 0, "seconds": 0.0})
            entry["calls"] += calls
            entry["seconds"] = round(entry["seconds"] + cumulative, 3)
    return dict(sorted(out.items()))


def expected_counts(data: str, index: int) -> dict[str, int]:
    """The generator's ground truth for snapshot ``index`` of ``data`` (1: the first load)."""
    with open(os.path.join(data, "truth.json")) as handle:
        snaps = json.load(handle)["snapshots"]
    if index == 1:
        return {"inserted": snaps[0]["rows"], "updated": 0, "deleted": 0}
    want = snaps[index - 1]["expected"]
    return {"inserted": want["insert"], "updated": want["update"], "deleted": want["delete"]}


def check(record: dict[str, Any], want: dict[str, int]) -> dict[str, Any]:
    """Record whether the run's changes are the generator's truth; a difference is printed."""
    got = {k: record["counts"][k] for k in want}
    record["matches_truth"] = got == want
    if got != want:
        print(f"  WARNING: changes {got} differ from the generator's truth {want}")
    return record


def link(snapshot: str, source: str, name: str) -> None:
    """The snapshot folder as entry ``name`` of a source folder: a symlink, so its files'
    identity (inode, ctime) never changes (a hard link would touch their ctime)."""
    os.makedirs(source, exist_ok=True)
    os.symlink(snapshot, os.path.join(source, name))


def fresh(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def line(what: str, record: dict[str, Any]) -> None:
    phases = " ".join(f"{k} {v:.1f}" for k, v in (record.get("phases") or {}).items())
    print(f"  {what:<28} {record['seconds']:8.2f} s  peak {record['peak_rss_bytes'] / 2**30:.2f} GiB"
          f"  {record.get('counts', '')}  {phases}", flush=True)
