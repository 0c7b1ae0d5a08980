"""Running tables: each pending snapshot of a table as its own committed, published step.

Exactly-once protocol (see :mod:`diffcdc.state.store` and :mod:`diffcdc.engine.snapshot`):
a run first finishes publishing a committed version left unpublished by a crashed run (per
sink), then processes new snapshots oldest first, each committed once for every sink.
"""

from __future__ import annotations

import logging
import os
import time

from pyspark.sql import SparkSession

from diffcdc.config import RunConfig, TableConfig
from diffcdc.core.quality import QualityConfig
from diffcdc.engine.context import RunContext
from diffcdc.engine.gate import Gate
from diffcdc.engine.publish import configured_unpublished, publish_version
from diffcdc.engine.report import Progress, SnapshotResult, TableReport
from diffcdc.engine.snapshot import process_snapshot
from diffcdc.errors import DiffcdcError, InputRefused, StateError
from diffcdc.sources.base import PendingSnapshot, Source
from diffcdc.sources.copies import SnapshotCopies
from diffcdc.sources.files import pending_snapshots
from diffcdc.state.store import TableState, new_run_id, now_iso

__all__ = ["SnapshotResult", "TableReport", "pending_snapshots", "run_many", "run_table"]

log = logging.getLogger("diffcdc")

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
    source: Source | None = None,
) -> TableReport:
    """Process every pending snapshot of one table. Raises DiffcdcError on failure.

    ``quality`` holds the global gate settings (the table's own ``quality`` replaces fields of
    it); ``overrides`` names checks allowed to pass for this one run. The report (passed or
    failed) is saved with the table's state before returning/raising. ``reload`` re-creates
    the table (``diffcdc reload``): the request is recorded in state first, so a run that
    dies before committing the re-creation leaves it to the next run. ``source`` replaces the
    source built from the table's config (a DataFrame handed over in Python).
    """
    say = progress or (lambda message: log.info("%s: %s", table.name, message))
    state = TableState(state_root, table.state_name)
    report = TableReport(table.name, new_run_id(), now_iso(), overrides=sorted(overrides))
    started = time.monotonic()
    try:
        gate = Gate((quality or QualityConfig()).merged(table.quality), overrides)
        with state.lock():
            if reload:
                state.request_reload("requested with diffcdc reload")
            try:
                ctx = RunContext.open(spark, table, state, report.run_id, say, gate, source)
                _run_locked(ctx, report)
            finally:
                state.prune(keep_versions)
                # Copies of read-once sources: the last keep_snapshots committed ones stay.
                SnapshotCopies(state.dir, table.name).prune(
                    table.keep_snapshots, [c.snapshot_id for c in state.commits()]
                )
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
        if os.path.isdir(state.dir):
            state.save_report(report.to_dict())
    return report


def run_many(
    spark: SparkSession,
    config: RunConfig,
    progress: Progress | None = None,
    overrides: dict[str, frozenset[str]] | None = None,
    reload: frozenset[str] = frozenset(),
) -> list[TableReport]:
    """Run every table of a config; one failing table does not stop the others.

    ``overrides`` maps a table name to the checks allowed to pass for this run; the tables
    named in ``reload`` are re-created (``diffcdc reload``).
    """
    reports = []
    for table in config.tables:
        try:
            reports.append(
                run_table(
                    spark,
                    table,
                    config.state,
                    keep_versions=config.keep_versions,
                    progress=progress,
                    quality=config.quality,
                    overrides=(overrides or {}).get(table.name, frozenset()),
                    reload=table.name in reload,
                )
            )
        except DiffcdcError as exc:
            log.error("%s", exc)
            reports.append(exc.report)  # type: ignore[attr-defined]
    return reports


_UNREADABLE = (
    "FAILED_READ_FILE",
    "CANNOT_READ_FILE_FOOTER",
    "MALFORMED",
    "is not a Parquet file",
    "PARQUET_COLUMN_DATA_TYPE_MISMATCH",
)


def unexpected_error(exc: BaseException, snapshot: PendingSnapshot | None = None) -> DiffcdcError:
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


def _run_locked(ctx: RunContext, report: TableReport) -> None:
    try:
        _run_pending(ctx, report)
    finally:
        ctx.close()


def _run_pending(ctx: RunContext, report: TableReport) -> None:
    table, state, say = ctx.table, ctx.state, ctx.say
    if os.path.exists(state.drop_path):
        raise StateError(
            "a drop of this table was started and has not finished",
            table=table.name,
            path=state.drop_path,
            hint=f"finish it with 'diffcdc drop --table {table.name} --yes', then run again",
        )
    for sink in ctx.sinks.values():  # under the lock: our temporary uploads are debris
        sink.prepare(state.dir)
    request = state.reload_request()
    head = state.head()
    if head is not None and configured_unpublished(ctx, head):
        if request is not None:
            # The requested re-creation rebuilds every sink from a full image: finishing this
            # batch first would be wasted (and may be impossible: lost files).
            say(f"version {head.version} is left unpublished: the requested reload supersedes it")
        else:
            say(f"finishing version {head.version} left unpublished by an earlier run")
            publish_version(ctx, head)
            report.resumed_versions.append(head.version)
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
    for index, entry in enumerate(pending):
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
        if result is not None:
            report.snapshots.append(result)
    if not report.snapshots:
        say("no new snapshot")
        report.outcome = "ok" if report.resumed_versions else "nothing to do"
