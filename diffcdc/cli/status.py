"""``diffcdc status``: what state says of each table (reads state only)."""

from __future__ import annotations

import argparse
import json


def cmd_status(args: argparse.Namespace) -> int:
    from diffcdc.state.status import table_status

    tables = table_status(args.state, args.table)
    if args.json:
        print(json.dumps({"state": args.state, "tables": tables}, indent=1, default=str))
        return 0
    if not tables:
        print(f"no tables in state root {args.state}")
        return 0
    header = ("table", "last snapshot", "version", "next seq", "rows", "last run", "+", "~", "-")
    rows = [header]
    for t in tables:
        last = t.get("last_run") or {}
        rows.append((
            t["table"],
            str(t.get("last_snapshot") or "-"),
            str(t.get("version") or "-"),
            str(t.get("next_sequence") or "-"),
            str(t.get("rows") if t.get("rows") is not None else "-"),
            f"{last.get('outcome', '-')} {last.get('started_at', '')[:19]}".strip(),
            str(last.get("inserted", "-")),
            str(last.get("updated", "-")),
            str(last.get("deleted", "-")),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows))
    for t in tables:
        if t.get("gate"):
            print(f"{t['table']}: quality gate: {t['gate']}")
        if t.get("last_run", {}).get("error"):
            print(f"{t['table']}: last run failed: {t['last_run']['error']}")
        if t.get("unpublished"):
            waiting = ", ".join(s["sink"] for s in t.get("sinks", []) if not s["published"])
            print(f"{t['table']}: version {t['version']} is committed but not yet published by "
                  f"sink(s) {waiting}; the next run finishes it")
        for item in t.get("pending", []):
            print(f"{t['table']}: pending: {item}")
    return 0
