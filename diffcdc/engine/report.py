"""What a run reports: per snapshot and per table (kept in state, printed, and in ``--json``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from diffcdc import __version__

Progress = Callable[[str], None]


@dataclass
class SnapshotResult:
    """What one snapshot produced."""

    snapshot_id: str
    version: int
    rows: int
    inserted: int
    updated: int
    deleted: int
    unchanged: int
    #: Files the table's sinks publish for this snapshot (names: the landing files; see
    #: ``SinkPlugin.result``).
    files: list[str]
    first_sequence: int | None
    seconds: float
    gate: list[dict[str, Any]] = field(default_factory=list)
    #: Seconds spent in the quality gate beyond the diff pass (user expectations, samples).
    gate_seconds: float = 0.0
    #: Why the table was re-created with this snapshot (None: it continued).
    recreated: str | None = None
    #: The fingerprint rule this version changed to, compared under the old one (None: the
    #: rule stayed): a controlled re-fingerprint, no row counted as changed because of it.
    refingerprinted: str | None = None
    #: Sink id → what the sink published for this snapshot (rows, files, messages ...).
    sinks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Keys the snapshot did not hold that stay, outside its scope (docs/scope.md).
    kept: int = 0


@dataclass
class TableReport:
    """The outcome of one run of one table."""

    table: str
    run_id: str
    started_at: str
    outcome: str = "ok"  # ok | nothing to do | failed
    snapshots: list[SnapshotResult] = field(default_factory=list)
    resumed_versions: list[int] = field(default_factory=list)
    #: Sink id → the committed versions it published for an earlier run (its backlog).
    backlog_published: dict[str, list[int]] = field(default_factory=dict)
    #: Quality gate results of the snapshot that was refused, if any.
    refused_gate: list[dict[str, Any]] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    seconds: float = 0.0
    diffcdc_version: str = __version__

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def exit_code(self) -> int:
        return int(self.error["exit_code"]) if self.error else 0
