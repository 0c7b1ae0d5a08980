"""Running tables: each pending snapshot of a table as its own committed, published step.

Exactly-once protocol (see :mod:`diffcdc.state.store` and :mod:`diffcdc.engine.snapshot`):
a run first finishes publishing a committed version left unpublished by a crashed run (per
sink), then processes new snapshots oldest first, each committed once for every sink.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql import SparkSession

from diffcdc.config import RunConfig, TableConfig
from diffcdc.core.quality_config import QualityConfig
from diffcdc.engine.context import RunContext
from diffcdc.engine.gate import Gate
from diffcdc.engine.progress import MessageObserver, RunObserver
from diffcdc.engine.publish import failed_sinks_error, publish_backlog, reload_sinks, sink_backlog
from diffcdc.engine.report import Progress, SnapshotResult, TableReport
from diffcdc.engine.rollback import rollback_entry
from diffcdc.engine.snapshot import process_snapshot
from diffcdc.engine.unexpected import unexpected_error
from diffcdc.errors import DiffcdcError, InputRefused, StateError, StateOwnerError
from diffcdc.sources.base import PendingSnapshot, Source
from diffcdc.sources.copies import SnapshotCopies
from diffcdc.sources.files import pending_snapshots
from diffcdc.state.lease import DEFAULT_LEASE_SECONDS
from diffcdc.state.owner import check_owner
from diffcdc.state.prune import prune_versions
from diffcdc.state.root import StateRoot
from diffcdc.state.store import TableState, new_run_id, now_iso

__all__ = ["SnapshotResult", "TableReport", "pending_snapshots", "run_many", "run_table"]

log = logging.getLogger("diffcdc")

def run_table(
    spark: SparkSession,
    table: TableConfig,
    state_root: StateRoot | str,
    *,
    keep_versions: int = 10,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    progress: Progress | None = None,
    quality: QualityConfig | None = None,
    overrides: frozenset[str] = frozenset(),
    reload: bool = False,
    rollback_to: int | None = None,
    source: Source | None = None,
    reload_sinks: tuple[str, ...] = (),
    observer: RunObserver | None = None,
) -> TableReport:
    """Process every pending snapshot of one table. Raises DiffcdcError on failure.

    ``quality`` holds the global gate settings (the table's own ``quality`` replaces fields of
    it); ``overrides`` names checks allowed to pass for this one run. The report (passed or
    failed) is saved with the table's state before returning/raising. ``reload`` re-creates
    the table (``diffcdc reload``): the request is recorded in state first, so a run that
    dies before committing the re-creation leaves it to the next run; with ``reload_sinks`` only
    those sinks start afresh from a full image (``diffcdc reload --sink``), the others go on
    with the diff. ``rollback_to`` publishes
    the way back to that kept version's snapshot as a new version (``diffcdc rollback``; see
    :mod:`diffcdc.engine.rollback`) instead of processing pending snapshots. ``source``
    replaces the source built from the table's config (a DataFrame handed over in Python).
    ``observer`` (or the older ``progress`` callable) is told what the run does. A table with
    nothing committed or requested keeps no state: a failed first run leaves no folder behind.
    """
    watch = observer or (MessageObserver(progress) if progress else RunObserver())
    state = TableState(state_root, table.state_name)
    report = TableReport(table.name, new_run_id(), now_iso(), overrides=sorted(overrides))
    started = time.monotonic()
    existed = state.has_documents()
    try:
        gate = Gate((quality or QualityConfig()).merged(table.quality), overrides)
        with state.lock(report.run_id, lease_seconds):
            check_owner(state, table.name, table.schema_name)
            if reload:
                why = "requested with diffcdc reload" + (
                    f" --sink {','.join(reload_sinks)}" if reload_sinks else "")
                state.requests.request_reload(why, reload_sinks)
            try:
                ctx = RunContext.open(
                    spark, table, state, report.run_id,
                    lambda message: watch.message(table.name, message), gate, source,
                    stage=lambda snapshot, step: watch.stage(table.name, snapshot, step),
                )
                _run_locked(ctx, report, rollback_to, watch)
            finally:
                prune_versions(state, keep_versions)
                # Copies of read-once sources: the last keep_snapshots committed ones stay.
                SnapshotCopies(state.dir, table.name).prune(
                    table.keep_snapshots, [c.snapshot_id for c in state.commits()]
                )
                if not existed and not state.has_history():
                    # Nothing committed or requested: the folder this run made goes again
                    # (still under the lock, so never one another run is working in).
                    state.forget()
    except Exception as exc:
        error = exc if isinstance(exc, DiffcdcError) else unexpected_error(exc, state_dir=state.dir)
        if error.table is None:
            error.table = table.name
        report.outcome = "failed"
        report.error = error.to_dict()
        error.report = report  # type: ignore[attr-defined]
        if error is exc:
            raise
        raise error from exc
    finally:
        report.seconds = round(time.monotonic() - started, 3)
        if not (report.error and report.error.get("error") == StateOwnerError.__name__):
            save_report(state, report)  # never into another table's state folder
    return report


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
    progress: Progress | None = None,
    overrides: dict[str, frozenset[str]] | None = None,
    reload: frozenset[str] = frozenset(),
    rollback: dict[str, int] | None = None,
    observer: RunObserver | None = None,
    reload_sinks: tuple[str, ...] = (),
) -> list[TableReport]:
    """Run every table of a config; one failing table does not stop the others.

    Up to ``config.parallelism`` tables run at once in the one Spark application, each in its
    own FAIR scheduler pool, each committing, publishing and failing on its own; the reports
    come back in the config's order. ``overrides`` maps a table name to the checks allowed to
    pass for this run; the tables named in ``reload`` are re-created (``diffcdc reload``), or
    with ``reload_sinks`` only those sinks of them get a full image;
    ``rollback`` maps a table name to the kept version it is rolled back to. ``observer`` is
    told each table's start, steps and end (from several threads at once).
    """
    watch = observer or (MessageObserver(progress) if progress else RunObserver())
    root = config.state_root()

    def one(table: TableConfig) -> TableReport:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", f"diffcdc-{table.state_name}")
        watch.table_started(table.name, None)
        report = None
        try:
            report = run_table(
                spark,
                table,
                root,
                keep_versions=config.keep_versions,
                lease_seconds=config.lease_seconds,
                progress=progress,
                quality=config.quality,
                overrides=(overrides or {}).get(table.name, frozenset()),
                reload=table.name in reload,
                rollback_to=(rollback or {}).get(table.name),
                observer=watch,
                reload_sinks=reload_sinks if table.name in reload else (),
            )
            return report
        except DiffcdcError as exc:
            log.error("%s", exc)
            log.debug("%s: the error's trace:", table.name, exc_info=exc)
            report = exc.report  # type: ignore[attr-defined]
            return report
        finally:
            if report is not None:
                watch.table_done(report)
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]

    workers = min(len(config.tables), table_parallelism(config.parallelism))
    if workers <= 1:
        return [one(t) for t in config.tables]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="diffcdc-table") as pool:
        return list(pool.map(one, config.tables))


def table_parallelism(configured: int | None) -> int:
    """Tables at once: as configured, else the machine's cores (at least 2, at most 8)."""
    return configured or min(8, max(2, os.cpu_count() or 1))


def _run_locked(
    ctx: RunContext, report: TableReport, rollback_to: int | None, watch: RunObserver
) -> None:
    try:
        _run_pending(ctx, report, rollback_to, watch)
    finally:
        ctx.close()


def _run_pending(
    ctx: RunContext, report: TableReport, rollback_to: int | None, watch: RunObserver
) -> None:
    table, state, say = ctx.table, ctx.state, ctx.say
    if state.requests.has_drop_request():
        raise StateError(
            "a drop of this table was started and has not finished",
            table=table.name,
            path=state.requests.drop_path,
            hint=f"finish it with 'diffcdc drop --table {table.name} --yes', then run again",
        )
    for sink in ctx.sinks.values():  # under the lock: our temporary uploads are debris
        sink.prepare(state.dir)
    request = state.requests.reload_request()
    head = state.head()
    commits = state.commits()
    reloading = reload_sinks(request, ctx.sinks)
    # The requested reload rebuilds these sinks from a full image: publishing their backlog
    # first would be wasted (and may be impossible: a lost target).
    superseded = [s for s in reloading if sink_backlog(commits, s)]
    if superseded:
        say(f"the requested reload supersedes what {', '.join(superseded)} left unpublished")
    if any(sink_backlog(commits, s) for s in ctx.sinks if s not in reloading):
        ctx.stage(None, "finishing versions left unpublished by an earlier run")
        report.resumed_versions.extend(publish_backlog(ctx, skip=reloading))
    if rollback_to is not None:
        entry = rollback_entry(ctx, rollback_to)
        say(f"rolling back to version {rollback_to} (snapshot {entry.snapshot_id})")
        _process(ctx, report, [entry], None, watch, rollback_to)
        if ctx.failed:
            raise failed_sinks_error(ctx)
        return
    pending = ctx.source.pending(state.commits())
    if request is not None and not pending and head is not None:
        # Reload from the last committed snapshot when nothing newer is waiting.
        again = ctx.source.again(head.snapshot_id)
        if again is None:
            raise InputRefused(
                f"nothing to reload from: the last snapshot {head.snapshot_id} is no longer in "
                "the source folder",
                table=table.name,
                path=ctx.source.describe(),
                hint="put a current snapshot into the source folder and run again (the reload "
                "stays requested)",
            )
        pending = [again]
    _process(ctx, report, pending, request, watch)
    if ctx.failed:
        raise failed_sinks_error(ctx)
    if not report.snapshots:
        say("no new snapshot")
        report.outcome = "ok" if report.resumed_versions else "nothing to do"


def _process(
    ctx: RunContext,
    report: TableReport,
    pending: list[PendingSnapshot],
    request: dict[str, Any] | None,
    watch: RunObserver,
    rollback_to: int | None = None,
) -> None:
    """Each snapshot as its own committed, published version, oldest first."""
    for index, entry in enumerate(pending):
        try:
            result = process_snapshot(
                ctx, entry, ctx.state.head(), reload_request=request if index == 0 else None,
                rollback_to=rollback_to,
            )
        except DiffcdcError as exc:
            exc.snapshot = exc.snapshot or entry.snapshot_id
            report.refused_gate = getattr(exc, "gate", [])
            raise
        except Exception as exc:
            raise unexpected_error(exc, entry, ctx.state.dir) from exc
        if result is not None:
            report.snapshots.append(result)
            watch.snapshot_done(ctx.table.name, result)
