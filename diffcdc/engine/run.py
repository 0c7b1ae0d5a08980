"""Running tables: each pending snapshot of a table as its own committed, published step.

Exactly-once protocol (see :mod:`diffcdc.state.store` and :mod:`diffcdc.engine.snapshot`):
under the table's lease a run makes the table's plan (:mod:`diffcdc.engine.plan`) and executes
it: each sink first publishes what an earlier run left unpublished, then new snapshots are
processed oldest first, each committed once for every sink.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from pyspark.sql import SparkSession

from diffcdc.config import RunConfig, TableConfig
from diffcdc.engine.context import RunContext, RunOptions
from diffcdc.engine.plan import RunRequest, TablePlan, plan_table
from diffcdc.engine.progress import RunObserver
from diffcdc.engine.publish import failed_sinks_error, publish_backlog
from diffcdc.engine.report import SnapshotResult, TableReport
from diffcdc.engine.scope import check_where_syntax
from diffcdc.engine.sink_errors import sink_error, under
from diffcdc.engine.snapshot import process_snapshot
from diffcdc.engine.unexpected import unexpected_error
from diffcdc.errors import DiffcdcError, SparkConnectLost, StateOwnerError, error_context
from diffcdc.sources.base import Source
from diffcdc.sources.copies import SnapshotCopies
from diffcdc.sources.registry import build_source
from diffcdc.spark.compat import error_text
from diffcdc.spark.connect import connect_lost
from diffcdc.spark.session import is_connect, spark_label
from diffcdc.state.guard import unreadable_state
from diffcdc.state.prune import prune_versions
from diffcdc.state.root import StateRoot
from diffcdc.state.store import TableState, new_run_id, now_iso

__all__ = ["RunOptions", "RunRequest", "SnapshotResult", "TableReport", "run_many", "run_table"]

log = logging.getLogger("diffcdc")

def run_table(
    spark: SparkSession,
    table: TableConfig,
    state_root: StateRoot | str,
    options: RunOptions = RunOptions(),  # noqa: B008 - frozen
    *,
    source: Source | None = None,
) -> TableReport:
    """Run one table as its plan says, under its lease. Raises DiffcdcError on failure.

    The plan (:func:`~diffcdc.engine.plan.plan_table`) is made once the lease is held: a
    requested reload is recorded first (so a run that dies before committing the re-creation
    leaves it to the next run), each sink publishes what it left unpublished, then every
    snapshot (or a rollback's) becomes its own committed, published version. ``source``
    replaces the source built from the table's config (a DataFrame handed over in Python). The
    report (passed or failed) is saved with the table's state before returning/raising. A
    table with nothing committed or requested keeps no state: a failed first run leaves no
    folder behind.

    Every error built while the table runs names it (:func:`~diffcdc.errors.error_context`),
    and each snapshot's step names its snapshot.
    """
    with error_context(table=table.name, snapshot=None):
        return _run_table(spark, table, state_root, options, source)


def _run_table(spark: SparkSession, table: TableConfig, state_root: StateRoot | str,
               options: RunOptions, source: Source | None) -> TableReport:
    watch = options.watcher()
    state = TableState(state_root, table.state_name)
    report = TableReport(table.name, new_run_id(), now_iso(), overrides=sorted(options.overrides))
    started = time.monotonic()
    existed = state.has_documents()
    plan = None
    try:
        gate = options.gate(table)
        with state.lock(report.run_id, options.lease_seconds):
            try:
                check_where_syntax(spark, table)  # before anything is read: exit 2
                source = source or build_source(table)
                plan = plan_table(table, state, source, options.request)
                watch.table_started(table.name, plan)
                if plan.refusal is not None:
                    raise plan.refusal
                if plan.record_reload and plan.reload is not None:
                    state.requests.save_reload(plan.reload)
                ctx = RunContext.open(spark, table, state, plan, report.run_id, watch, gate,
                                      source)
                try:
                    _execute(ctx, report, watch)
                finally:
                    ctx.close()
            finally:
                if plan is not None and plan.refusal is None:  # never another table's state
                    commits = state.commits()
                    prune_versions(state, options.keep_versions, commits)
                    # Copies of read-once sources: the last keep_snapshots committed ones stay.
                    SnapshotCopies(state.dir, table.name).prune(
                        table.keep_snapshots, [c.snapshot_id for c in commits]
                    )
                if not existed and not state.has_history():
                    # Nothing committed or requested: the folder this run made goes again
                    # (still under the lock, so never one another run is working in).
                    state.forget()
    except Exception as exc:
        lost = connect_lost(spark, exc)
        if lost is not None:
            error = connect_lost_error(spark, lost, table, state, plan, report)
        else:
            # a foreign exception (Spark's, the OS's): our one-line error, built at this boundary
            error = exc if isinstance(exc, DiffcdcError) else unexpected_error(exc, state_dir=state.dir)
        report.outcome = "failed"
        report.error = error.to_dict()
        # The failed run's report, for the caller (run_many, a test); not part of the error's text.
        error.report = report  # type: ignore[attr-defined]
        if error is exc:
            raise
        raise error from exc
    finally:
        report.seconds = round(time.monotonic() - started, 3)
        if not (report.error and report.error.get("error") == StateOwnerError.__name__):
            save_report(state, report)  # never into another table's state folder
    return report


def connect_lost_error(spark: SparkSession, reason: str, table: TableConfig, state: TableState,
                       plan: TablePlan | None, report: TableReport) -> SparkConnectLost:
    """The one line for a table whose Spark Connect server stopped answering: the server, why,
    and what of the table is out (nothing, or the versions this run published or committed)."""
    published = [*report.resumed_versions, *(s.version for s in report.snapshots)]
    start = plan.head.version if plan is not None and plan.head is not None else 0
    try:
        head = state.head()
    except Exception:  # noqa: BLE001 - the state's own trouble is for the next run to say
        head = None
    committed = head.version if head is not None and head.version > start else None
    done = []
    if published:
        done.append(f"version(s) {', '.join(map(str, published))} of {table.name} were "
                    "published before")
    if committed is not None and committed not in published:
        done.append(f"version {committed} of {table.name} is committed; the next run "
                    "publishes it to the sinks it did not reach")
    out = "; ".join(done) if done else f"nothing was published for {table.name}"
    return SparkConnectLost(
        f"{spark_label(spark)} stopped answering ({reason}); {out}",
        table=table.name,
        hint="run again when it is back (the table's lease is released; connect_timeout / "
        "--connect-timeout sets how long a run waits for it)",
    )


def save_report(state: TableState, report: TableReport) -> None:
    """Keep the run's report with a table that has state (a commit, or a reload or drop
    request); failing to never changes the outcome."""
    if not state.has_history():
        return
    try:
        state.reports.save(report.to_dict())
    except (OSError, TypeError, ValueError) as exc:
        log.warning(
            "%s: the run's report could not be saved under %s (%s); the run's outcome is %s",
            report.table, state.storage.describe("reports"), exc, report.outcome,
        )


def run_many(
    spark: SparkSession,
    config: RunConfig,
    options: RunOptions = RunOptions(),  # noqa: B008 - frozen
    *,
    overrides: dict[str, frozenset[str]] | None = None,
    requests: dict[str, RunRequest] | None = None,
) -> list[TableReport]:
    """Run every table of a config; one failing table does not stop the others.

    Up to ``config.parallelism`` tables run at once in the one Spark application, each in its
    own FAIR scheduler pool, each committing, publishing and failing on its own; the reports
    come back in the config's order. ``options`` carries the observer (told each table's
    start, steps and end, from several threads at once); the config's ``keep_versions``,
    ``lease_seconds`` and ``[quality]`` replace its others. ``overrides`` maps a table name to
    the checks allowed to pass for this run, ``requests`` to a reload or rollback asked for.
    """
    watch = options.watcher()
    root = config.state_root()

    def one(table: TableConfig) -> TableReport:
        tag = table_tag(table)
        isolate(spark, tag)
        watch.table_started(table.name, None)
        report = None
        try:
            report = run_table(spark, table, root, replace(
                options, keep_versions=config.keep_versions, lease_seconds=config.lease_seconds,
                quality=config.quality, observer=watch,
                overrides=(overrides or {}).get(table.name, frozenset()),
                request=(requests or {}).get(table.name, RunRequest()),
            ))
            return report
        except DiffcdcError as exc:
            log.error("%s", exc)
            log.debug("%s: the error's trace:", table.name, exc_info=exc)
            report = exc.report  # type: ignore[attr-defined]
            return report
        finally:
            if report is not None:
                watch.table_done(report)
            isolate(spark, None, tag)

    workers = min(len(config.tables), table_parallelism(config.parallelism))
    if workers <= 1:
        return [one(t) for t in config.tables]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="diffcdc-table") as pool:
        return list(pool.map(one, config.tables))


def table_tag(table: TableConfig) -> str:
    """The table's FAIR scheduler pool, or its Spark Connect operation tag (no commas there)."""
    return f"diffcdc-{table.state_name}".replace(",", "_")


def isolate(spark: SparkSession, tag: str | None, previous: str | None = None) -> None:
    """This thread's Spark jobs in the table's own FAIR pool (classic) or under its tag (Spark
    Connect: a session has no pools to pick from; the tag names the table's operations on the
    server); ``None`` ends that, ``previous`` being the tag to drop."""
    if is_connect(spark):
        if tag is not None:
            spark.addTag(tag)
        elif previous is not None:
            spark.removeTag(previous)
        return
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", tag)  # type: ignore[arg-type]


def table_parallelism(configured: int | None) -> int:
    """Tables at once: as configured, else the machine's cores (at least 2, at most 8)."""
    return configured or min(8, max(2, os.cpu_count() or 1))


def _histories_publish_first(ctx: RunContext, superseded: tuple[str, ...],
                             report: TableReport) -> tuple[str, ...]:
    """The reloaded sinks that keep every version (a history: ``needs_snapshot_time``)
    publish what they left unpublished before the reload, when they can: the reload's full
    image would otherwise be merged over the versions they lack, and as of each of those the
    history would show the version before, with exit 0. Returns the sinks whose backlog the
    reload supersedes (the others', and a history's that failed: the reload is what mends
    its target, so the failure does not stop it)."""
    histories = [s for s in superseded if ctx.sinks[s].needs_snapshot_time]
    if not histories:
        return superseded
    ctx.stage(None, "finishing versions a history left unpublished, before the reload")
    published = publish_backlog(ctx, skip=frozenset(ctx.sinks) - set(histories))
    report.resumed_versions.extend(sorted({v for done in published.values() for v in done}
                                          - set(report.resumed_versions)))
    report.backlog_published.update(published)
    failed = [s for s in histories if ctx.failed.pop(s, None) is not None]
    return tuple(s for s in superseded if s not in histories or s in failed)


def _execute(ctx: RunContext, report: TableReport, watch: RunObserver) -> None:
    """The table's plan, step by step."""
    plan, state, say = ctx.plan, ctx.state, ctx.say
    if plan.reload is None:
        state.requests.remove_carried_out()
    for sink in ctx.sinks.values():  # under the lock: our temporary uploads are debris
        try:
            sink.prepare(state.dir)
        except Exception as exc:  # noqa: BLE001 - its disk, server or library: its own
            if under(exc, state.dir):
                raise  # the state's disk: the state's failure
            ctx.fail_sink(sink_error(sink, exc, "preparing its target"), "at the start")
    superseded = _histories_publish_first(ctx, plan.superseded, report)
    if superseded:
        say(f"the requested reload supersedes what {', '.join(superseded)} left unpublished")
    if plan.publishes_first:
        ctx.stage(None, "finishing versions left unpublished by an earlier run")
        published = publish_backlog(ctx, skip=plan.reloading)
        report.resumed_versions.extend(sorted({v for done in published.values() for v in done}
                                              - set(report.resumed_versions)))
        report.backlog_published.update(published)
    if plan.error is not None:
        raise plan.error
    if plan.rollback_to is not None:
        say(f"rolling back to version {plan.rollback_to} (snapshot "
            f"{plan.snapshots[0].snapshot_id})")
    _process(ctx, report, watch)
    if ctx.failed:
        raise failed_sinks_error(ctx)
    if not report.snapshots and plan.rollback_to is None:
        say("no new snapshot")
        report.outcome = "ok" if report.resumed_versions else "nothing to do"


def _process(ctx: RunContext, report: TableReport, watch: RunObserver) -> None:
    """Each snapshot of the plan as its own committed, published version, oldest first (the
    first one carries out the plan's reload)."""
    for index, entry in enumerate(ctx.plan.snapshots):
        try:
            with error_context(snapshot=entry.snapshot_id):  # its errors name the snapshot
                result = process_snapshot(ctx, entry, ctx.state.commits(),
                                          ctx.plan.reload if index == 0 else None)
        except DiffcdcError as exc:
            report.refused_gate = getattr(exc, "gate", [])
            raise
        except Exception as exc:  # Spark's or the OS's: our one-line error, built here
            damaged = unreadable_state(f"{exc}\n{error_text(exc)}", ctx.state)
            raise (damaged or unexpected_error(exc, entry, ctx.state.dir)) from exc
        if result is not None:
            report.snapshots.append(result)
            watch.snapshot_done(ctx.table.name, result)
