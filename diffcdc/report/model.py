"""The report's records: what it shows of each table, typed (built by :mod:`.gather`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunSummary:
    """A run as ``status`` shows it (its ``last_run`` / ``last_change``)."""

    run_id: str | None
    started_at: str
    outcome: str | None
    snapshots: int
    inserted: int
    updated: int
    deleted: int
    seconds: float | None
    error: str | None
    hint: str | None


@dataclass(frozen=True)
class VersionPoint:
    """One committed version: its counts, when, and how long its snapshot took."""

    version: int
    snapshot_id: str
    at: str  #: when it was committed ("": a record from before commit times)
    inserted: int
    updated: int
    deleted: int
    rows: int | None
    seconds: float | None  #: the snapshot's step in its run (None: its run report not read)
    recreated: str | None = None


@dataclass(frozen=True)
class GateCheck:
    """One quality check of a run that did not simply pass (failed, overridden or a warning)."""

    stage: str
    name: str
    outcome: str  #: "refused", "overridden" or "warning"
    observed: str
    threshold: str


@dataclass(frozen=True)
class RunRow:
    """One run of the table, from its report in state."""

    run_id: str
    started_at: str
    outcome: str
    seconds: float | None
    versions: tuple[int, ...]  #: committed by this run
    resumed: tuple[int, ...]  #: committed earlier, published by this run
    inserted: int
    updated: int
    deleted: int
    gate: str | None  #: the gate's one line (as ``status`` words it)
    checks: tuple[GateCheck, ...]
    overrides: tuple[str, ...]
    error: str | None
    hint: str | None
    exit_code: int | None

    @property
    def notable(self) -> bool:
        """Its gate did more than pass: a check refused, overridden or warned, or an override
        was given."""
        return bool(self.checks or self.overrides)

    @property
    def refused(self) -> bool:
        """Input refused (exit 3: a quality gate, a bad snapshot, a schema change)."""
        return self.exit_code == 3


@dataclass(frozen=True)
class SinkRow:
    """One sink of the head version: ``status``'s fields and its backlog."""

    sink: str
    type: str
    target: str | None
    published: bool  #: ``status``: has it published the head version
    rows: int | None
    published_version: int | None  #: the newest version it has published (None: none)
    backlog: tuple[int, ...]  #: committed versions it has not published yet, oldest first


@dataclass(frozen=True)
class ColumnCount:
    column: str
    updates: int  #: update rows that changed this column


@dataclass(frozen=True)
class ColumnChanges:
    """The most-changed columns, as one sink keeps the changed-column lists."""

    sink: str
    source: str  #: where they were read (a Delta table)
    counts: tuple[ColumnCount, ...]
    since: int = 1  #: counted over the rows of this version and later ones
    problem: str | None = None  #: why they could not be read (the report shows it)


@dataclass(frozen=True)
class TableView:
    """Everything the report shows of one table."""

    table: str
    configured: bool
    version: int | None
    last_snapshot: str | None
    committed_at: str | None
    rows: int | None
    unpublished: bool
    gate: str | None
    pending: tuple[str, ...]
    waiting: tuple[str, ...] | None  #: None: not known (no source listed)
    waiting_error: str | None
    last_run: RunSummary | None
    last_change: RunSummary | None
    sinks: tuple[SinkRow, ...]
    versions: tuple[VersionPoint, ...]  #: the newest ones, oldest first
    runs: tuple[RunRow, ...]  #: the newest ones, newest first
    columns: tuple[ColumnChanges, ...]

    @property
    def backlog(self) -> int:
        """Versions still to publish, over every sink."""
        return sum(len(s.backlog) for s in self.sinks)

    @property
    def failures(self) -> tuple[RunRow, ...]:
        """Runs that failed (refused input among them), newest first."""
        return tuple(r for r in self.runs if r.error)


@dataclass(frozen=True)
class Report:
    state: str
    generated_at: str
    diffcdc_version: str
    last: int  #: at most this many newest versions and run reports per table
    tables: tuple[TableView, ...]
