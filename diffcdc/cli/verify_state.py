"""``diffcdc verify --state``: the full check of a table's head state, without Spark.

Two independent checks: the state files against the commit's manifest (sizes, footer row
counts, XXH3-128 checksums), then every live key's fingerprint against the pure-Python
reference computed from the head's snapshot (when it is still there), with the row counts the
commit recorded.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from diffcdc.cli.common import config_table
from diffcdc.errors import StateError

if TYPE_CHECKING:
    from diffcdc.state.store import TableState


@dataclass(frozen=True)
class Check:
    """One check of ``verify --state``: its name, whether it passed, and what it found."""

    name: str
    ok: bool
    detail: str
    data: dict[str, object] = field(default_factory=dict)


def cmd_verify_state(args: argparse.Namespace) -> int:
    from diffcdc.config import load_config, state_name
    from diffcdc.state.store import TableState

    root = args.state or None
    if args.config:
        config = load_config(args.config)
        table = config_table(config, args.table, args.config)
        state = TableState(root or config.state, table.state_name)
    else:
        state = TableState(root or "state", state_name(args.table, args.schema_name))
    checks = state_checks(state)
    ok = all(c.ok for c in checks)
    if args.json:
        print(json.dumps({"ok": ok, "table": args.table, "checks": [c.__dict__ for c in checks]},
                         indent=1, default=str))
    else:
        for check in checks:
            print(f"{args.table}: {check.name}: {'OK' if check.ok else 'FAILED'} — {check.detail}")
    return 0 if ok else 1


def state_checks(state: TableState) -> list[Check]:
    """Every check of the head state, in order; later ones run only when they can tell."""
    from diffcdc.sources.files import identify
    from diffcdc.state.check import check_head
    from diffcdc.state.guard import state_damage

    head = state.head()
    if head is None:
        raise StateError("the table has no committed version", table=state.table,
                         path=state.dir, hint="check --state and the table name")
    record = head.record
    damage = state_damage(state, record, checksums=True)
    files = Check(
        "files",
        damage is None,
        f"version {record.version}: "
        + (f"{damage.reason}: {damage.path}" if damage else
           f"{len(record.state_manifest.files)} file(s) match the commit's sizes, row counts "
           "and checksums" if record.state_manifest else
           "readable (committed before manifests: no checksums to compare)"),
    )
    checks = [files]
    if damage is not None:
        return checks
    snapshot = record.snapshot_path
    if not snapshot or not os.path.exists(snapshot):
        checks.append(Check("fingerprints", True, f"skipped: the snapshot {snapshot} is no "
                            "longer there; only the files were checked"))
        return checks
    result = check_head(state)
    counts = record.counts
    expected = {"live rows": counts.rows, "tombstones": counts.deleted}
    found = {"live rows": result.state_rows, "tombstones": result.tombstones}
    same_counts = expected == found
    changed = (record.snapshot_identity is not None
               and identify(snapshot) != record.snapshot_identity)
    detail = result.summary() + ("" if same_counts else f"; the commit recorded {expected}, the "
                                 f"state holds {found}")
    if changed:
        detail += " (note: the snapshot file was replaced or rewritten since the commit)"
    checks.append(Check("fingerprints", result.ok and same_counts, detail, result.to_dict()))
    return checks
