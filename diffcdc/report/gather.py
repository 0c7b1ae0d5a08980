"""The report's records from what state holds: pure, no IO.

A table's figures are ``status``'s own (:func:`diffcdc.engine.status.table_status`'s entry,
read once by :mod:`.read`), never computed a second time; what ``status`` does not show comes
from the same records: each version from its commit record (counts, time), each run from its
report, each sink's backlog from :func:`diffcdc.state.records.sink_backlog`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from diffcdc.core.quality_report import GateReport
from diffcdc.report.model import (
    ColumnChanges,
    ColumnCount,
    GateCheck,
    RunRow,
    RunSummary,
    SinkRow,
    TableView,
    VersionPoint,
)
from diffcdc.state.records import Commit, sink_backlog, sink_chain


def table_view(entry: Mapping[str, Any], commits: Sequence[Commit],
               reports: Sequence[Mapping[str, Any]], columns: Sequence[ColumnChanges] = (),
               last: int = 60) -> TableView:
    """One table's view: ``entry`` is its ``status --json`` entry, ``commits`` its commit log
    (oldest first), ``reports`` its newest run reports (newest first); ``last`` versions."""
    waiting = entry.get("waiting")
    return TableView(
        table=str(entry["table"]),
        configured=bool(entry.get("configured")),
        version=entry.get("version"),
        last_snapshot=entry.get("last_snapshot"),
        committed_at=entry.get("committed_at"),
        rows=entry.get("rows"),
        unpublished=bool(entry.get("unpublished")),
        gate=entry.get("gate"),
        pending=tuple(entry.get("pending") or ()),
        waiting=None if waiting is None else tuple(waiting),
        waiting_error=entry.get("waiting_error"),
        last_run=run_summary(entry.get("last_run") or {}),
        last_change=run_summary(entry.get("last_change") or {}),
        sinks=tuple(sink_row(s, commits) for s in entry.get("sinks") or ()),
        versions=tuple(versions(commits, reports, last)),
        runs=tuple(run_row(r) for r in reports),
        columns=tuple(columns),
    )


def run_summary(run: Mapping[str, Any]) -> RunSummary | None:
    """``status``'s summary of a run (its ``last_run`` / ``last_change``) as a record."""
    if not run:
        return None
    detail = run.get("error_detail") or {}
    return RunSummary(
        run_id=run.get("run_id"), started_at=str(run.get("started_at") or ""),
        outcome=run.get("outcome"), snapshots=int(run.get("snapshots") or 0),
        inserted=int(run["inserted"]), updated=int(run["updated"]), deleted=int(run["deleted"]),
        seconds=run.get("seconds"), error=run.get("error"), hint=detail.get("hint"),
    )


def sink_row(sink: Mapping[str, Any], commits: Sequence[Commit]) -> SinkRow:
    """A sink as ``status`` lists it, with the version it last published and its backlog."""
    sink_id = str(sink["sink"])
    chain = sink_chain(list(commits), sink_id)
    published = [c.version for c in chain if sink_id in c.published_sinks]
    return SinkRow(
        sink=sink_id, type=str(sink["type"]), target=_text(sink.get("target")),
        published=bool(sink["published"]), rows=sink.get("rows"),
        published_version=published[-1] if published else None,
        backlog=tuple(c.version for c in sink_backlog(list(commits), sink_id)),
    )


def versions(commits: Sequence[Commit], reports: Sequence[Mapping[str, Any]], last: int
             ) -> list[VersionPoint]:
    """The newest ``last`` versions, oldest first, from their commit records (the log keeps
    every record; ``keep_versions`` prunes the versions' data only), each with the seconds its
    snapshot took where the run report that committed it is among ``reports``."""
    seconds = {(int(snap["version"]), str(snap["snapshot_id"])): snap.get("seconds")
               for report in reports for snap in report.get("snapshots") or ()}
    return [VersionPoint(
        version=c.version, snapshot_id=c.snapshot_id, at=c.record.committed_at or "",
        inserted=c.record.counts.inserted, updated=c.record.counts.updated,
        deleted=c.record.counts.deleted, rows=c.record.counts.rows,
        seconds=seconds.get((c.version, c.snapshot_id)),
        recreated=c.record.recreate.reason if c.record.recreate else None,
    ) for c in commits[-last:]]


def run_row(report: Mapping[str, Any]) -> RunRow:
    """One run report (as the engine saved it) as a row of the runs table."""
    snaps = report.get("snapshots") or []
    error = report.get("error") or {}
    stages = report.get("refused_gate") or [
        stage for snap in snaps for stage in snap.get("gate") or ()]
    gates = [GateReport.from_dict(stage) for stage in stages]
    return RunRow(
        run_id=str(report.get("run_id") or ""),
        started_at=str(report.get("started_at") or ""),
        outcome=str(report.get("outcome") or ""),
        seconds=report.get("seconds"),
        versions=tuple(int(s["version"]) for s in snaps),
        resumed=tuple(int(v) for v in report.get("resumed_versions") or ()),
        inserted=sum(int(s["inserted"]) for s in snaps),
        updated=sum(int(s["updated"]) for s in snaps),
        deleted=sum(int(s["deleted"]) for s in snaps),
        gate="; ".join(p for p in (g.summary() for g in gates) if p) or None,
        checks=tuple(check for gate in gates for check in _checks(gate)),
        overrides=tuple(report.get("overrides") or ()),
        error=error.get("message"),
        hint=error.get("hint"),
        exit_code=int(error["exit_code"]) if error.get("exit_code") is not None else None,
    )


def _checks(gate: GateReport) -> Iterable[GateCheck]:
    for check in gate.checks:
        outcome = ("refused" if check.blocks else "overridden" if check.overridden and not
                   check.passed else "warning" if not check.passed else None)
        if outcome:
            yield GateCheck(gate.stage, check.name, outcome, _value(check.observed),
                            _value(check.threshold))


def column_counts(changed: Iterable[tuple[str, int]], top: int) -> tuple[ColumnCount, ...]:
    """The ``top`` most-changed columns, most first (ties by name)."""
    ordered = sorted(((str(c), int(n)) for c, n in changed if n), key=lambda x: (-x[1], x[0]))
    return tuple(ColumnCount(c, n) for c, n in ordered[:top])


def _value(value: Any) -> str:
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
