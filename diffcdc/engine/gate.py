"""The quality gate of one snapshot, run by the engine between the diff and the commit."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame

from diffcdc.core.quality import (
    ChangeCounts,
    SnapshotStats,
    gate_changes,
    gate_snapshot,
    validate_overrides,
)
from diffcdc.core.quality_config import NOT_OVERRIDABLE, QualityConfig
from diffcdc.core.quality_report import GateReport, raise_if_refused
from diffcdc.errors import DiffcdcError


@dataclass(frozen=True)
class Gate:
    """The effective quality settings of one run of one table."""

    cfg: QualityConfig
    overrides: frozenset[str]

    def __post_init__(self) -> None:
        validate_overrides(self.overrides, self.cfg)


def run_gate(
    df: DataFrame,
    keys: list[str],
    previous_rows: int | None,
    metrics: dict[str, int],
    gate: Gate,
    table: str,
    sid: str,
) -> list[GateReport]:
    """Both quality-gate stages; a blocking failure raises QualityGateFailed (exit 3).

    The key statistics come from the pass that wrote the state, so the built-in snapshot
    checks cost no extra job; only user expectations scan the snapshot again.
    """
    stats = SnapshotStats(metrics["rows"], metrics["null_keys"], metrics["duplicate_keys"])
    reports = [
        gate_snapshot(
            df, keys=keys, previous_rows=previous_rows, cfg=gate.cfg, overrides=gate.overrides,
            stats=stats, table=table, snapshot=sid,
        )
    ]
    if not any(c.name in NOT_OVERRIDABLE for c in reports[0].failed_blocking):
        # Valid keys: the change counts mean something; refusals of both stages are named at
        # once, so one set of overrides is enough.
        counts = ChangeCounts(
            metrics["inserted"], metrics["updated"], metrics["deleted"], metrics["rows"]
        )
        reports.append(
            gate_changes(counts, previous_rows=previous_rows, cfg=gate.cfg, overrides=gate.overrides)
        )
    try:
        raise_if_refused(reports, table, sid)
    except DiffcdcError as exc:
        exc.gate = [r.to_dict() for r in reports]  # type: ignore[attr-defined]
        raise
    return reports
