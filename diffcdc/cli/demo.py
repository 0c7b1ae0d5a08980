"""``diffcdc demo``: three nightly snapshots of a small legacy HR database, end to end.

Generates employees (single key) and departments (composite key) as Parquet snapshots for
three days, with inserts, updates, deletes, a changed key and NULL swaps; runs the engine
after each "night" on the embedded default (local Spark, local state and landing folders);
replays the landing files and checks they give the last snapshot.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from diffcdc.config import RunConfig, TableConfig
from diffcdc.errors import UsageError
from diffcdc.state.store import TableState

DAYS = ["2026-11-19", "2026-11-20", "2026-11-21"]
EMPLOYEES = "DemoEmployees"
DEPARTMENTS = "DemoDepartments"

_EMP_SCHEMA = pa.schema([
    ("EmployeeID", pa.string()),
    ("Name", pa.string()),
    ("Department", pa.string()),
    ("Location", pa.string()),
    ("Email", pa.string()),
    ("Salary", pa.decimal128(12, 2)),
    ("HireDate", pa.date32()),
    ("Active", pa.bool_()),
    ("ExtractedAt", pa.timestamp("us", tz="UTC")),
])
_DEPT_SCHEMA = pa.schema([
    ("Company", pa.string()),
    ("DeptCode", pa.string()),
    ("DeptName", pa.string()),
    ("Budget", pa.float64()),
    ("Manager", pa.string()),
])


def _employees(day: int) -> list[dict[str, Any]]:
    names = ["Ada", "Brook", "Chen", "Dana", "Eli", "Farah", "Gus", "Hana", "Ivo", "Jun"]
    cities = ["Bellevue", "Redmond", "Seattle", None]
    rows = []
    for i, name in enumerate(names, start=1):
        rows.append({
            "EmployeeID": f"E{i:04d}",
            "Name": f"{name} {chr(64 + i)}.",
            "Department": ["ENG", "OPS", "FIN"][i % 3],
            "Location": cities[i % 4],
            "Email": None if i % 4 == 0 else f"{name.lower()}@example.com",
            "Salary": Decimal(50000 + 2500 * i) / 1,
            "HireDate": dt.date(2015 + i % 8, 1 + i % 12, 1 + i % 27),
            "Active": True,
            "ExtractedAt": None,
        })
    if day >= 1:  # night 2: a raise, a transfer, a leaver, a hire, a NULL swap
        rows[1]["Salary"] = Decimal("60000.00")
        rows[2]["Department"] = "OPS"
        del rows[8]  # E0009 leaves
        rows.append({**rows[0], "EmployeeID": "E0011", "Name": "Kai K.", "Email": "kai@example.com"})
        rows[3]["Location"], rows[3]["Email"] = rows[3]["Email"], rows[3]["Location"]
    if day >= 2:  # night 3: a key change (E0005 re-keyed), a deactivation, empty vs NULL
        rows[4]["EmployeeID"] = "E1005"
        rows[5]["Active"] = False
        rows[6]["Email"] = ""
    stamp = dt.datetime(2026, 11, 19 + day, 2, 0, tzinfo=dt.timezone.utc)
    for row in rows:
        row["ExtractedAt"] = stamp  # audit column: changes every night, excluded
        row["Salary"] = Decimal(row["Salary"]).quantize(Decimal("0.01"))
    return rows


def _departments(day: int) -> list[dict[str, Any]]:
    rows = [
        {"Company": "C1", "DeptCode": "ENG", "DeptName": "Engineering", "Budget": 1.5e6, "Manager": "E0001"},
        {"Company": "C1", "DeptCode": "OPS", "DeptName": "Operations", "Budget": 4.0e5, "Manager": None},
        {"Company": "C2", "DeptCode": "ENG", "DeptName": "Engineering", "Budget": 9.0e5, "Manager": "E0004"},
        {"Company": "C2", "DeptCode": "FIN", "DeptName": "Finance", "Budget": None, "Manager": "E0006"},
    ]
    if day >= 1:
        rows[1]["Manager"] = "E0002"
        rows.append({"Company": "C1", "DeptCode": "FIN", "DeptName": "Finance", "Budget": 2.0e5, "Manager": None})
    if day >= 2:
        del rows[2]
        rows[0]["Budget"] = 1.6e6
    return rows


#: What the demo makes in its folder (--dir): its folders, and in them, its tables' folders.
_OWN = {"snapshots": {"employees", "departments"}, "landing": {EMPLOYEES, DEPARTMENTS}}


def _writable(folder: str, option: str) -> None:
    """Refuse a folder the demo cannot write (a read-only disk, no permission) in one line."""
    try:
        os.makedirs(folder, exist_ok=True)
        problem = None if os.access(folder, os.W_OK | os.X_OK) else "it is not writable"
    except OSError as exc:
        problem = exc.strerror or str(exc)
    if problem is not None:
        raise UsageError(f"demo: cannot write {option} {os.path.abspath(folder)}: {problem}",
                         hint="give the demo folders it can write: --dir and --state")


def _refuse_foreign(base: str) -> None:
    """Refuse a ``base`` that holds anything the demo did not make: a --dir given by mistake
    (``.``, a project, a real landing zone) is never deleted."""
    if not os.path.isdir(base):
        return  # none yet (or a file: not writable as a folder, said next)
    foreign = []
    for name in os.listdir(base):
        inner = os.path.join(base, name)
        if name not in _OWN or not os.path.isdir(inner):
            foreign.append(inner)
        else:
            foreign += [os.path.join(inner, n) for n in os.listdir(inner) if n not in _OWN[name]]
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise UsageError(f"demo: --dir {base} holds {sorted(foreign)[0]}{more}, which the demo "
                         "did not make (it deletes its folder's earlier demo data; nothing was "
                         "deleted)", hint="give --dir a new or empty folder")


def _clear(base: str) -> None:
    """Delete what an earlier demo made in ``base`` (after :func:`_refuse_foreign`)."""
    for name in _OWN:
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def _write(rows: list[dict[str, Any]], schema: pa.Schema, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(args.dir, args.state, as_json=args.json, debug=args.debug)


def run_demo(base: str, state_root: str, as_json: bool = False, debug: bool = False) -> int:
    """Generate the data, run three nights, verify; returns an exit status."""
    from diffcdc.cli.summary import format_summary
    from diffcdc.engine.run import run_many
    from diffcdc.engine.verify import verify_table
    from diffcdc.runlog import logged_spark

    base = os.path.abspath(base)
    sources = os.path.join(base, "snapshots")
    landing = os.path.join(base, "landing")
    # The demo is repeatable: it starts over with its own tables only (a folder holding
    # anything else is refused), in folders it can write: both said before Spark starts.
    _refuse_foreign(base)
    for folder, option in ((base, "--dir"), (state_root, "--state")):
        _writable(folder, option)
    _clear(base)
    for name in (EMPLOYEES, DEPARTMENTS):
        shutil.rmtree(TableState(state_root, name).dir, ignore_errors=True)
    tables = [
        TableConfig(name=EMPLOYEES, source=os.path.join(sources, "employees"), keys=["EmployeeID"],
                    exclude=["ExtractedAt"], landing=landing),
        TableConfig(name=DEPARTMENTS, source=os.path.join(sources, "departments"),
                    keys=["Company", "DeptCode"], landing=landing),
    ]
    config = RunConfig(state=state_root, tables=tables)
    spark, _ = logged_spark(state_root, debug)  # Spark's console output: state/_logs/
    out = sys.stdout
    results: dict[str, Any] = {"nights": []}
    for day, date in enumerate(DAYS):
        _write(_employees(day), _EMP_SCHEMA, os.path.join(sources, "employees", f"{date}.parquet"))
        _write(_departments(day), _DEPT_SCHEMA, os.path.join(sources, "departments", f"{date}.parquet"))
        if not as_json:
            print(f"\n== night of {date}: new snapshots arrived; diffcdc run", file=out)
        reports = run_many(spark, config)
        results["nights"].append([r.to_dict() for r in reports])
        if not as_json:
            print(format_summary([r.to_dict() for r in reports]), file=out)
        if any(r.error for r in reports):
            return max(r.exit_code for r in reports)
    ok = True
    results["verify"] = {}
    for table in tables:
        last = os.path.join(table.source, f"{DAYS[-1]}.parquet")
        (result,) = verify_table(spark, table, state_root, last, ignore=table.exclude).values()
        results["verify"][table.name] = result.to_dict()
        ok = ok and result.identical
        if not as_json:
            verdict = "identical" if result.identical else "DIFFERENT"
            print(f"verify {table.name}: replaying {result.files} landing file(s) gives the last "
                  f"snapshot: {verdict}", file=out)
    if as_json:
        print(json.dumps(results, indent=1, default=str), file=out)
    else:
        print(f"\nLanding zone: {landing}\n  e.g. {landing}/{EMPLOYEES}/_metadata.json and "
              f"00000000000000000001.parquet (initial load), ...02 and ...03 (changes with "
              f"__rowMarker__)\nState:        {os.path.abspath(state_root)}/{EMPLOYEES}\n"
              f"Snapshots:    {sources}\nNext: diffcdc status --state {state_root}", file=out)
    return 0 if ok else 1
