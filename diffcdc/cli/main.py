"""The ``diffcdc`` command: parse, call the engine, print, exit.

Exit status: 0 success (also when nothing changed); 2 usage or config error; 3 input refused;
1 anything else. Errors are one line on stderr; ``--debug`` adds the trace.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from diffcdc import __version__
from diffcdc.errors import DiffcdcError, UsageError

log = logging.getLogger("diffcdc")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # exit 2 with one line, like every usage error
        self.print_usage(sys.stderr)
        raise UsageError(message, hint=f"see '{self.prog} --help'")


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


#: Landing options that are secrets: never taken from the command line (process lists and shell
#: histories show it); they come from the environment or a config file.
SECRET_LANDING_OPTIONS = ("account_key", "sas_token", "credential")


def _landing_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` → (key, value); true/false and numbers are typed. Never echoes a value."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError("expected KEY=VALUE (e.g. max_workers=8)")
    if key in SECRET_LANDING_OPTIONS:
        raise argparse.ArgumentTypeError(
            f"{key} is a secret and is not taken from the command line; set it in the "
            f"environment or in the config file's landing_options (see docs/remote-landing.md)"
        )
    raw = raw.strip()
    if raw.lower() in ("true", "false"):
        return key, raw.lower() == "true"
    for cast in (int, float):
        try:
            return key, cast(raw)
        except ValueError:
            pass
    return key, raw


def _config_table(config: Any, name: str, path: str) -> Any:
    """The table called ``name`` in a loaded config, or a usage error naming the file."""
    table = next((t for t in config.tables if t.name == name), None)
    if table is None:
        raise UsageError(f"--table {name} is not in the config", path=path)
    return table


def _check_landing_arg(landing: str | None) -> None:
    """Refuse a SAS token on a ``--landing`` URL (it would show in process lists)."""
    if landing and "://" in landing and "?" in landing:
        raise UsageError(
            "--landing must not carry a query string (a SAS token is a secret)",
            hint="export AZURE_STORAGE_SAS_TOKEN, or use sas_token / sas_token_env in the "
            "config file's landing_options",
        )


def _add_landing_option_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--landing-option",
        dest="landing_options",
        type=_landing_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option of a remote landing root (max_workers=8, retry_total=3, "
        "connection_verify=ca.pem, account_key_env=VAR, ...); repeatable; secrets only from "
        "the environment or a config file",
    )


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    common.add_argument("--debug", action="store_true", help="show the full trace on errors")
    common.add_argument("--quiet", action="store_true", help="no progress lines")

    parser = _Parser(prog="diffcdc", description="Snapshot-diff CDC for Open Mirroring landing zones.")
    parser.add_argument("--version", action="version", version=f"diffcdc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", parents=[common], help="process pending snapshots")
    run.add_argument("--config", help="TOML file with many tables (see README)")
    run.add_argument("--source", help="folder with one entry per snapshot (lexical order)")
    run.add_argument("--keys", type=_csv, help="key columns, comma-separated")
    run.add_argument("--table", help="landing table name")
    run.add_argument("--landing", help="landing zone root: a folder, abfss://... or https://...")
    _add_landing_option_arg(run)
    run.add_argument("--state", default=None, help="state root (default ./state)")
    run.add_argument("--exclude", type=_csv, default=None, help="columns left out of the fingerprint")
    run.add_argument("--schema", dest="schema_name", help="schema folder name (<schema>.schema/)")
    run.add_argument("--codec", choices=["snappy", "zstd", "gzip", "none"],
                     help="landing file codec (default: snappy for Parquet, none for text)")
    run.add_argument("--max-rows-per-file", type=int, help="rows per landing file at most")
    run.add_argument("--fingerprint-bits", type=int, choices=[64, 128], help="fingerprint width")
    run.add_argument("--csv-infer-schema", action="store_true", default=None, help="infer CSV types")
    run.add_argument("--keep-versions", type=int, default=None, help="state versions kept")
    run.add_argument("--master", help="Spark master (default local[*])")
    run.add_argument("--only", type=_csv, help="with --config: run only these tables")
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
    _add_landing_contract_args(run)
    _add_reload_and_drop(sub, run, common)

    status = sub.add_parser("status", parents=[common], help="show tables and their last runs")
    status.add_argument("--state", default="state", help="state root (default ./state)")
    status.add_argument("--table", help="only this table")

    verify = sub.add_parser("verify", parents=[common], help="replay landing files, compare with a snapshot")
    verify.add_argument("--landing", help="landing zone root (default: the table's, with --config)")
    _add_landing_option_arg(verify)
    verify.add_argument("--config", help="TOML config: the table's landing root and options")
    verify.add_argument("--table", required=True, help="landing table name")
    verify.add_argument("--snapshot", required=True, help="snapshot file or folder to compare with")
    verify.add_argument("--schema", dest="schema_name", help="schema folder name")
    verify.add_argument("--state", default=None, help="state root, for the excluded columns")
    verify.add_argument("--ignore", type=_csv, default=None, help="columns not compared")
    verify.add_argument("--sink", help="only this sink of the table (default: every sink)")
    verify.add_argument("--master", help="Spark master (default local[*])")

    demo = sub.add_parser("demo", parents=[common], help="run a small end-to-end example")
    demo.add_argument("--dir", default="diffcdc-demo", help="where snapshots and landing go")
    demo.add_argument("--state", default="state", help="state root (default ./state)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    try:
        args = build_parser().parse_args(args_list)
        _setup_logging(args.quiet, debug)
        return int(_dispatch(args) or 0)
    except DiffcdcError as exc:
        if debug:
            traceback.print_exc()
        print(f"diffcdc: error: {exc}", file=sys.stderr)
        if "--json" in args_list:
            print(json.dumps({"ok": False, **exc.to_dict()}))
        return exc.exit_code
    except KeyboardInterrupt:
        print("diffcdc: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence prints one line
        if debug:
            traceback.print_exc()
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"diffcdc: unexpected error: {type(exc).__name__}: {first} — run with --debug for "
              "the trace", file=sys.stderr)
        return 1


def _setup_logging(quiet: bool, debug: bool) -> None:
    level = logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        return _cmd_run(args)
    if args.command == "status":
        return _cmd_status(args)
    if args.command == "verify":
        return _cmd_verify(args)
    if args.command == "reload":
        return _cmd_reload(args)
    if args.command == "drop":
        return _cmd_drop(args)
    if args.command == "demo":
        from diffcdc.demo import run_demo

        return run_demo(args.dir, args.state, as_json=args.json)
    raise UsageError(f"unknown command {args.command}")  # pragma: no cover


def _cmd_run(args: argparse.Namespace) -> int:
    from diffcdc.config import RunConfig, load_config, table_from_args

    _check_landing_arg(args.landing)
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

    from diffcdc.engine.run import run_many
    from diffcdc.spark import build_spark

    overrides = _parse_overrides(args.override_check, [t.name for t in config.tables])
    spark = build_spark(config.spark.master, config.spark.conf)
    reports = run_many(
        spark, config, overrides=overrides, reload=frozenset(getattr(args, "reload_tables", ()))
    )
    if args.json:
        print(json.dumps({"ok": all(r.error is None for r in reports),
                          "tables": [r.to_dict() for r in reports]}, indent=1, default=str))
    else:
        print(format_summary([r.to_dict() for r in reports]))
    return max((r.exit_code for r in reports), default=0)


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
            lines.append(f"{r['table']}: {DiffcdcError(**_error_fields(r['error']))}")
    return "\n".join(lines)


def _error_fields(error: dict[str, Any]) -> dict[str, Any]:
    return {k: error.get(k) for k in ("message", "table", "snapshot", "path", "hint")}


def _cmd_status(args: argparse.Namespace) -> int:
    from diffcdc.state.status import table_status

    tables = table_status(args.state, args.table)
    if args.json:
        print(json.dumps({"state": args.state, "tables": tables}, indent=1, default=str))
        return 0
    if not tables:
        print(f"no tables in state root {args.state}")
        return 0
    header = ("table", "last snapshot", "version", "next seq", "rows", "last run", "+", "~", "-")
    rows = [header]
    for t in tables:
        last = t.get("last_run") or {}
        rows.append((
            t["table"],
            str(t.get("last_snapshot") or "-"),
            str(t.get("version") or "-"),
            str(t.get("next_sequence") or "-"),
            str(t.get("rows") if t.get("rows") is not None else "-"),
            f"{last.get('outcome', '-')} {last.get('started_at', '')[:19]}".strip(),
            str(last.get("inserted", "-")),
            str(last.get("updated", "-")),
            str(last.get("deleted", "-")),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows))
    for t in tables:
        if t.get("gate"):
            print(f"{t['table']}: quality gate: {t['gate']}")
        if t.get("last_run", {}).get("error"):
            print(f"{t['table']}: last run failed: {t['last_run']['error']}")
        if t.get("unpublished"):
            waiting = ", ".join(s["sink"] for s in t.get("sinks", []) if not s["published"])
            print(f"{t['table']}: version {t['version']} is committed but not yet published by "
                  f"sink(s) {waiting}; the next run finishes it")
        for item in t.get("pending", []):
            print(f"{t['table']}: pending: {item}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from diffcdc.config import load_config, table_from_args
    from diffcdc.engine.verify import verify_table
    from diffcdc.spark import build_spark
    from diffcdc.state.store import TableState

    _check_landing_arg(args.landing)
    state_root = args.state
    if args.config:
        config = load_config(args.config)
        table = _config_table(config, args.table, args.config)
        if args.landing:
            table = table.with_landing(landing=args.landing)
        state_root = state_root or config.state
    elif args.landing:
        # Only the location matters for a replay; source and keys are placeholders.
        table = table_from_args(name=args.table, source=".", keys=["-"], landing=args.landing,
                                schema_name=args.schema_name)
    else:
        raise UsageError("missing --landing", hint="give it, or use --config FILE")
    if args.landing_options:
        table = table.with_landing_options(dict(args.landing_options))
    ignore = args.ignore
    if ignore is None:
        head = TableState(state_root or "state", table.state_name).head()
        ignore = list(head.record.exclude) if head else []
    spark = build_spark(args.master)
    results = verify_table(spark, table, state_root or "state", args.snapshot, ignore=ignore,
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
                  + (f" (ignoring {', '.join(ignore)})" if ignore else ""))
        else:
            print(f"{name}: DIFFERENT — sink has {result.mirror_rows} rows, snapshot "
                  f"{result.snapshot_rows}; snapshot rows missing or different for keys "
                  f"{result.missing}; sink rows not in the snapshot for keys {result.unexpected}")
    return 0 if all(r.identical for r in results.values()) else 1


# -- landing contract options, reload and drop (docs/landing.md) ------------------------------


def _add_landing_contract_args(run: argparse.ArgumentParser) -> None:
    add = run.add_argument
    add("--format", dest="file_format", choices=["parquet", "csv", "tsv", "psv", "text"],
        help="landing files: parquet (default) or delimited text")
    add("--file-extension", help="extension of text files (needed with --format text)")
    add("--row-separator", help="text: \\r\\n (default), \\n or \\r")
    add("--column-separator", help="text: one character (default from --format; \\t for tab)")
    add("--quote-char", dest="quote_character", help='text: quote character (default "), or ""')
    add("--escape-char", dest="escape_character", help="text: escape character (default \\), or ''")
    add("--null-value", help="text: how NULL is written (default: empty)")
    add("--encoding", help="text: character encoding (default UTF-8)")
    add("--upsert-default", action="store_true", default=None,
        help="_metadata.json isUpsertDefaultRowMarker: inserts and updates land as UPSERT (4)")
    add("--file-detection", choices=["sequential", "last_update_time"],
        help="last_update_time: fileDetectionStrategy LastUpdateTimeFileDetection")
    add("--schema-policy", choices=["fail", "recreate"],
        help="removed, renamed or retyped columns: fail (default, exit 3) or recreate the table")
    add("--removed-columns", choices=["policy", "null"],
        help="null: a removed column continues as NULL instead of following --schema-policy")
    add("--partner-name", help="_partnerEvents.json partnerName (with --partner-source-type)")
    add("--partner-source-type", help="_partnerEvents.json sourceInfo.sourceType (SQL, Oracle...)")
    add("--partner-source-version", help="_partnerEvents.json sourceInfo.sourceVersion")
    add("--drop-timeout", type=float, help="seconds to wait for a dropped table folder to vanish")


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
    for action in run._actions:  # every run option, including ones added later
        if "-h" not in action.option_strings:
            reload._add_action(action)
    reload.add_argument("--yes", action="store_true", help="confirm: the mirrored table is rebuilt")

    drop = sub.add_parser("drop", parents=[common],
                          help="drop a table on purpose: delete its landing folder and state")
    drop.add_argument("--table", required=True, help="landing table name")
    drop.add_argument("--schema", dest="schema_name", help="schema folder name")
    drop.add_argument("--landing", help="landing zone root (or --config)")
    drop.add_argument("--config", help="TOML config holding the table")
    _add_landing_option_arg(drop)
    drop.add_argument("--state", default=None, help="state root (default ./state)")
    drop.add_argument("--yes", action="store_true", help="confirm: the mirrored table is dropped")


def _cmd_reload(args: argparse.Namespace) -> int:
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
    return _cmd_run(args)


def _cmd_drop(args: argparse.Namespace) -> int:
    from diffcdc.config import load_config, table_from_args
    from diffcdc.sinks.openmirroring.drop import drop_table

    _check_landing_arg(args.landing)
    state_root = args.state
    if args.config:
        config = load_config(args.config)
        table = _config_table(config, args.table, args.config)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
