"""The command line: every command, its options and their help."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from diffcdc import __version__
from diffcdc.cli.arguments import (
    Parser,
    add_landing_contract_args,
    add_landing_option_arg,
    csv_list,
    folder_name,
)

#: The argument types of names made folders of (checked as the config checks them).
TABLE = folder_name("table name")
SCHEMA = folder_name("schema name")
SINK = folder_name("sink name")

#: The exit codes, for ``--help`` (the README has the same table).
EXIT_CODES = """\
exit codes:
  0    success (also when there was nothing to do)
  1    failure: publish conflict, concurrent run, storage, damaged state; retry or see the hint
  2    usage or configuration error: fix the command line or the config file; nothing ran
  3    input refused: bad, late or changed snapshot, key or schema problem, quality gate;
       nothing was published and state is unchanged
  130  interrupted
  141  the output pipe closed early (e.g. '| head'): nothing more is printed"""

EXAMPLES = """\
examples:
  diffcdc run --source snapshots/employees --keys EmployeeID --table Employees \\
      --landing landing --state state
  diffcdc run --config diffcdc.toml
  diffcdc run --config diffcdc.toml --override-check Employees:delete_ratio
  diffcdc status --state state
  diffcdc verify --config diffcdc.toml --table Employees --snapshot snapshots/employees/0003.parquet
  diffcdc reload --config diffcdc.toml --table Employees --yes"""


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    common.add_argument("--debug", action="store_true", help="show the full trace on errors")
    common.add_argument("--quiet", action="store_true", help="no progress lines")

    parser = Parser(
        prog="diffcdc",
        description=_wrap("Snapshot-diff CDC: compares each new full snapshot of a table with the last "
        "one and publishes the inserted, updated and deleted rows, exactly once, to the table's "
        "sinks (Open Mirroring landing zone, Delta table, Kafka). Run 'diffcdc COMMAND --help' "
        "for a command's options."),
        epilog=EXAMPLES + "\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"diffcdc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    run = sub.add_parser(
        "run", parents=[common], help="process pending snapshots",
        description=_wrap("Process every pending snapshot of one table (--source, --keys, --table, "
        "--landing) or of every table of a config file (--config): diff, check the quality "
        "gate, commit the state, publish to the sinks."),
        epilog=EXAMPLES + "\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--config", help="TOML file with many tables (see README)")
    run.add_argument("--source", help="folder with one entry per snapshot (lexical order)")
    run.add_argument("--keys", type=csv_list, help="key columns, comma-separated")
    # run's (and plan's, reload's, rollback's) names are checked by the config models, with
    # every other problem of the command line at once
    run.add_argument("--table", help="landing table name")
    run.add_argument("--landing", help="landing zone root: a folder, abfss://... or https://...")
    add_landing_option_arg(run)
    run.add_argument("--state", default=None, help="state root (default ./state)")
    run.add_argument("--exclude", type=csv_list, default=None, help="columns left out of the fingerprint")
    run.add_argument("--schema", dest="schema_name", help="schema folder name (<schema>.schema/)")
    run.add_argument("--codec", choices=["snappy", "zstd", "gzip", "none"],
                     help="landing file codec (default: snappy for Parquet, none for text)")
    run.add_argument("--max-rows-per-file", type=int, help="rows per landing file at most")
    run.add_argument("--fingerprint-bits", type=int, choices=[64, 128], help="fingerprint width")
    run.add_argument("--csv-infer-schema", action="store_true", default=None, help="infer CSV types")
    run.add_argument("--csv-encoding", help="encoding of CSV snapshots (default utf-8)")
    run.add_argument("--keep-versions", type=int, default=None, help="state versions kept")
    run.add_argument("--parallelism", type=int, default=None,
                     help="with --config: tables processed at once (default: the cores, 2 to 8)")
    run.add_argument("--master", help="Spark master (default local[*])")
    run.add_argument("--remote", metavar="URL",
                        help="run on a Spark Connect server, sc://host:port (default: [spark] "
                        "remote, else the SPARK_REMOTE environment variable)")
    run.add_argument("--connect-timeout", type=float, metavar="SECONDS",
                        help="seconds a Spark Connect server may go without answering before "
                        "the run ends (default: [spark] connect_timeout, else 120)")
    run.add_argument("--only", type=csv_list, help="with --config: run only these tables")
    run.add_argument(
        "--override-check",
        action="append",
        default=[],
        metavar="[TABLE:]CHECK",
        help="let the named quality check pass for this one run (recorded in the report); "
        "repeatable; TABLE: is required when several tables run",
    )
    run.add_argument("--expectation-suite", help="great-expectations suite JSON for the table")
    run.add_argument("--max-delete-ratio", type=float, help="gate: deleted rows / previous rows")
    run.add_argument("--min-row-ratio", type=float, help="gate: rows / previous rows at least")
    run.add_argument("--max-row-ratio", type=float, help="gate: rows / previous rows at most")
    run.add_argument("--min-rows-for-ratios", type=int,
                     help="gate: the ratio checks apply from this many rows (default 1000)")
    add_landing_contract_args(run)
    _add_reload_and_drop(sub, run, common)

    _add_plan(sub, run)

    status = sub.add_parser(
        "status", parents=[common], help="show tables, waiting snapshots and their last runs",
        description="Reads state (and, with --config or --source, the source folders); changes "
        "nothing and starts no Spark. Per table: the last committed snapshot, the snapshots "
        "waiting in the source folder, the last run and the last run that changed something, "
        "a failure with its reason, and each sink's publish state.",
    )
    status.add_argument("--config", help="TOML config: every configured table, its state root "
                        "and its source folder (waiting snapshots)")
    status.add_argument("--state", default=None,
                        help="state root (default: the config's, else ./state)")
    status.add_argument("--table", type=TABLE, help="only this table")
    status.add_argument("--source", help="with --table and without --config: the table's "
                        "source folder, to show its waiting snapshots")

    verify = sub.add_parser(
        "verify", parents=[common],
        help="replay every sink and compare with a snapshot; or, without --snapshot, check the "
        "head state fully (--state)",
    )
    verify.add_argument("--landing", help="landing zone root (default: the table's, with --config)")
    add_landing_option_arg(verify)
    verify.add_argument("--config", help="TOML config: the table's landing root and options")
    verify.add_argument("--table", type=TABLE,
                        help="table name (with --state and --config: default every table)")
    verify.add_argument("--snapshot", help="snapshot file or folder to compare the sinks with")
    verify.add_argument("--schema", dest="schema_name", type=SCHEMA, help="schema folder name")
    verify.add_argument(
        "--state", nargs="?", const="", default=None, metavar="ROOT",
        help="state root (default: the config's, else ./state); without --snapshot: check the "
        "head state (files and checksums, row counts, unique keys, every key's fingerprint "
        "against its snapshot), no Spark",
    )
    verify.add_argument("--csv-encoding", help="with --state: encoding of a CSV snapshot "
                        "(default: the table's csv_encoding, else utf-8)")
    verify.add_argument("--ignore", type=csv_list, default=None, help="columns not compared")
    verify.add_argument("--sink", type=SINK, help="only this sink of the table (default: every sink)")
    verify.add_argument("--master", help="Spark master (default local[*])")
    verify.add_argument("--remote", metavar="URL",
                        help="run on a Spark Connect server, sc://host:port (default: [spark] "
                        "remote, else the SPARK_REMOTE environment variable)")
    verify.add_argument("--connect-timeout", type=float, metavar="SECONDS",
                        help="seconds a Spark Connect server may go without answering before "
                        "the run ends (default: [spark] connect_timeout, else 120)")

    repair = sub.add_parser(
        "repair", parents=[common],
        help="rebuild a damaged head state from its snapshot (exact; no sink is touched)",
    )
    repair.add_argument("--table", type=TABLE, required=True, help="table name")
    repair.add_argument("--schema", dest="schema_name", type=SCHEMA, help="schema folder name")
    repair.add_argument("--config", help="TOML config holding the table")
    repair.add_argument("--source", help="the table's snapshot folder (or --config)")
    repair.add_argument("--state", default=None, help="state root (default ./state)")
    repair.add_argument("--csv-encoding", help="encoding of CSV snapshots (default utf-8)")
    repair.add_argument("--master", help="Spark master (default local[*])")
    repair.add_argument("--remote", metavar="URL",
                        help="run on a Spark Connect server, sc://host:port (default: [spark] "
                        "remote, else the SPARK_REMOTE environment variable)")
    repair.add_argument("--connect-timeout", type=float, metavar="SECONDS",
                        help="seconds a Spark Connect server may go without answering before "
                        "the run ends (default: [spark] connect_timeout, else 120)")

    demo = sub.add_parser("demo", parents=[common], help="run a small end-to-end example")
    demo.add_argument("--dir", default="diffcdc-demo", help="where snapshots and landing go")
    demo.add_argument("--state", default="state", help="state root (default ./state)")
    summaries = {a.dest: a.help for a in sub._choices_actions}
    for name, command in sub.choices.items():  # every command's help ends with the exit codes
        command.formatter_class = argparse.RawDescriptionHelpFormatter
        command.epilog = command.epilog or EXIT_CODES
        command.description = _wrap(command.description or summaries.get(name) or name)
    return parser


def _wrap(text: str) -> str:
    """A paragraph for ``--help`` (descriptions are printed as given: wrap them here)."""
    return textwrap.fill(" ".join(text.split()), 88)


def _take_run_options(parser: argparse.ArgumentParser, run: argparse.ArgumentParser) -> None:
    """Give ``parser`` every option of ``run``, including ones added to ``run`` later."""
    for action in run._actions:
        if "-h" not in action.option_strings:
            parser._add_action(action)


def _add_plan(sub: Any, run: argparse.ArgumentParser) -> None:
    plan = sub.add_parser(
        "plan",
        help="dry run: what 'run' would do for each table (no Spark, nothing computed)",
        description="Takes every option of 'run'. For each table: the snapshots waiting, its "
        "sinks, the last commit, committed versions a sink has not published yet, and reload "
        "or drop requests. Reads state and the source folders only. Exit status: 0, or the "
        "code the run would fail with for a table whose source or state is refused.",
    )
    _take_run_options(plan, run)


def _add_reload_and_drop(
    sub: Any, run: argparse.ArgumentParser, common: argparse.ArgumentParser
) -> None:
    reload = sub.add_parser(
        "reload",
        help="re-create a table on purpose: drop its landing folder, publish a fresh initial load",
        description="Takes every option of 'run'. Drops the table folder, waits until it is "
        "gone, publishes the newest snapshot (the last committed one when nothing is pending) as "
        "a fresh initial load numbered from 1, and resets the table's state. The request is "
        "recorded first: if the reload dies, the next run finishes it. Needs --yes.",
    )
    _take_run_options(reload, run)
    reload.add_argument("--yes", action="store_true", help="confirm: the mirrored table is rebuilt")
    reload.add_argument(
        "--sink", action="append", default=[], metavar="NAME", dest="reload_sink", type=SINK,
        help="re-publish a full image to this one sink only (repeatable): its target is "
        "replaced, the table's state and other sinks go on with the diff",
    )

    rollback = sub.add_parser(
        "rollback",
        help="put a table back to a kept version's snapshot (published as a new version)",
        description="Takes every option of 'run'. Publishes, as a new version, the changes that "
        "take every sink from the head back to the snapshot of --to-version (which must still "
        "be in the source folder, unchanged). Nothing published is withdrawn. The quality gate "
        "applies (--override-check). Needs --yes.",
    )
    _take_run_options(rollback, run)
    rollback.add_argument("--to-version", type=int, required=True, help="the kept version")
    rollback.add_argument("--yes", action="store_true", help="confirm the rollback")

    drop = sub.add_parser("drop", parents=[common],
                          help="drop a table on purpose: delete its landing folder and state")
    drop.add_argument("--table", type=TABLE, required=True, help="landing table name")
    drop.add_argument("--schema", dest="schema_name", type=SCHEMA, help="schema folder name")
    drop.add_argument("--landing", help="landing zone root (or --config)")
    drop.add_argument("--config", help="TOML config holding the table")
    add_landing_option_arg(drop)
    drop.add_argument("--state", default=None, help="state root (default ./state)")
    drop.add_argument("--yes", action="store_true", help="confirm: the mirrored table is dropped")
