"""``diffcdc plan``: a dry run — what ``run`` would do for each table, without Spark."""

from __future__ import annotations

import argparse
import json
from typing import Any

from diffcdc.cli.run import build_run_config, check_overrides, plan_tables
from diffcdc.engine.plan import TablePlan


def cmd_plan(args: argparse.Namespace) -> int:
    config = build_run_config(args)
    planned = plan_tables(args, config)
    check_overrides(args.override_check, config)
    root = config.state_root()
    plans = [(table, planned[table.name]) for table in config.tables]
    if args.json:
        print(json.dumps({"state": str(root), "tables": [plan_dict(p) for _, p in plans]},
                         indent=1, default=str))
    else:
        for table, plan in plans:
            print("\n".join(plan_lines(plan, sinks={c.sink_id: c.type for c in table.sinks},
                                       histories=_histories(table.sinks))))
        busy = [p for _, p in plans if p.has_work]
        print(f"{len(busy)} of {len(plans)} table(s) have work"
              + ("; 'diffcdc run' starts Spark for them" if busy else "; a run starts no Spark"))
    return max((p.problem.exit_code for _, p in plans if p.problem is not None), default=0)


def plan_dict(plan: TablePlan) -> dict[str, Any]:
    """A plan as JSON: table, sinks, last commit, waiting snapshots, unpublished, requests."""
    head = plan.head
    return {
        "table": plan.table,
        "has_work": plan.has_work,
        "sinks": list(plan.sinks),
        "last_commit": {
            "version": head.version,
            "snapshot": head.snapshot_id,
            "committed_at": head.record.committed_at,
        } if head else None,
        "snapshots": [{"snapshot": e.snapshot_id, "path": e.path} for e in plan.snapshots],
        "unpublished": {"version": head.version, "sinks": list(plan.unpublished),
                        "versions": {s: list(v) for s, v in plan.backlog.items()}}
        if head and plan.unpublished else None,
        "reload": plan.reload.to_dict() if plan.reload else None,
        "error": plan.problem.to_dict() if plan.problem else None,
    }


def _histories(sinks: list[Any]) -> frozenset[str]:
    """The configured sinks that keep every version (``mode = "scd2"``): a reload publishes
    their backlog first (:func:`diffcdc.engine.run._histories_publish_first`)."""
    return frozenset(c.sink_id for c in sinks if getattr(c, "mode", None) == "scd2")


def plan_lines(plan: TablePlan, sinks: dict[str, str],
               histories: frozenset[str] = frozenset()) -> list[str]:
    """The plan of one table for people (``histories``: sinks that keep every version)."""
    head = plan.head
    lines = [f"{plan.table}:"]
    lines.append("  sinks: " + ", ".join(f"{s} ({t})" for s, t in sinks.items()))
    lines.append(f"  last commit: version {head.version}, snapshot {head.snapshot_id}"
                 + (f", {head.record.committed_at}" if head.record.committed_at else "")
                 if head else "  last commit: none (the first run is an initial load)")
    for sink in plan.unpublished if head else ():
        versions = plan.backlog[sink]
        action = ("the reload publishes it first (a history keeps every version), if it can"
                  if sink in plan.reloading and sink in histories
                  else "superseded by the requested reload" if sink in plan.reloading
                  else "the run publishes it first" if len(versions) == 1
                  else "the run publishes them first, in order")
        lines.append(f"  unpublished: {sink} has not published version(s) "
                     f"{', '.join(map(str, versions))} ({action})")
    if plan.reload is not None:
        what = (f"gives sink(s) {', '.join(plan.reload.sinks)} a full image"
                if plan.reload.sinks else "re-creates the table from a full image")
        lines.append(f"  reload requested {plan.reload.requested_at}: the next "
                     f"commit {what}")
    if plan.problem is not None:
        lines.append(f"  refused: {plan.problem}")
    elif plan.snapshots:
        lines.append(f"  would process {len(plan.snapshots)} snapshot(s), oldest first: "
                     + ", ".join(e.snapshot_id or e.path for e in plan.snapshots))
    else:
        lines.append("  no snapshot waiting")
    return lines
