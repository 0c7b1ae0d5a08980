"""``diffcdc run`` and ``diffcdc reload``: build the run config, run the tables, summarize."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

from diffcdc.cli.progress import choose_progress
from diffcdc.cli.summary import format_summary, totals_line
from diffcdc.errors import UsageError

if TYPE_CHECKING:
    from diffcdc.config import RunConfig
    from diffcdc.engine.plan import RunRequest, TablePlan

log = logging.getLogger("diffcdc")


def cmd_run(args: argparse.Namespace) -> int:
    """Check everything that needs no Spark first (config, paths, names, override names,
    pending snapshots); start Spark only when some table has work."""
    started = time.monotonic()
    return _run(args, build_run_config(args), {}, started)


def _run(args: argparse.Namespace, config: RunConfig, requests: dict[str, RunRequest],
         started: float) -> int:
    """Run the tables of ``config`` (loaded once, by the command) with what the command asks
    of them (``reload``, ``rollback``: ``requests``)."""
    from diffcdc.engine.idle import idle_report

    plans = plan_tables(args, config, requests)
    overrides = check_overrides(args.override_check, config)
    from diffcdc.observe.hook import run_observers

    observer = run_observers(config, choose_progress(args.quiet, terminal=sys.stderr.isatty()),
                             getattr(args, "metrics_file", None),
                             getattr(args, "config_tables", None))
    run_log: list[Any] = []
    try:
        # No Spark before it is needed: tables with nothing to do are settled first.
        root = config.state_root()
        idle = {t.name: idle_report(t, root, plans[t.name]) for t in config.tables}
        busy = [t for t in config.tables if idle[t.name] is None]
        done = {}
        if busy:
            done = {r.table: r for r in _run_busy(args, config, busy, overrides, requests,
                                                  observer, run_log)}
    except BaseException as exc:  # the run ends here: its metrics file says so
        observer.close()
        observer.crashed(exc, time.monotonic() - started)
        raise
    else:
        observer.close()
    reports = [idle[t.name] or done[t.name] for t in config.tables]
    dicts = [r.to_dict() for r in reports]
    totals = totals_line(dicts, time.monotonic() - started)
    log.debug("%s", totals)  # the run's log file
    if args.json:
        print(json.dumps({"ok": all(r.error is None for r in reports),
                          "log": run_log[0].path if run_log else None,
                          "tables": dicts}, indent=1, default=str))
    else:
        print(format_summary(dicts))
        print(totals)
    code = max((r.exit_code for r in reports), default=0)
    observer.finish(reports, code, time.monotonic() - started)  # lineage of tables refused before Spark; the metrics file
    return code


def build_run_config(args: argparse.Namespace) -> RunConfig:
    """The run's config from ``--config`` or the single-table options (``run``, ``reload``,
    ``rollback`` and ``plan``)."""
    from diffcdc.cli.settings import run_config_from_args

    return run_config_from_args(args)


def plan_tables(args: argparse.Namespace, config: RunConfig,
                requests: dict[str, RunRequest] | None = None) -> dict[str, TablePlan]:
    """Every table's plan (no Spark, nothing written); a refused state root refuses the
    whole command before any table runs."""
    from diffcdc.engine.plan import RunRequest, plan_table, refuse_state_roots
    from diffcdc.state.store import TableState

    root = config.state_root()
    state_given = bool(args.state or args.config)
    plans = {t.name: plan_table(t, TableState(root, t.state_name),
                                request=(requests or {}).get(t.name, RunRequest()),
                                state_given=state_given)
             for t in config.tables}
    refuse_state_roots(list(plans.values()))
    return plans


def check_overrides(values: list[str], config: RunConfig) -> dict[str, frozenset[str]]:
    """``--override-check`` options per table, checked by the gate before Spark."""
    from diffcdc.engine.gate import check_overrides as gate_overrides

    return gate_overrides(values, {t.name: config.quality.merged(t.quality)
                                   for t in config.tables})


def _run_busy(args: argparse.Namespace, config: Any, busy: list[Any],
              overrides: dict[str, frozenset[str]], requests: dict[str, RunRequest],
              observer: Any, run_log: list[Any]) -> list[Any]:
    """Start Spark (its console output into the run's log file unless --debug) and run."""
    from diffcdc.engine.executors import check_executor_python
    from diffcdc.engine.run import RunOptions, run_many
    from diffcdc.runlog import logged_spark
    from diffcdc.spark.session import master_label

    log.info("starting Spark (%s) for %d table(s)",
             master_label(config.spark.master, config.spark.remote), len(busy))
    spark, opened = logged_spark(config.state_root().logs_base(), args.debug, config.spark.master,
                                 config.spark.conf,
                                 jars=config.model_copy(update={"tables": busy}).jars(),
                                 remote=config.spark.remote,
                                 connect_timeout=config.spark.connect_timeout)
    run_log.extend([opened] if opened else [])
    check_executor_python(spark, busy)  # a cluster's executors: before any table starts
    observer.spark_started(spark)
    return run_many(spark, config.model_copy(update={"tables": busy}),
                    RunOptions(observer=observer), overrides=overrides, requests=requests)


def cmd_reload(args: argparse.Namespace) -> int:
    from diffcdc.engine.plan import RunRequest

    started = time.monotonic()
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
        args.only_option = "--only" if args.only else "--table"
        args.only, args.table = names, None
    wanted = tuple(dict.fromkeys(args.reload_sink))
    if wanted and len(names) != 1:
        raise UsageError("reload --sink takes one table", hint="give one --table")
    config = build_run_config(args)
    sinks = _reload_sinks(config, names[0], wanted) if wanted else ()
    requests = {name: RunRequest(reload=True, reload_sinks=sinks) for name in names}
    return _run(args, config, requests, started)


def _reload_sinks(config: RunConfig, name: str, wanted: tuple[str, ...]) -> tuple[str, ...]:
    """The sinks of ``reload --sink``, each a sink of the one table reloaded (exit 2 else)."""
    tables = [t for t in config.tables if t.name == name]
    known = [s.sink_id for t in tables for s in t.sinks]
    unknown = [s for s in wanted if s not in known]
    if unknown:
        raise UsageError(
            f"reload --sink {unknown[0]}: table {name} has no sink of that name",
            hint="its sinks: " + (", ".join(known) or "none"),
        )
    return wanted


def cmd_rollback(args: argparse.Namespace) -> int:
    from diffcdc.engine.plan import RunRequest

    started = time.monotonic()
    if not args.table:
        raise UsageError("rollback needs --table (with --config: the table to roll back)")
    if not args.yes:
        raise UsageError(
            f"refusing to roll {args.table} back without --yes: every sink gets the changes back "
            f"to version {args.to_version}'s snapshot, published as a new version",
            hint="add --yes to confirm",
        )
    if args.config:
        args.only, args.table, args.only_option = [args.table], None, "--table"
        name = args.only[0]
    else:
        name = args.table
    requests = {name: RunRequest(rollback_to=args.to_version)}
    return _run(args, build_run_config(args), requests, started)
