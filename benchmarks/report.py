"""Results JSON -> Markdown table (the one pasted into benchmarks/README.md).

python -m benchmarks.report benchmarks/results/run-....json
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ORDER = ["diffcdc", "duckdb", "delta", "exceptall"]


def git_commit() -> str:
    """Short HEAD commit, with ``+dirty`` when tracked files under ``diffcdc/`` are modified."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], check=False, cwd=REPO, capture_output=True, text=True
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    return head + (
        "+dirty" if git("status", "--porcelain", "--untracked-files=no", "diffcdc") else ""
    )


def machine_info() -> dict[str, Any]:
    mem = 0
    try:
        with open("/proc/meminfo") as handle:
            mem = int(handle.readline().split()[1]) * 1024
    except OSError:
        pass
    versions = {}
    for name in ("pyspark", "duckdb", "deltalake", "pyarrow", "numpy"):
        try:
            versions[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001
            versions[name] = None
    commit = git_commit()
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cpus": os.cpu_count(),
        "memory_bytes": mem,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "git_commit": commit,
        # the last commit that changed the engine (diffcdc/): what the figures are about
        "engine_commit": subprocess.run(
            ["git", "log", "-1", "--format=%h", "--", "diffcdc"], check=False, cwd=REPO,
            capture_output=True, text=True).stdout.strip(),
        "command": " ".join([f"python -m {_main_module()}", *sys.argv[1:]]),
    }


def _main_module() -> str:
    """The ``-m`` module this process runs (benchmarks.cluster runs benchmarks.run's matrix)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name if spec is not None else "benchmarks.run"


def save(results: dict[str, Any], path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        json.dump(results, handle, indent=1, default=str)
    os.replace(path + ".tmp", path)


def finish(document: dict[str, Any], out: str) -> int:
    """The end of a suite command: the result document printed and written to ``out``, its
    summary lines and where it went; the command's exit code."""
    print_and_save(document, out, indent=1)
    print("\n".join(document.get("summary", [])))
    print("results:", out)
    return 0


def print_and_save(document: dict[str, Any], out: str | None, indent: int = 2) -> None:
    """Print a result document as JSON and, with ``out``, write it there too."""
    text = json.dumps(document, indent=indent)
    print(text)
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")


def _engine_order(name: str) -> int:
    return ORDER.index(name) if name in ORDER else len(ORDER)


def _state(r: dict[str, Any]) -> str:
    """Bytes of state per row; for diffcdc also the newest version alone (older ones are kept
    for rollback)."""
    text = f"{r['state_bytes'] / max(r['rows'], 1):.1f}"
    latest = (r.get("notes") or {}).get("state_latest_bytes")
    return text + (f" ({latest / max(r['rows'], 1):.1f} latest)" if latest else "")


def markdown(results: dict[str, Any]) -> str:
    """One row per (rows, scenario, engine), time ratios against DuckDB from the same run."""
    meta = results.get("meta", {})
    lines = [
        f"Command: `{meta.get('command', '?')}`  ",
        (
            f"Machine: {meta.get('cpus')} CPUs, {meta.get('memory_bytes', 0) / 2**30:.0f} GiB RAM; "
            f"isolation: {meta.get('isolate')}; Spark conf: {meta.get('spark_conf')}; "
            f"commit {meta.get('git_commit')}; {meta.get('date')}"
        ),
        "",
        (
            "| rows | scenario | engine | time s | × DuckDB | JVM start s | setup s | peak RSS GiB "
            "| state B/row | output MiB | changes (ins/upd/del) | matches truth |"
        ),
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    order = {s: i for i, s in enumerate(meta.get("scenarios", []))}
    runs = sorted(
        results.get("runs", []),
        key=lambda r: (r["rows"], order.get(r["scenario"], 99), _engine_order(r["engine"])),
    )
    duck = {
        (r["rows"], r["scenario"]): r["seconds"]
        for r in runs
        if r["engine"] == "duckdb" and r["status"] == "ok"
    }
    for r in runs:
        head = f"| {r['rows']:,} | {r['scenario']} | {r['engine']} "
        if r["status"] != "ok":
            lines.append(head + f"| {r['status']} | | | | | | | | {str(r.get('error', ''))[:80]} |")
            continue
        base = duck.get((r["rows"], r["scenario"]))
        ratio = f"{r['seconds'] / base:.2f}" if base else ""
        jvm = f"{r['jvm_startup_seconds']:.1f}" if "jvm_startup_seconds" in r else ""
        ch = r["changes"]
        lines.append(
            head + f"| {r['seconds']:.2f} | {ratio} | {jvm} | {r.get('setup_seconds', 0):.1f} "
            f"| {r['peak_rss_bytes'] / 2**30:.2f} | {_state(r)} "
            f"| {r['output_bytes'] / 2**20:.1f} | {ch.get('insert', 0):,}/{ch.get('update', 0):,}/"
            f"{ch.get('delete', 0):,} | {'yes' if r['matches_truth'] else 'NO'} |"
        )
    agree = results.get("agreement", [])
    if agree:
        lines += [
            "",
            "| rows | scenario | expected (ins/upd/del) | engines agree | all match truth |",
            "|---:|---|---|---|---|",
        ]
        for a in agree:
            e = a["expected"]
            lines.append(
                f"| {a['rows']:,} | {a['scenario']} | {e['insert']:,}/{e['update']:,}/"
                f"{e['delete']:,} | {a['engines_agree']} ({', '.join(a['compared'])}) "
                f"| {a['all_match_truth']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a results JSON of benchmarks.run")
    args = parser.parse_args(argv)
    with open(args.results) as handle:
        print(markdown(json.load(handle)))


if __name__ == "__main__":
    main()
