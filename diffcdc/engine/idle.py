"""Which tables have work, found without Spark: an idle nightly run starts no JVM.

A table has work when a snapshot is pending (newer than its last commit), a committed version
is not yet published by one of its configured sinks, or a reload or rollback was asked for (the
plan of :mod:`diffcdc.engine.plan`). Everything the plan checks — the source folder, late
snapshots, readable commit records, an unfinished drop, a missing secret — is found here, so a
typo is reported in well under a second instead of after Spark's start-up. The run makes the
same plan again under the table's lease (another run may have moved the table on meanwhile);
this is only the decision whether to start Spark.
"""

from __future__ import annotations

import logging
import time

from diffcdc.config import TableConfig
from diffcdc.engine.plan import TablePlan
from diffcdc.engine.report import TableReport
from diffcdc.errors import DiffcdcError, StateOwnerError, error_context
from diffcdc.state.root import StateRoot
from diffcdc.state.store import TableState, new_run_id, now_iso

log = logging.getLogger("diffcdc")


def idle_report(table: TableConfig, state_root: StateRoot | str, plan: TablePlan
                ) -> TableReport | None:
    """A finished report for a table that needs no Spark (nothing to do, or refused input),
    or None when the table has work, as its plan (:func:`~diffcdc.engine.plan.plan_table`)
    says: the plan ``diffcdc plan`` prints, so the two can never disagree. A known idle table
    keeps it as its last run only: its reports and ``last_change.json`` keep the last run that
    did something. Every error found names the table
    (:func:`~diffcdc.errors.error_context`)."""
    with error_context(table=table.name, snapshot=None):
        return _idle_report(table, state_root, plan)


def _idle_report(table: TableConfig, state_root: StateRoot | str, plan: TablePlan
                 ) -> TableReport | None:
    started = time.monotonic()
    report = TableReport(table.name, new_run_id(), now_iso())
    try:
        if plan.refusal is not None:
            raise plan.refusal
        if plan.error is not None and not plan.publishes_first:
            raise plan.error  # else the run publishes what is left first, then refuses
        if plan.has_work:
            return None
        report.outcome = "nothing to do"
        log.info("%s: no new snapshot", table.name)
        state = TableState(state_root, table.state_name)
        if state.has_history():  # its last run, for status (the last change stays as it was)
            try:
                state.reports.save_idle(report.to_dict())
            except OSError as save_error:
                log.warning("%s: the run's report could not be saved (%s)", table.name, save_error)
    except DiffcdcError as exc:
        log.error("%s", exc)
        report.outcome = "failed"
        report.error = exc.to_dict()
        state = TableState(state_root, table.state_name)
        # A known table: status shows the failure (never in another table's state folder).
        if state.storage.list("log") and not isinstance(exc, StateOwnerError):
            from diffcdc.engine.run import save_report

            report.seconds = round(time.monotonic() - started, 3)
            save_report(state, report)
    report.seconds = round(time.monotonic() - started, 3)
    return report
