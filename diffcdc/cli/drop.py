"""``diffcdc drop``: drop a table on purpose (landing folders and state)."""

from __future__ import annotations

import argparse
import json
import logging

from diffcdc.cli.common import check_landing_arg, config_table
from diffcdc.errors import UsageError

log = logging.getLogger("diffcdc")


def cmd_drop(args: argparse.Namespace) -> int:
    from diffcdc.config import load_config, table_from_args
    from diffcdc.sinks.openmirroring.drop import drop_table

    check_landing_arg(args.landing)
    state_root = args.state
    if args.config:
        config = load_config(args.config)
        table = config_table(config, args.table, args.config)
        state_root = state_root or config.state
    elif args.landing:
        # Only the location matters for a drop; source and keys are placeholders.
        table = table_from_args(name=args.table, source=".", keys=["-"], landing=args.landing,
                                schema_name=args.schema_name)
    else:
        raise UsageError("drop needs --landing or --config")
    if args.landing_options:
        table = table.with_landing_options(dict(args.landing_options))
    folder = f"{table.schema_name}.schema/{table.name}" if table.schema_name else table.name
    where = ", ".join(f"{s.landing}/{folder}" for s in table.landing_sinks()) or "no landing zone"
    if not args.yes:
        raise UsageError(
            f"refusing to drop {table.name} without --yes: {where} is deleted "
            "(the mirrored table is dropped) and the table's state forgotten",
            hint="add --yes to confirm",
        )
    where = drop_table(table, state_root or "state", say=lambda m: log.info("%s: %s", table.name, m))
    if args.json:
        print(json.dumps({"ok": True, "dropped": where}))
    else:
        print(f"{table.name}: dropped {where}; the next run publishes a fresh initial load")
    return 0
