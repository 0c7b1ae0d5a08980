"""Running tables: each pending snapshot of a table as its own committed, published step.

Exactly-once protocol (see :mod:`diffcdc.state.store` and :mod:`diffcdc.engine.snapshot`):
a run first finishes publishing a committed version left unpublished by a crashed run (per
sink), then processes new snapshots oldest first, each committed once for every sink.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from diffcdc.config import RunConfig, TableConfig
from diffcdc.core.quality import QualityConfig
from diffcdc.engine.pending import TablePlan, pending_snapshots, plan_table
from diffcdc.engine.progress import MessageObserver, RunObserver
from diffcdc.engine.report import Progress, SnapshotResult, TableReport
from diffcdc.errors import DiffcdcError, InputRefused
from diffcdc.sources.files import SnapshotEntry
from diffcdc.state.store import TableState, new_run_id, now_iso

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from diffcdc.engine.context import RunContext

__all__ = ["SnapshotResult", "TableReport", "pending_snapshots", "run_many", "run_table"]

log = logging.getLogger("diffcdc")
#: Full traces of failed tables: the command line sends them to the run's log file.
trace_log = logging.getLogger("diffcdc.trace")
trace_log.addHandler(logging.NullHandler())
trace_log.propagate = False


def run_table(
    spark: SparkSession,
    table: TableConfig,
    state_root: str,
    *,
    keep_versions: int = 10,
    progress: Progress | None = None,
    quality: QualityConfig | None = None,
    overrides: frozenset[str] = frozenset(),
    reload: bool = False,
    observer: RunObserver | None = None,
) -> TableReport:
    """Process every pending snapshot of one table. Raises DiffcdcError on failure.

    ``quality`` holds the global gate settings (the table's own ``quality`` replaces fields of
    it); ``overrides`` names checks allowed to pass for this one run. The report (passed or
    failed) is saved with the table's state before returning/raising; a table with nothing
    committed or requested keeps no state at all (a failed first run leaves no folder behind).
    ``reload`` re-creates the table (``diffcdc reload``): the request is recorded in state
    first, so a run that dies before committing the re-creation leaves it to the next run.
    ``observer`` (or the older ``progress`` callable) is told what the run is doing.
    """
    watch = observer or (MessageObserver(progress) if progress else RunObserver())
    state = TableState(state_root, table.state_name)
    report = TableReport(table.name, new_run_id(), now_iso(), overrides=sorted(overrides))
    started = time.monotonic()
    existed = os.path.isdir(state.dir)
    try:
        from diffcdc.engine.context import RunContext
        from diffcdc.engine.gate import Gate

        gate = Gate((quality or QualityConfig()).merged(table.quality), overrides)
        with state.lock():
            if reload:
                state.request_reload("requested with diffcdc reload")
            try:
                ctx = RunContext.open(
                    spark, table, state, report.run_id,
                    lambda message: watch.message(table.name, message), gate,
                    stage=lambda snapshot, step: watch.stage(table.name, snapshot, step),
                )
                _run_locked(ctx, report, watch)
            finally:
                state.prune(keep_versions)
                if not existed and not state.has_history():
                    # Nothing committed or requested: the folder this run made goes again
                    # (still under the lock, so never one another run is working in).
                    shutil.rmtree(state.dir, ignore_errors=True)
    except Exception as exc:
        error = exc if isinstance(exc, DiffcdcError) else unexpected_error(exc)
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
        _keep_report(state, report)
    return report


def run_many(
    spark: SparkSession | Callable[[], SparkSession],
    config: RunConfig,
    progress: Progress | None = None,
    overrides: dict[str, frozenset[str]] | None = None,
    reload: frozenset[str] = frozenset(),
    observer: RunObserver | None = None,
) -> list[TableReport]:
    """Run every table of a config; one failing table does not stop the others.

    ``spark`` may be a function that builds the session: it is called once, and only when
    some table has work (a snapshot to diff or a version to publish); a run with nothing
    pending touches no Spark. ``overrides`` maps a table name to the checks allowed to pass
    for this run; the tables named in ``reload`` are re-created (``diffcdc reload``).
    """
    watch = observer or (MessageObserver(progress) if progress else RunObserver())
    session: list[SparkSession] = []

    def get_spark() -> SparkSession:
        if not session:
            session.append(spark() if callable(spark) else spark)
            watch.spark_started(session[0])
        return session[0]

    reports = []
    for table in config.tables:
        checks = (overrides or {}).get(table.name, frozenset())
        state = TableState(config.state, table.state_name)
        try:
            try:
                plan = plan_table(table, state)
            except Exception as exc:  # unreadable state: this table fails, the others run
                error = exc if isinstance(exc, DiffcdcError) else unexpected_error(exc)
                error.table = error.table or table.name
                error.report = _failed(table, error, checks)  # type: ignore[attr-defined]
                if error is exc:
                    raise
                raise error from exc
            watch.table_started(table.name, plan)
            if table.name in reload or plan.has_work:
                report = run_table(
                    get_spark(), table, config.state, keep_versions=config.keep_versions,
                    quality=config.quality, overrides=checks, reload=table.name in reload,
                    observer=watch,
                )
            else:
                report = _idle_run(table, state, plan, checks, watch)
        except DiffcdcError as exc:
            log.error("%s", exc)
            trace_log.error("%s failed: %s", table.name, exc, exc_info=exc)
            report = exc.report  # type: ignore[attr-defined]
        watch.table_done(report)
        reports.append(report)
    return reports


def _idle_run(
    table: TableConfig, state: TableState, plan: TablePlan, overrides: frozenset[str],
    watch: RunObserver,
) -> TableReport:
    """A table with nothing to diff or publish: its report, without Spark; raises the error
    the plan found (missing source, late snapshot ...) as the run would have."""
    report = TableReport(table.name, new_run_id(), now_iso(), overrides=sorted(overrides))
    try:
        if plan.error is not None:
            raise plan.error
        if os.path.isdir(state.dir):
            with state.lock():  # a run working on the table right now is reported, as ever
                pass
        watch.message(table.name, "no new snapshot")
        report.outcome = "nothing to do"
    except DiffcdcError as exc:
        report.outcome = "failed"
        report.error = exc.to_dict()
        exc.report = report  # type: ignore[attr-defined]
        raise
    finally:
        _keep_report(state, report)
    return report


def _failed(table: TableConfig, error: DiffcdcError, overrides: frozenset[str]) -> TableReport:
    report = TableReport(table.name, new_run_id(), now_iso(), overrides=sorted(overrides))
    report.outcome, report.error = "failed", error.to_dict()
    return report


def _keep_report(state: TableState, report: TableReport) -> None:
    """Save the report with a table that has state (a commit, a reload or drop request)."""
    if state.has_history():
        state.save_report(report.to_dict())


_UNREADABLE = (
    "FAILED_READ_FILE",
    "CANNOT_READ_FILE_FOOTER",
    "MALFORMED",
    "is not a Parquet file",
    "PARQUET_COLUMN_DATA_TYPE_MISMATCH",
)


def unexpected_error(exc: BaseException, snapshot: SnapshotEntry | None = None) -> DiffcdcError:
    """Turn a Spark/OS exception into a one-line DiffcdcError (the trace stays chained)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if snapshot is not None and any(marker in text for marker in _UNREADABLE):
        return InputRefused(
            f"cannot read snapshot: {first[:300]}",
            snapshot=snapshot.snapshot_id,
            path=snapshot.path,
            hint="the file is corrupt or truncated; replace it and run again",
        )
    return DiffcdcError(
        f"{type(exc).__name__}: {first[:300]}",
        snapshot=snapshot.snapshot_id if snapshot else None,
        hint="run again with --debug for the full trace",
    )


def _run_locked(ctx: RunContext, report: TableReport, watch: RunObserver) -> None:
    try:
        _run_pending(ctx, report, watch)
    finally:
        ctx.close()


def _run_pending(ctx: RunContext, report: TableReport, watch: RunObserver) -> None:
    from diffcdc.engine.publish import publish_version
    from diffcdc.engine.snapshot import process_snapshot

    table, state, say = ctx.table, ctx.state, ctx.say
    plan = plan_table(table, state)  # again, under the lock: what the run does now
    if os.path.exists(state.drop_path) and plan.error is not None:
        raise plan.error
    for sink in ctx.sinks.values():  # under the lock: our temporary uploads are debris
        sink.prepare(state.dir)
    request = state.reload_request()
    head = plan.head
    if head is not None and plan.unpublished:
        if request is not None:
            # The requested re-creation rebuilds every sink from a full image: finishing this
            # batch first would be wasted (and may be impossible: lost files).
            say(f"version {head.version} is left unpublished: the requested reload supersedes it")
        else:
            ctx.stage(None, f"finishing version {head.version} left unpublished by an earlier run")
            publish_version(ctx, head)
            report.resumed_versions.append(head.version)
    if plan.error is not None:
        raise plan.error
    if not plan.snapshots:
        say("no new snapshot")
        report.outcome = "ok" if report.resumed_versions else "nothing to do"
        return
    for index, entry in enumerate(plan.snapshots):
        try:
            result = process_snapshot(
                ctx, entry, state.head(), reload_request=request if index == 0 else None
            )
        except DiffcdcError as exc:
            exc.snapshot = exc.snapshot or entry.snapshot_id
            report.refused_gate = getattr(exc, "gate", [])
            raise
        except Exception as exc:
            raise unexpected_error(exc, entry) from exc
        report.snapshots.append(result)
        watch.snapshot_done(table.name, result)
