"""What a run did, per table, as typed records: built from what the run already reports
(:class:`~diffcdc.engine.report.TableReport`, ``--json``) and what ``status --json`` says
(:func:`diffcdc.engine.status.table_status`); nothing here counts anything a second way."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from diffcdc.core.quality_report import GateReport
from diffcdc.engine.report import SnapshotResult, TableReport

#: The exit codes' classes (README, ``diffcdc --help``).
EXIT_CLASSES = {0: "ok", 1: "failed", 2: "usage", 3: "refused", 130: "interrupted"}


def exit_class(code: int) -> str:
    """The class of an exit code (``ok``, ``failed``, ``usage``, ``refused``, ``interrupted``)."""
    return EXIT_CLASSES.get(code, "failed")


@dataclass(frozen=True)
class SinkOutput:
    """What one sink published of a version."""

    sink: str
    type: str
    rows: int
    published: bool


@dataclass(frozen=True)
class VersionFacts:
    """One version a run made (a snapshot committed): its counts and its gate."""

    snapshot_id: str
    version: int
    rows: int
    inserted: int
    updated: int
    deleted: int
    seconds: float
    sinks: tuple[SinkOutput, ...]
    gate: tuple[GateReport, ...]

    @classmethod
    def of(cls, result: SnapshotResult) -> VersionFacts:
        return cls(
            snapshot_id=result.snapshot_id, version=result.version, rows=result.rows,
            inserted=result.inserted, updated=result.updated, deleted=result.deleted,
            seconds=result.seconds,
            sinks=tuple(SinkOutput(s, str(v.get("type")), int(v.get("rows") or 0),
                                   bool(v.get("published"))) for s, v in result.sinks.items()),
            gate=tuple(GateReport.from_dict(g) for g in result.gate),
        )


@dataclass(frozen=True)
class TableFacts:
    """One table's run: its outcome, its versions and, when it failed, why."""

    table: str
    run_id: str
    outcome: str
    exit_code: int
    seconds: float
    versions: tuple[VersionFacts, ...]
    #: The refused snapshot's gate (empty: not refused by the gate).
    refused_gate: tuple[GateReport, ...]
    error: str | None
    #: The snapshot the error names (None: none, or no error).
    error_snapshot: str | None
    diffcdc_version: str

    @property
    def exit_class(self) -> str:
        return exit_class(self.exit_code)

    @classmethod
    def of(cls, report: TableReport) -> TableFacts:
        error = report.error or {}
        return cls(
            table=report.table, run_id=report.run_id, outcome=report.outcome,
            exit_code=report.exit_code, seconds=report.seconds,
            versions=tuple(VersionFacts.of(s) for s in report.snapshots),
            refused_gate=tuple(GateReport.from_dict(g) for g in report.refused_gate),
            error=error.get("message"), error_snapshot=error.get("snapshot"),
            diffcdc_version=report.diffcdc_version,
        )


@dataclass(frozen=True)
class SinkBacklog:
    """One sink of a table as ``status`` shows it."""

    sink: str
    type: str
    #: Committed versions the sink has yet to publish.
    backlog: int


@dataclass(frozen=True)
class TableStatusFacts:
    """One table as ``status --json`` shows it, in the units a metric takes (seconds since the
    epoch for times); None: ``status`` has no value for it."""

    table: str
    version: int | None
    rows: int | None
    #: When the head version was committed: the table's data last refreshed.
    committed_at: float | None
    #: When the last run that ended without an error ended (the last run, else the last run
    #: that changed something, when it did not fail).
    last_success: float | None
    last_run_seconds: float | None
    inserted: int | None
    updated: int | None
    deleted: int | None
    #: Snapshots waiting in the source (None: a source whose snapshots are known only when read).
    waiting: int | None
    sinks: tuple[SinkBacklog, ...]

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> TableStatusFacts:
        last = entry.get("last_run") or {}
        waiting = entry.get("waiting")
        return cls(
            table=entry["table"], version=entry.get("version"), rows=entry.get("rows"),
            committed_at=epoch(entry.get("committed_at")),
            last_success=next((t for run in (last, entry.get("last_change") or {})
                               if (t := _success_end(run)) is not None), None),
            last_run_seconds=last.get("seconds"),
            inserted=last.get("inserted"), updated=last.get("updated"),
            deleted=last.get("deleted"),
            waiting=None if waiting is None else len(waiting),
            sinks=tuple(SinkBacklog(s["sink"], str(s.get("type")), int(s.get("backlog") or 0))
                        for s in entry.get("sinks") or ()),
        )


def _success_end(run: Mapping[str, Any]) -> float | None:
    """When a run ``status`` shows ended, if it ended without an error."""
    if not run or run.get("outcome") == "failed":
        return None
    start = epoch(run.get("started_at"))
    return None if start is None else start + float(run.get("seconds") or 0.0)


def epoch(text: str | None) -> float | None:
    """An ISO 8601 time as seconds since the epoch (None: none given, or unreadable)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
