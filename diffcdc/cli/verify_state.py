"""``diffcdc verify --state``: the full check of each table's head state, without Spark.

The checks themselves are in :mod:`diffcdc.state.verify`; this prints one line per check
(or ``--json``) and exits 0 when every table is OK, 1 when a check failed.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from diffcdc.cli.common import config_table, state_root_of
from diffcdc.errors import StateError, UsageError

if TYPE_CHECKING:
    from diffcdc.state.verify import HeadReport


def cmd_verify_state(args: argparse.Namespace) -> int:
    from diffcdc.config import state_name
    from diffcdc.config_file import load_config
    from diffcdc.sources.registry import same_snapshot
    from diffcdc.state.store import TableState
    from diffcdc.state.verify import verify_head

    root = args.state or None  # a bare --state: the config's root, else ./state
    if args.config:
        config = load_config(args.config)
        tables = [config_table(config, args.table, args.config)] if args.table else config.tables
        located = state_root_of(root, config)
        targets = [(TableState(located, t.state_name), args.csv_encoding or t.csv_encoding)
                   for t in tables]
    elif args.table:
        from diffcdc.state.owner import check_owner

        state = TableState(state_root_of(root, None), state_name(args.table, args.schema_name))
        check_owner(state, args.table, args.schema_name)  # never another table's state
        targets = [(state, args.csv_encoding or "utf-8")]
    else:
        raise UsageError("verify --state needs --table or --config", hint="name the table to check")
    reports = []
    for state, encoding in targets:
        report = verify_head(state, csv_encoding=encoding, same_snapshot=same_snapshot)
        if report.version is None and args.table:
            raise StateError("the table has no committed version", table=state.table,
                             path=state.dir, hint="check --state and the table name")
        reports.append(report)
    ok = all(r.ok for r in reports)
    if args.json:
        body = reports[0].to_dict() if args.table else {
            "ok": ok, "tables": [r.to_dict() for r in reports]}
        print(json.dumps(body, indent=1, default=str))
    else:
        for report in reports:
            _print(report)
    return 0 if ok else 1


def _print(report: HeadReport) -> None:
    for check in report.checks:
        print(f"{report.table}: {check.name}: {check.status.upper()} — {check.detail}")
