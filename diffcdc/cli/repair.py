"""``diffcdc repair``: rebuild a damaged head state (see :mod:`diffcdc.engine.repair`)."""

from __future__ import annotations

import argparse
import json
import os

from diffcdc.cli.common import check_state_owner, config_table, state_root_of
from diffcdc.errors import UsageError


def cmd_repair(args: argparse.Namespace) -> int:
    from diffcdc.cli.settings import table_from_options
    from diffcdc.config_file import load_config
    from diffcdc.engine.repair import head_damage, repair_table

    master, conf, remote = None, {}, None
    timeout = args.connect_timeout
    if args.config:
        config = load_config(args.config)
        table = config_table(config, args.table, args.config)
        state_root = state_root_of(args.state, config)
        master, conf, remote = config.spark.master, config.spark.conf, config.spark.remote
        timeout = args.connect_timeout or config.spark.connect_timeout
    elif args.source:
        # Keys come from the commit record; the landing root is never used by a repair (a
        # placeholder beside the source folder, not around it).
        unused = os.path.join(os.path.dirname(os.path.abspath(args.source)), "_unused_landing")
        table = table_from_options(name=args.table, source=args.source, keys=["-"], landing=unused,
                                   schema_name=args.schema_name, csv_encoding=args.csv_encoding)
        state_root = state_root_of(args.state, None)
    else:
        raise UsageError("repair needs --source or --config", hint="give one of them")
    check_state_owner(table, state_root)
    found = head_damage(table, state_root)  # no Spark for an intact state
    if not found.damaged:
        result = found
    else:
        from diffcdc.runlog import logged_spark

        if args.master or args.remote:  # the command line's choice replaces the file's
            master, remote = args.master, args.remote
        spark, _ = logged_spark(state_root.logs_base(), args.debug, master, conf, remote=remote,
                                connect_timeout=timeout)
        result = repair_table(spark, table, state_root)
    if args.json:
        print(json.dumps({"ok": True, "table": result.table, "version": result.version,
                          "repaired": result.repaired, "reason": result.reason}))
    elif result.repaired:
        print(f"{result.table}: rebuilt the state of version {result.version} ({result.reason})")
    else:
        print(f"{result.table}: version {result.version}: {result.reason}; nothing to repair")
    return 0
