"""The quality gate of one snapshot, run by the engine between the diff and the commit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from diffcdc.core.quality import (
    ChangeCounts,
    SnapshotStats,
    gate_changes,
    gate_snapshot,
    parse_overrides,
    validate_overrides,
)
from diffcdc.core.quality_config import NOT_OVERRIDABLE, QualityConfig
from diffcdc.core.quality_gx import Suite, parse_suite
from diffcdc.core.quality_report import GateReport, raise_if_refused
from diffcdc.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def read_suite(cfg: QualityConfig) -> Suite | None:
    """The content of ``cfg``'s expectation suite file (None: it names none)."""
    path = cfg.expectation_suite
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read expectation suite: {exc.strerror}", path=path) from exc
    return parse_suite(text, path)


def check_overrides(values: Sequence[str],
                    tables: Mapping[str, QualityConfig]) -> dict[str, frozenset[str]]:
    """``--override-check [TABLE:]CHECK`` values → {table: checks}, each a check the table's
    gate knows (``tables``: each table of the run and its quality settings), before Spark: a
    mistyped check name is exit 2 at once."""
    overrides = parse_overrides(values, list(tables))
    for table, cfg in tables.items():
        checks = overrides.get(table, frozenset())
        if checks:
            validate_overrides(checks, cfg, read_suite(cfg), table=table)
    return overrides


@dataclass(frozen=True)
class Gate:
    """The effective quality settings of one run of one table."""

    cfg: QualityConfig
    overrides: frozenset[str]
    #: The content of ``cfg``'s expectation suite file, read once for the run of the table.
    suite: Suite | None = None

    @classmethod
    def of(cls, cfg: QualityConfig, overrides: frozenset[str], table: str) -> Gate:
        """The gate of ``table`` with ``cfg``: its suite file read, its overrides checked."""
        gate = cls(cfg, overrides, read_suite(cfg))
        validate_overrides(overrides, cfg, gate.suite, table=table)
        return gate


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
            df, keys=keys, previous_rows=previous_rows, cfg=gate.cfg, suite=gate.suite,
            overrides=gate.overrides,
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
    raise_if_refused(reports, table, sid)  # the error keeps the reports (``gate``)
    return reports
