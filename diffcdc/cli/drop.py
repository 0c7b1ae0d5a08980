"""``diffcdc drop``: drop a table on purpose (its sinks' output, e.g. landing folders, and state)."""

from __future__ import annotations

import argparse
import json
import logging

from diffcdc.cli.common import located_table
from diffcdc.errors import UsageError

log = logging.getLogger("diffcdc")


def cmd_drop(args: argparse.Namespace) -> int:
    from diffcdc.engine.drop import drop_table, drop_targets

    located = located_table(args, "drop")
    table, state_root = located.table, located.state_root
    where = ", ".join(drop_targets(table)) or "no landing zone"
    if not args.yes:
        raise UsageError(
            f"refusing to drop {table.name} without --yes: {where} is deleted "
            "(the mirrored table is dropped) and the table's state forgotten",
            hint="add --yes to confirm",
        )
    where = drop_table(table, state_root, say=lambda m: log.info("%s: %s", table.name, m))
    if args.json:
        print(json.dumps({"ok": True, "dropped": where}))
    else:
        print(f"{table.name}: dropped {where}; the next run publishes a fresh initial load")
    return 0
