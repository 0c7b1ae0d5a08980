"""The command line: the table of commands, each with its options and its handler, and the
parser built from it."""

from __future__ import annotations

import argparse
import importlib
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from diffcdc import __version__
from diffcdc.cli.arguments import Parser, add_landing_option_arg, csv_list, folder_name
from diffcdc.sinks.openmirroring.command_line import add_options as add_landing_options

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

Options = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Command:
    """One command: its name, its line in ``diffcdc --help``, its options and its handler."""

    name: str
    summary: str
    #: ``module:function`` taking the parsed arguments and returning the exit status; imported
    #: when the command runs (after the pyspark check: a module may import it).
    handler: str
    options: Options
    #: The paragraph of ``diffcdc NAME --help`` (default: the summary).
    description: str = ""
    epilog: str = EXIT_CODES

    def run(self, args: argparse.Namespace) -> int:
        module, _, function = self.handler.partition(":")
        return int(getattr(importlib.import_module(module), function)(args) or 0)


def build_parser() -> argparse.ArgumentParser:
    """The ``diffcdc`` parser: one sub-command per entry of :data:`COMMANDS`."""
    parser = Parser(
        prog="diffcdc",
        description=_wrap("Snapshot-diff CDC: compares each new full snapshot of a table with the "
                          "last one and publishes the inserted, updated and deleted rows, exactly "
                          "once, to the table's sinks (Open Mirroring landing zone, Delta table, "
                          "Kafka). Run 'diffcdc COMMAND --help' for a command's options."),
        epilog=EXAMPLES + "\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"diffcdc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.options(sub.add_parser(
            command.name, help=command.summary, epilog=command.epilog,
            description=_wrap(command.description or command.summary),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        ))
    return parser


def _wrap(text: str) -> str:
    """A paragraph for ``--help`` (descriptions are printed as given: wrap them here)."""
    return textwrap.fill(" ".join(text.split()), 88)


# -- options several commands share --------------------------------------------------------


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--debug", action="store_true", help="show the full trace on errors")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def _spark(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", help="Spark master (default local[*])")
    p.add_argument("--remote", metavar="URL",
                   help="run on a Spark Connect server, sc://host:port (default: [spark] remote, "
                   "else the SPARK_REMOTE environment variable)")
    p.add_argument("--connect-timeout", type=float, metavar="SECONDS",
                   help="seconds a Spark Connect server may go without answering before the run "
                   "ends (default: [spark] connect_timeout, else 120)")


# -- the commands, each with its options ---------------------------------------------------


def _run_options(p: argparse.ArgumentParser) -> None:
    """``run``'s options (also every option of ``plan``, ``reload`` and ``rollback``)."""
    _output(p)
    add = p.add_argument
    add("--config", help="TOML file with many tables (see README)")
    add("--source", help="folder with one entry per snapshot (lexical order)")
    add("--keys", type=csv_list, help="key columns, comma-separated")
    # run's (and plan's, reload's, rollback's) names are checked by the config models, with
    # every other problem of the command line at once
    add("--table", help="landing table name")
    add("--landing", help="landing zone root: a folder, abfss://... or https://...")
    add_landing_option_arg(p)
    add("--state", default=None, help="state root (default ./state)")
    add("--exclude", type=csv_list, default=None, help="columns left out of the fingerprint")
    add("--schema", dest="schema_name", help="schema folder name (<schema>.schema/)")
    add("--fingerprint-bits", type=int, choices=[64, 128], help="fingerprint width")
    add("--csv-infer-schema", action="store_true", default=None, help="infer CSV types")
    add("--csv-encoding", help="encoding of CSV snapshots (default utf-8)")
    add("--schema-policy", choices=["fail", "recreate"],
        help="removed, renamed or retyped columns: fail (default, exit 3) or recreate the table")
    add("--removed-columns", choices=["policy", "null"],
        help="null: a removed column continues as NULL instead of following --schema-policy")
    add("--keep-versions", type=int, default=None, help="state versions kept")
    add("--parallelism", type=int, default=None,
        help="with --config: tables processed at once (default: the cores, 2 to 8)")
    add("--only", type=csv_list, help="with --config: run only these tables")
    add("--metrics-file", metavar="PATH",
        help="write the run's Prometheus metrics to this file at its end (default: [metrics] "
        "file; docs/metrics.md)")
    _spark(p)
    gate = p.add_argument_group("quality gate options")
    gate.add_argument(
        "--override-check", action="append", default=[], metavar="[TABLE:]CHECK",
        help="let the named quality check pass for this one run (recorded in the report); "
        "repeatable; TABLE: is required when several tables run",
    )
    gate.add_argument("--expectation-suite", help="great-expectations suite JSON for the table")
    gate.add_argument("--max-delete-ratio", type=float,
                      help="gate: deleted rows / previous rows")
    gate.add_argument("--min-row-ratio", type=float, help="gate: rows / previous rows at least")
    gate.add_argument("--max-row-ratio", type=float, help="gate: rows / previous rows at most")
    gate.add_argument("--min-rows-for-ratios", type=int,
                      help="gate: the ratio checks apply from this many rows (default 1000)")
    # The table-level sink's file and format options, as one group declared by its package
    # (read back by its plug-in's TableLevel.from_args); a cheap import: --help loads no
    # config models.
    add_landing_options(p)


RUN = Command(
    "run", "process pending snapshots", "diffcdc.cli.run:cmd_run", _run_options,
    description="Process every pending snapshot of one table (--source, --keys, --table, "
    "--landing) or of every table of a config file (--config): diff, check the quality gate, "
    "commit the state, publish to the sinks.",
    epilog=EXAMPLES + "\n\n" + EXIT_CODES,
)


def _reload_options(p: argparse.ArgumentParser) -> None:
    _run_options(p)
    p.add_argument("--yes", action="store_true", help="confirm: the mirrored table is rebuilt")
    p.add_argument(
        "--sink", action="append", default=[], metavar="NAME", dest="reload_sink", type=SINK,
        help="re-publish a full image to this one sink only (repeatable): its target is "
        "replaced, the table's state and other sinks go on with the diff",
    )


RELOAD = Command(
    "reload",
    "re-create a table on purpose: drop its landing folder, publish a fresh initial load",
    "diffcdc.cli.run:cmd_reload", _reload_options,
    description="Takes every option of 'run'. Drops the table folder, waits until it is gone, "
    "publishes the newest snapshot (the last committed one when nothing is pending) as a fresh "
    "initial load numbered from 1, and resets the table's state. The request is recorded first: "
    "if the reload dies, the next run finishes it. Needs --yes.",
)


def _rollback_options(p: argparse.ArgumentParser) -> None:
    _run_options(p)
    p.add_argument("--to-version", type=int, required=True, help="the kept version")
    p.add_argument("--yes", action="store_true", help="confirm the rollback")


ROLLBACK = Command(
    "rollback", "put a table back to a kept version's snapshot (published as a new version)",
    "diffcdc.cli.run:cmd_rollback", _rollback_options,
    description="Takes every option of 'run'. Publishes, as a new version, the changes that "
    "take every sink from the head back to the snapshot of --to-version (which must still be in "
    "the source folder, unchanged). Nothing published is withdrawn. The quality gate applies "
    "(--override-check). Needs --yes.",
)


def _drop_options(p: argparse.ArgumentParser) -> None:
    _output(p)
    p.add_argument("--table", type=TABLE, required=True, help="landing table name")
    p.add_argument("--schema", dest="schema_name", type=SCHEMA, help="schema folder name")
    p.add_argument("--landing", help="landing zone root (or --config)")
    p.add_argument("--config", help="TOML config holding the table")
    add_landing_option_arg(p)
    p.add_argument("--state", default=None, help="state root (default ./state)")
    p.add_argument("--yes", action="store_true", help="confirm: the mirrored table is dropped")


DROP = Command("drop", "drop a table on purpose: delete its landing folder and state",
               "diffcdc.cli.drop:cmd_drop", _drop_options)

PLAN = Command(
    "plan", "dry run: what 'run' would do for each table (no Spark, nothing computed)",
    "diffcdc.cli.plan:cmd_plan", _run_options,
    description="Takes every option of 'run'. For each table: the snapshots waiting, its sinks, "
    "the last commit, committed versions a sink has not published yet, and reload or drop "
    "requests. Reads state and the source folders only. Exit status: 0, or the code the run "
    "would fail with for a table whose source or state is refused.",
)


def _status_options(p: argparse.ArgumentParser) -> None:
    _output(p)
    p.add_argument("--config", help="TOML config: every configured table, its state root and "
                   "its source folder (waiting snapshots)")
    p.add_argument("--state", default=None,
                   help="state root (default: the config's, else ./state)")
    p.add_argument("--table", type=TABLE, help="only this table")
    p.add_argument("--source", help="with --table and without --config: the table's source "
                   "folder, to show its waiting snapshots")


STATUS = Command(
    "status", "show tables, waiting snapshots and their last runs",
    "diffcdc.cli.status:cmd_status", _status_options,
    description="Reads state (and, with --config or --source, the source folders); changes "
    "nothing and starts no Spark. Per table: the last committed snapshot, the snapshots waiting "
    "in the source folder, the last run and the last run that changed something, a failure with "
    "its reason, and each sink's publish state.",
)


def _verify_options(p: argparse.ArgumentParser) -> None:
    _output(p)
    add = p.add_argument
    add("--landing", help="landing zone root (default: the table's, with --config)")
    add_landing_option_arg(p)
    add("--config", help="TOML config: the table's landing root and options")
    add("--table", type=TABLE, help="table name (with --state and --config: default every table)")
    add("--snapshot", help="snapshot file or folder to compare the sinks with")
    add("--schema", dest="schema_name", type=SCHEMA, help="schema folder name")
    add("--state", nargs="?", const="", default=None, metavar="ROOT",
        help="state root (default: the config's, else ./state); without --snapshot: check the "
        "head state (files and checksums, row counts, unique keys, every key's fingerprint "
        "against its snapshot), no Spark")
    add("--csv-encoding", help="with --state: encoding of a CSV snapshot (default: the table's "
        "csv_encoding, else utf-8)")
    add("--ignore", type=csv_list, default=None, help="columns not compared")
    add("--sink", type=SINK, help="only this sink of the table (default: every sink)")
    _spark(p)


VERIFY = Command(
    "verify", "replay every sink and compare with a snapshot; or, without --snapshot, check the "
    "head state fully (--state)", "diffcdc.cli.verify:cmd_verify", _verify_options,
)


def _repair_options(p: argparse.ArgumentParser) -> None:
    _output(p)
    p.add_argument("--table", type=TABLE, required=True, help="table name")
    p.add_argument("--schema", dest="schema_name", type=SCHEMA, help="schema folder name")
    p.add_argument("--config", help="TOML config holding the table")
    p.add_argument("--source", help="the table's snapshot folder (or --config)")
    p.add_argument("--state", default=None, help="state root (default ./state)")
    p.add_argument("--csv-encoding", help="encoding of CSV snapshots (default utf-8)")
    _spark(p)


REPAIR = Command(
    "repair", "rebuild a damaged head state from its snapshot (exact; no sink is touched)",
    "diffcdc.cli.repair:cmd_repair", _repair_options,
)


def _demo_options(p: argparse.ArgumentParser) -> None:
    _output(p)
    p.add_argument("--dir", default="diffcdc-demo", help="where snapshots and landing go")
    p.add_argument("--state", default="state", help="state root (default ./state)")


DEMO = Command("demo", "run a small end-to-end example", "diffcdc.cli.demo:cmd_demo",
               _demo_options)

def _report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show the full trace on errors")
    p.add_argument("--quiet", action="store_true", help="no line saying where it was written")
    p.add_argument("--config", help="TOML config: every configured table and its state root")
    p.add_argument("--state", "--state-root", dest="state", default=None, metavar="ROOT",
                   help="state root (default: the config's, else ./state)")
    p.add_argument("--table", type=TABLE, action="append", default=[],
                   help="only this table (repeatable; default every table)")
    p.add_argument("--output", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument("--last", type=int, default=60, metavar="N",
                   help="each table's newest N versions and N runs shown (default 60)")


REPORT = Command(
    "report", "write one self-contained HTML report of every table (charts, runs, sinks)",
    "diffcdc.cli.report:cmd_report", _report_options,
    description="Reads state (and, with --config, the source folders), like 'status': per "
    "table its versions with charts of the rows inserted, updated and deleted, run durations, "
    "quality gate outcomes and overrides, the most-changed columns where a Delta sink keeps "
    "them, each sink's published version and backlog, failed runs and their hints. One HTML "
    "file, nothing fetched when it is opened. Needs the report extra (pip install "
    "'diffcdc[report]').",
)

#: Every command, in the order ``diffcdc --help`` lists them.
COMMANDS: tuple[Command, ...] = (RUN, RELOAD, ROLLBACK, DROP, PLAN, STATUS, REPORT, VERIFY,
                                 REPAIR, DEMO)
BY_NAME = {c.name: c for c in COMMANDS}
