"""``diffcdc verify``: replay every sink of a table and compare it with a snapshot."""

from __future__ import annotations

import argparse
import json

from diffcdc.cli.common import located_table
from diffcdc.errors import UsageError


def cmd_verify(args: argparse.Namespace) -> int:
    if args.snapshot is None:
        if args.state is None:
            raise UsageError("verify needs --snapshot (replay the sinks and compare) or --state "
                             "(check the head state)", hint="give one of them")
        from diffcdc.cli.verify_state import cmd_verify_state

        return cmd_verify_state(args)  # ``verify --state``: the head state itself
    if args.table is None:
        raise UsageError("verify --snapshot needs --table", hint="name the table to compare")
    from diffcdc.engine.verify import verify_table
    from diffcdc.runlog import logged_spark
    from diffcdc.state.store import TableState

    args.state = args.state or None  # a bare --state with --snapshot: the default root
    located = located_table(args, "verify")
    table, state_root = located.table, located.state_root
    ignore = args.ignore
    if ignore is None:  # the columns the table leaves out of its fingerprint, from its state
        state = TableState(state_root, table.state_name)
        head = state.head()
        if head is None:
            raise UsageError(
                f"no state for this table under {state_root}: the columns it excludes from the "
                "fingerprint (and so from the comparison) are unknown",
                table=table.name,
                hint="give the state root the table was published with (--state ROOT or "
                "--config), or name the columns to leave out with --ignore (--ignore '' for none)",
            )
        ignore = list(head.record.exclude)
    master, remote, conf = args.master, args.remote, {}
    timeout = args.connect_timeout
    if located.config is not None:  # the file's Spark, unless the command line names one
        spark_settings = located.config.spark
        conf = spark_settings.conf
        timeout = timeout or spark_settings.connect_timeout
        if master is None and remote is None:
            master, remote = spark_settings.master, spark_settings.remote
    spark, _ = logged_spark(state_root.logs_base(), args.debug, master, conf, remote=remote,
                            connect_timeout=timeout)
    results = verify_table(spark, table, state_root, args.snapshot, ignore=ignore,
                           only=args.sink)
    if args.json:
        only_one = len(results) == 1  # the shape of a table with one sink stays as it was
        body = next(iter(results.values())).to_dict() if only_one else {
            "identical": all(r.identical for r in results.values()),
            "sinks": {k: r.to_dict() for k, r in results.items()},
        }
        print(json.dumps(body, indent=1, default=str))
    for sink_id, result in ([] if args.json else results.items()):
        name = args.table if len(results) == 1 else f"{args.table} [{sink_id}]"
        if result.identical:
            print(f"{name}: identical — {result.files} published unit(s) replayed give the "
                  f"{result.snapshot_rows} rows of {args.snapshot}"
                  + (f" and the {result.kept} keys kept outside its scope" if result.kept else "")
                  + (f" (ignoring {', '.join(ignore)})" if ignore else ""))
        else:
            print(f"{name}: DIFFERENT — sink has {result.mirror_rows} rows, snapshot "
                  f"{result.snapshot_rows}; snapshot rows missing or different for keys "
                  f"{result.missing}; sink rows not in the snapshot for keys {result.unexpected}")
    return 0 if all(r.identical for r in results.values()) else 1
