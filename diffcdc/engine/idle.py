"""Which tables have work, found without Spark: an idle nightly run starts no JVM.

A table has work when a snapshot is pending (newer than its last commit), a committed version
is not yet published by one of its configured sinks, a reload was requested, or a drop was
left unfinished. Everything that can be checked on the way — the source folder, late
snapshots, readable commit records — is checked here, so a typo is reported in well under a
second instead of after Spark's start-up. The engine checks all of it again under the table's
lock; this is only the decision whether to start Spark.
"""

from __future__ import annotations

import logging
import time

from diffcdc.config import TableConfig
from diffcdc.engine.pending import plan_table
from diffcdc.engine.report import TableReport
from diffcdc.errors import DiffcdcError
from diffcdc.state.store import TableState, new_run_id, now_iso

log = logging.getLogger("diffcdc")


def has_work(table: TableConfig, state_root: str) -> bool:
    """Whether a run of ``table`` would do anything (raises DiffcdcError on bad input)."""
    plan = plan_table(table, TableState(state_root, table.state_name))
    if plan.reload is not None or plan.drop or plan.unpublished:
        return True  # the engine settles these (and reports their errors) under the lock
    if plan.error is not None:
        raise plan.error
    return plan.has_work


def idle_report(table: TableConfig, state_root: str) -> TableReport | None:
    """A finished report for a table that needs no Spark (nothing to do, or refused input),
    or None when the table has work. A known table keeps it as its last run; the last run that
    changed something stays in ``last_change.json``, so ``status`` shows both."""
    started = time.monotonic()
    report = TableReport(table.name, new_run_id(), now_iso())
    try:
        if has_work(table, state_root):
            return None
        report.outcome = "nothing to do"
        log.info("%s: no new snapshot", table.name)
    except DiffcdcError as exc:
        exc.table = exc.table or table.name
        log.error("%s", exc)
        log.debug("%s: the error's trace:", table.name, exc_info=exc)
        report.outcome = "failed"
        report.error = exc.to_dict()
    report.seconds = round(time.monotonic() - started, 3)
    state = TableState(state_root, table.state_name)
    if state.has_history():  # a known table (a typo'd one gets no folder)
        try:
            if report.error is None:
                state.save_last_run(report.to_dict())
            else:
                state.save_report(report.to_dict())
        except OSError as save_error:
            log.warning("%s: the run's report could not be saved (%s)", table.name, save_error)
    return report
