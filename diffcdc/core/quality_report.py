"""What the quality gate reports: one :class:`CheckResult` per check, one :class:`GateReport`
per stage (JSON-friendly, kept with the state), and the one-line refusal with what to do
(:func:`raise_if_refused`, :func:`gate_hint`).

:func:`to_jsonable` turns observed values and sampled keys into plain JSON types; the checks
that produce these results are in :mod:`diffcdc.core.quality`.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from diffcdc.core.quality_config import NOT_OVERRIDABLE
from diffcdc.errors import QualityGateFailed

#: At most this many offending keys are sampled per failed check.
SAMPLE_SIZE = 5


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check; ``observed`` and ``threshold`` are JSON-friendly."""

    name: str
    passed: bool
    blocking: bool
    observed: Any = None
    threshold: Any = None
    sample_keys: list[dict[str, Any]] = field(default_factory=list)
    overridden: bool = False
    detail: str = ""

    @property
    def blocks(self) -> bool:
        """True when this result refuses the snapshot."""
        return not self.passed and self.blocking and not self.overridden

    def describe(self) -> str:
        """``name: observed X, threshold Y, keys (..), (..)`` for the one-line message."""
        text = f"{self.name}: observed {_fmt(self.observed)}"
        if self.threshold is not None:
            text += f", threshold {_fmt(self.threshold)}"
        if self.sample_keys:
            text += ", keys " + ", ".join(_fmt_key(k) for k in self.sample_keys)
        elif self.detail and not self.passed:
            text += f" ({self.detail})"
        return text


@dataclass(frozen=True)
class GateReport:
    """All check results of one gate stage (``snapshot`` or ``changes``)."""

    stage: Literal["snapshot", "changes"]
    checks: list[CheckResult]

    @property
    def failed_blocking(self) -> list[CheckResult]:
        """Failed blocking checks that were not overridden."""
        return [c for c in self.checks if c.blocks]

    @property
    def warnings(self) -> list[CheckResult]:
        """Failed warn-only checks."""
        return [c for c in self.checks if not c.passed and not c.blocking]

    @property
    def overridden(self) -> list[CheckResult]:
        """Failed blocking checks let pass by an operator override for this run."""
        return [c for c in self.checks if not c.passed and c.blocking and c.overridden]

    @property
    def passed(self) -> bool:
        """True when nothing blocks."""
        return not self.failed_blocking

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (saved with the table's state)."""
        return {
            "stage": self.stage,
            "passed": self.passed,
            "checks": [{**asdict(c), "blocks": c.blocks} for c in self.checks],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateReport:
        """Read back what :meth:`to_dict` wrote."""
        names = CheckResult.__dataclass_fields__
        checks = [CheckResult(**{k: v for k, v in c.items() if k in names})
                  for c in data["checks"]]
        return cls(stage=data["stage"], checks=checks)

    def summary(self) -> str:
        """One line for ``diffcdc status`` and logs."""
        outcome = "passed" if self.passed else "FAILED: " + "; ".join(
            c.describe() for c in self.failed_blocking
        )
        text = f"{self.stage} gate {outcome} ({len(self.checks)} checks"
        if self.overridden:
            text += "; overridden: " + ", ".join(c.name for c in self.overridden)
        if self.warnings:
            text += "; warnings: " + ", ".join(c.name for c in self.warnings)
        return text + ")"

    def raise_if_failed(self, table: str | None, snapshot: str | None) -> None:
        """Raise :class:`QualityGateFailed` naming every failed blocking check, on one line."""
        raise_if_refused([self], table, snapshot)


def raise_if_refused(reports: Sequence[GateReport], table: str | None,
                     snapshot: str | None) -> None:
    """Raise :class:`QualityGateFailed` naming every failed blocking check of every stage on
    one line, ending with what to do (the exact override options when overriding can help:
    all of them at once, so that typing them is enough)."""
    refused = [r for r in reports if r.failed_blocking]
    if not refused:
        return
    failed = [c for r in refused for c in r.failed_blocking]
    raise QualityGateFailed(
        f"quality gate ({', '.join(r.stage for r in refused)}) refused the snapshot: "
        + "; ".join(c.describe() for c in failed),
        table=table,
        snapshot=snapshot,
        hint=gate_hint(failed, table),
        gate=[r.to_dict() for r in reports],
    )


def gate_hint(failed: Sequence[CheckResult], table: str | None) -> str:
    """What to do about failed checks: the exact override options when overriding can help."""
    fixed = [c.name for c in failed if c.name in NOT_OVERRIDABLE]
    if fixed:
        return (f"fix or replace the snapshot: {', '.join(fixed)} cannot be overridden (the "
                "diff needs present, unique, non-NULL keys)")
    flags = " ".join(
        "--override-check " + shlex.quote(f"{table}:{c.name}" if table else c.name) for c in failed
    )
    return (f"fix or replace the snapshot; if the change is legitimate, let it pass for one run "
            f"with: {flags}")


def to_jsonable(value: Any) -> Any:
    """``value`` with everything JSON cannot hold turned into plain types or strings."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return to_jsonable(value.item())
    return str(value)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={_fmt(v)}" for k, v in value.items()) + "}"
    if value is None:
        return "none"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fmt_key(key: Mapping[str, Any]) -> str:
    parts = ["NULL" if v is None else repr(v) if isinstance(v, str) else _fmt(v)
             for v in key.values()]
    return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"
