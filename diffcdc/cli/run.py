"""``diffcdc run`` and ``diffcdc reload``: build the run config, run the tables, summarize."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from diffcdc.cli.common import check_landing_arg, error_fields
from diffcdc.cli.progress import choose_progress
from diffcdc.cli.runlog import RunLog
from diffcdc.errors import DiffcdcError, UsageError
from diffcdc.state.store import new_run_id

if TYPE_CHECKING:
    from diffcdc.config import RunConfig

log = logging.getLogger("diffcdc")


def cmd_run(args: argparse.Namespace) -> int:
    """Check everything that needs no Spark first (config, paths, names, overrides, pending
    snapshots); start Spark only when some table has work."""
    from diffcdc.engine.run import run_many

    started = time.monotonic()
    config = build_run_config(args)
    overrides = check_overrides(args.override_check, config)
    reload = frozenset(getattr(args, "reload_tables", ()))
    runlog = RunLog.open(config.state, args.command, new_run_id())
    trace_handler = _traces_to_terminal() if args.debug else None
    observer = choose_progress(args.quiet, terminal=sys.stderr.isatty())
    trace = logging.getLogger("diffcdc.trace")  # the log file only (and --debug's terminal)
    try:
        log.info("diffcdc %s: %d table(s), state %s, log %s", args.command, len(config.tables),
                 config.state, runlog.path)
        reports = run_many(_spark_factory(config, None if args.debug else runlog.path), config,
                           overrides=overrides, reload=reload, observer=observer)
        seconds = time.monotonic() - started
        dicts = [r.to_dict() for r in reports]
        trace.info("%s", totals_line(dicts, seconds))
    except Exception as exc:
        trace.error("the run failed: %s", exc, exc_info=exc)
        raise
    finally:
        observer.close()
        if trace_handler is not None:
            trace.removeHandler(trace_handler)
        runlog.close()
    if args.json:
        print(json.dumps({"ok": all(r.error is None for r in reports), "log": runlog.path,
                          "tables": dicts}, indent=1, default=str))
    else:
        print(format_summary(dicts))
        print(totals_line(dicts, seconds))
        if any(r.error for r in reports):
            print(f"full traces: {runlog.path}", file=sys.stderr)
    return max((r.exit_code for r in reports), default=0)


def build_run_config(args: argparse.Namespace) -> RunConfig:
    """The run's config from ``--config`` or the single-table options (no Spark)."""
    from diffcdc.config import RunConfig, load_config, table_from_args

    check_landing_arg(args.landing)
    if args.config:
        flags = [n for n in ("source", "keys", "table", "landing") if getattr(args, n)]
        if flags:
            raise UsageError(f"--config cannot be combined with --{', --'.join(flags)}")
        config = load_config(args.config)
        if args.state:
            config.state = args.state
        if args.only:
            unknown = set(args.only) - {t.name for t in config.tables}
            if unknown:
                raise UsageError(f"--only names unknown table(s) {sorted(unknown)}", path=args.config)
            config.tables = [t for t in config.tables if t.name in args.only]
    else:
        missing = [n for n in ("source", "keys", "table", "landing") if not getattr(args, n)]
        if missing:
            raise UsageError(
                f"missing --{', --'.join(missing)}", hint="give them, or use --config FILE"
            )
        table = table_from_args(
            name=args.table,
            source=args.source,
            keys=args.keys,
            landing=args.landing,
            exclude=args.exclude,
            schema_name=args.schema_name,
            codec=args.codec,
            max_rows_per_file=args.max_rows_per_file,
            fingerprint_bits=args.fingerprint_bits,
            csv_infer_schema=args.csv_infer_schema,
            quality=_quality_from_args(args),
            **_landing_contract_fields(args),
        )
        config = RunConfig(state=args.state or "state", tables=[table])
    if args.landing_options:
        given = dict(args.landing_options)
        config.tables = [t.with_landing_options(given) for t in config.tables]
    if args.keep_versions is not None:
        config.keep_versions = args.keep_versions
    if args.master:
        config.spark.master = args.master
    return config


def check_overrides(values: list[str], config: RunConfig) -> dict[str, frozenset[str]]:
    """``--override-check`` options per table, each a check the table's gate knows."""
    from diffcdc.core.quality import validate_overrides

    overrides = _parse_overrides(values, [t.name for t in config.tables])
    for table in config.tables:
        try:
            validate_overrides(overrides.get(table.name, ()), config.quality.merged(table.quality))
        except DiffcdcError as exc:
            exc.table = exc.table or table.name
            raise
    return overrides


def _spark_factory(config: RunConfig, console_log: str | None) -> Callable[[], Any]:
    def start() -> Any:
        from diffcdc.spark import build_spark

        log.info("starting Spark (%s)", config.spark.master or "local[*]")
        return build_spark(config.spark.master, config.spark.conf, console_log=console_log)

    return start


def _traces_to_terminal() -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    logging.getLogger("diffcdc.trace").addHandler(handler)
    return handler


def totals_line(reports: list[dict[str, Any]], seconds: float) -> str:
    """One line of totals over every table of the run."""
    outcomes: dict[str, int] = {}
    for r in reports:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    snaps = [s for r in reports for s in r.get("snapshots", [])]
    kinds = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "none"
    return (f"total: {len(reports)} table(s) ({kinds}); {len(snaps)} snapshot(s), "
            f"+{sum(s['inserted'] for s in snaps)} ~{sum(s['updated'] for s in snaps)} "
            f"-{sum(s['deleted'] for s in snaps)}, {sum(len(s['files']) for s in snaps)} "
            f"file(s); {seconds:.1f} s")


def _quality_from_args(args: argparse.Namespace) -> dict[str, Any] | None:
    fields = {
        "expectation_suite": args.expectation_suite,
        "max_delete_ratio": args.max_delete_ratio,
        "min_row_ratio": args.min_row_ratio,
        "max_row_ratio": args.max_row_ratio,
    }
    chosen = {k: v for k, v in fields.items() if v is not None}
    return chosen or None


def _parse_overrides(values: list[str], tables: list[str]) -> dict[str, frozenset[str]]:
    """``[TABLE:]CHECK`` options → {table: checks}; a bare CHECK needs exactly one table."""
    out: dict[str, set[str]] = {}
    for value in values:
        table, sep, check = value.rpartition(":")
        if not sep:
            if len(tables) != 1:
                raise UsageError(
                    f"--override-check {value}: name the table as TABLE:{value} when several "
                    "tables run"
                )
            table = tables[0]
        if table not in tables:
            raise UsageError(f"--override-check {value}: table {table!r} is not part of this run")
        if not check:
            raise UsageError(f"--override-check {value}: no check name")
        out.setdefault(table, set()).add(check)
    return {t: frozenset(c) for t, c in out.items()}


def format_summary(reports: list[dict[str, Any]]) -> str:
    """The end-of-run table for people."""
    header = ("table", "outcome", "snapshots", "inserted", "updated", "deleted", "files", "seconds")
    rows = [header]
    for r in reports:
        snaps = r.get("snapshots", [])
        rows.append((
            r["table"],
            r["outcome"],
            str(len(snaps)),
            str(sum(s["inserted"] for s in snaps)),
            str(sum(s["updated"] for s in snaps)),
            str(sum(s["deleted"] for s in snaps)),
            str(sum(len(s["files"]) for s in snaps)),
            f"{r.get('seconds', 0):.1f}",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    for r in reports:
        if r.get("error"):
            lines.append(f"{r['table']}: {DiffcdcError(**error_fields(r['error']))}")
    return "\n".join(lines)


def _landing_contract_fields(args: argparse.Namespace) -> dict[str, Any]:
    """TableConfig fields from the options above (None: not given, the default applies)."""
    text = {
        k: getattr(args, k)
        for k in ("row_separator", "column_separator", "quote_character", "escape_character",
                  "null_value", "encoding")
        if getattr(args, k, None) is not None
    }
    partner = None
    if args.partner_name or args.partner_source_type:
        partner = {"partner_name": args.partner_name or "", "source_type": args.partner_source_type or "",
                   "source_version": args.partner_source_version}
    return {
        "file_format": args.file_format,
        "file_extension": args.file_extension,
        "text": text or None,
        "upsert_default": args.upsert_default,
        "file_detection": args.file_detection,
        "schema_policy": args.schema_policy,
        "removed_columns": args.removed_columns,
        "partner": partner,
        "drop_timeout": args.drop_timeout,
    }


def cmd_reload(args: argparse.Namespace) -> int:
    if not args.table and not args.only:
        raise UsageError("reload needs --table (with --config: the table to re-create)")
    names = list(args.only or [args.table])
    if not args.yes:
        raise UsageError(
            f"refusing to re-create {', '.join(names)} without --yes: the table folder is deleted "
            "and the mirrored table rebuilt from a fresh initial load",
            hint="add --yes to confirm",
        )
    if args.config:
        args.only, args.table = names, None
    args.reload_tables = names
    return cmd_run(args)
