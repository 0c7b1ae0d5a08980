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

``others``: what must not get slower, one whole process each in this order: the first load, a
snapshot with half its rows updated, a snapshot with no change, ``diffcdc verify --state``, and
``diffcdc rollback --to-version 1`` (diffs snapshot 1 against the head state: half the rows
change back). Run it on the commit before and after a change for a before/after table::

    python -m benchmarks.state_growth others --rows 1000000 [--repeat 1]

Results go to ``benchmarks/results/``: ``state-bytes-<rows>.json`` and ``others-<rows>.json``,
unless ``--out`` says
otherwise. A state records the landing root it published to, so every repeated run happens in
the very folder of the run that made its starting state, put back from a copy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from dataclasses import asdict
from typing import Any

from .generate import Rates, generate, generate_next
from .processes import Runner, check, cli, diffcdc_run, expected_counts, fresh, line, link, median
from .report import finish, machine_info, save

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = "bench"
#: The issue's goals, written beside the figures they are about.
GOAL_BYTES_PER_ROW = 16.0
HALF = Rates(updates=0.5, deletes=0.0, inserts=0.0, key_changes=0.0)
ZERO = Rates(updates=0.0, deletes=0.0, inserts=0.0, key_changes=0.0)


def change_rates(change: float) -> Rates:
    """``change`` of the rows touched: half updated, a quarter deleted, a quarter inserted (the
    steady scenario's mix; its key changes are a delete plus an insert to the state)."""
    return Rates(updates=change / 2, deletes=change / 4, inserts=change / 4, key_changes=0.0)


def table_args(folder: str, keep_versions: int | None) -> list[str]:
    """``diffcdc run`` options of the one benchmark table whose folders are under ``folder``."""
    args = ["--source", os.path.join(folder, "source"), "--keys", "id", "--table", TABLE,
            "--landing", os.path.join(folder, "landing"), "--state", os.path.join(folder, "state")]
    return args + (["--keep-versions", str(keep_versions)] if keep_versions else [])


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


def cmd_bytes(args: argparse.Namespace, runner: Runner) -> dict[str, Any]:
    rates = change_rates(args.change)
    data = os.path.join(args.data, f"n{args.rows}-s{args.seed}", f"growth-c{args.change:g}-v{args.versions}")
    print(f"data: {data}", flush=True)
    generate(data, args.rows, args.seed, rates, snapshots=args.versions,
             base_cache=os.path.join(args.data, f"n{args.rows}-s{args.seed}", "base"))
    work = fresh(os.path.join(args.work, f"bytes-{args.rows}"))
    table_dir = os.path.join(work, "state", TABLE)
    doc: dict[str, Any] = {"meta": machine_info(), "rows": args.rows, "versions": args.versions,
                           "change": args.change, "rates": asdict(rates), "keep_versions": args.keep_versions, "runs": []}
    for index in range(1, args.versions + 1):
        name = f"snap-{index:03d}"
        link(os.path.join(data, name), os.path.join(work, "source"), name)
        record = diffcdc_run(runner, table_args(work, args.keep_versions),
                             os.path.join(work, "logs", name))
        check(record, expected_counts(data, index))
        after = footprint(table_dir)
        record.update(snapshot=name, state_bytes_after=after["state_bytes"],
                      log_bytes_after=after["log_bytes"])
        doc["runs"].append(record)
        line(f"{name} (state {after['state_bytes'] / 2**20:.1f} MiB)", record)
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


def cmd_others(args: argparse.Namespace, runner: Runner) -> dict[str, Any]:
    data = others_data(args.data, args.rows, args.seed)
    doc: dict[str, Any] = {"meta": machine_info(), "rows": args.rows, "repeat": args.repeat,
                           "half_rates": asdict(HALF), "rollback_to": 1, "sequences": []}
    steps = ["first_load", "half", "zero", "verify_state", "rollback"]
    for n in range(args.repeat):
        work = fresh(os.path.join(args.work, f"others-{args.rows}"))
        logs = os.path.join(work, "logs")
        sequence: dict[str, Any] = {}
        for index, step in enumerate(steps[:3], start=1):
            name = f"snap-{index:03d}"
            link(os.path.join(data, name), os.path.join(work, "source"), name)
            record = diffcdc_run(runner, table_args(work, None), os.path.join(logs, step),
                                 f"the {step} run")
            sequence[step] = check(record, expected_counts(data, index))
            line(step, record)
        record = runner.python(cli("verify", "--state", os.path.join(work, "state"), "--table",
                                   TABLE), os.path.join(logs, "verify"), "verify --state")
        sequence["verify_state"] = record
        line("verify --state", record)
        record = diffcdc_run(runner, [*table_args(work, None), "--to-version", "1", "--yes"],
                             os.path.join(logs, "rollback"), "the rollback",
                             command="rollback")
        want = expected_counts(data, 2)  # snapshot 2's changes, undone
        sequence["rollback"] = check(record, {"inserted": want["deleted"],
                                               "updated": want["updated"],
                                               "deleted": want["inserted"]})
        line("rollback --to-version 1", record)
        doc["sequences"].append(sequence)
        save(doc, args.out)
    doc["median_seconds"] = {s: median([q[s]["seconds"] for q in doc["sequences"]])
                             for s in steps}
    doc["median_table_seconds"] = {
        s: median([q[s]["table_seconds"] for q in doc["sequences"]])
        for s in steps if s != "verify_state"}
    doc["all_match_truth"] = all(q[s]["matches_truth"] for q in doc["sequences"]
                                 for s in steps if s != "verify_state")
    doc["summary"] = [f"{s:<13} {v:8.2f} s (whole process, median of {args.repeat})"
                      for s, v in doc["median_seconds"].items()]
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
    common.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)  # smoke tests
    p = sub.add_parser("bytes", parents=[common], help="state bytes after N versions")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--versions", type=int, default=7)
    p.add_argument("--change", type=float, default=0.02, help="fraction of rows changed per version")
    p.add_argument("--keep-versions", type=int, default=7)
    p = sub.add_parser("others", parents=[common], help="first load, half, zero, verify, rollback")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=1, help="whole sequences, from scratch")
    args = parser.parse_args(argv)
    names = {"bytes": f"state-bytes-{args.rows}", "others": f"others-{args.rows}"}
    args.out = args.out or os.path.join(HERE, "results", names[args.command] + ".json")
    runner = Runner(args.timeout, inline=args.inline)
    return finish({"bytes": cmd_bytes, "others": cmd_others}[args.command](args, runner), args.out)


if __name__ == "__main__":
    sys.exit(main())
