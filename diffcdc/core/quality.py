"""The data-quality gate: built-in checks and user great-expectations suites, as data.

Two stages, both before anything is staged or published:

1. :func:`gate_snapshot` on the snapshot DataFrame: key columns present, non-NULL and unique,
   not empty, row count within a ratio of the previous snapshot's, then the user's
   great-expectations expectations (suite file and/or config).
2. :func:`gate_changes` on the change counts of the diff: delete ratio and change ratio.

Each returns a :class:`GateReport` (JSON-friendly, kept with the state); the engine calls
:meth:`GateReport.raise_if_failed` to refuse the snapshot with one line. The key statistics are
meant to be computed by the engine in the same Spark job as the fingerprint
(:func:`snapshot_stats_exprs`); offending-key samples are only computed when a check fails.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from diffcdc.errors import ConfigError, QualityGateFailed

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row

#: Built-in checks of each stage, in report order.
SNAPSHOT_CHECKS = ("keys_present", "keys_not_null", "keys_unique", "not_empty", "row_count_ratio")
CHANGE_CHECKS = ("delete_ratio", "change_ratio")
BUILTIN_CHECKS = SNAPSHOT_CHECKS + CHANGE_CHECKS
#: The diff itself needs present, non-NULL, unique keys: these can never be overridden.
NOT_OVERRIDABLE = frozenset({"keys_present", "keys_not_null", "keys_unique"})
#: Ratio checks need this many rows (previous or new snapshot) unless configured otherwise.
DEFAULT_MIN_ROWS_FOR_RATIOS = 1000
#: At most this many offending keys are sampled per failed check.
SAMPLE_SIZE = 5


class ExpectationSpec(BaseModel):
    """A great-expectations expectation written in the diffcdc config."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True,
                              strict=True)

    type: str = Field(pattern=r"^expect_[a-z0-9_]+$")
    """GX expectation type in snake case, e.g. ``expect_column_values_to_not_be_null``."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """The expectation's arguments, e.g. ``{"column": "amount", "min_value": 0}``."""
    blocking: bool = True
    """A failure refuses the snapshot; ``false`` only reports it as a warning."""
    name: str | None = None
    """Check name in reports and overrides; default ``<type>:<column>``."""


class QualityConfig(BaseModel):
    """Gate thresholds and user expectations; global defaults merged with per-table settings."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False,
        strict=True,
    )

    min_row_ratio: float | None = Field(default=0.5, ge=0)
    """Snapshot rows at least this share of the previous snapshot's rows (``null``: no check)."""
    max_row_ratio: float | None = Field(default=2.0, ge=0)
    """Snapshot rows at most this multiple of the previous snapshot's rows (``null``: no check)."""
    max_delete_ratio: float | None = Field(default=0.2, ge=0)
    """Deleted rows at most this share of the previous row count (``null``: no check)."""
    max_change_ratio: float | None = Field(default=None, ge=0)
    """Inserted + updated + deleted rows at most this share of the previous row count."""
    min_rows_for_ratios: int = Field(default=DEFAULT_MIN_ROWS_FOR_RATIOS, ge=0)
    """The ratio checks are skipped while both the previous and the new snapshot have fewer
    rows than this: on a small table an ordinary night moves a large share of its rows."""
    allow_empty: bool = False
    """Accept an empty snapshot although the table already has rows."""
    expectation_suite: str | None = None
    """Path to a great-expectations ExpectationSuite JSON file run against every snapshot."""
    expectations: list[ExpectationSpec] = Field(default_factory=list)
    """Expectations written in the config, each blocking or warn-only."""
    suite_blocking: bool = True
    """Failures from ``expectation_suite`` block (expectations with severity other than
    ``critical`` or ``meta.blocking: false`` only warn either way)."""
    data_docs_dir: str | None = None
    """Build great-expectations Data Docs HTML for the user expectations in this folder."""

    @model_validator(mode="after")
    def _max_not_below_min(self) -> QualityConfig:
        low, high = self.min_row_ratio, self.max_row_ratio
        if low is not None and high is not None and high < low:
            raise ValueError(f"max_row_ratio {high} is below min_row_ratio {low}")
        return self

    def merged(self, table: QualityConfig | Mapping[str, Any] | None) -> QualityConfig:
        """These (global) settings with every field the table sets explicitly replacing them.

        Lists are replaced, not appended: a table's ``expectations`` are its whole list.
        """
        if table is None:
            return self
        if isinstance(table, QualityConfig):
            table = table.model_dump(exclude_unset=True)
        return QualityConfig.model_validate({**self.model_dump(exclude_unset=True), **table})


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


@dataclass(frozen=True)
class SnapshotStats:
    """Key statistics of a snapshot, computed by :func:`snapshot_stats_exprs` in one job."""

    rows: int
    null_keys: int
    """Rows with a NULL in any key column (or such key values, if the engine counts those)."""
    duplicate_keys: int
    """Rows beyond the first of their non-NULL key (or key values occurring more than once, if
    the engine counts those): only zero passes either way."""

    @classmethod
    def from_row(cls, row: Row | Mapping[str, Any]) -> SnapshotStats:
        """Read the columns of :func:`snapshot_stats_exprs` from a collected row."""
        get = row.asDict() if hasattr(row, "asDict") else row
        return cls(
            rows=int(get[_STATS_ROWS] or 0),
            null_keys=int(get[_STATS_NULL] or 0),
            duplicate_keys=int(get[_STATS_DUP] or 0),
        )


@dataclass(frozen=True)
class ChangeCounts:
    """Counts from the diff of one snapshot against the state."""

    inserted: int
    updated: int
    deleted: int
    rows: int
    """Rows in the new snapshot."""


_STATS_ROWS, _STATS_NULL, _STATS_DUP = "__dq_rows", "__dq_null_keys", "__dq_duplicate_keys"


def snapshot_stats_exprs(keys: Sequence[str]) -> list[Column]:
    """Aggregate expressions for :class:`SnapshotStats`, to put in the engine's own ``agg``.

    ``df.agg(*snapshot_stats_exprs(keys), *other)`` then ``SnapshotStats.from_row(row)``.
    """
    from pyspark.sql import functions as F

    _require_keys(keys)
    rows = F.count(F.lit(1))
    nulls = F.coalesce(F.sum(_any_null(keys).cast("long")), F.lit(0))
    # count(DISTINCT a, b) skips rows with a NULL in any column: exactly the non-NULL keys.
    distinct = F.count_distinct(*[_col(k) for k in keys])
    return [
        rows.alias(_STATS_ROWS),
        nulls.alias(_STATS_NULL),
        (rows - nulls - distinct).alias(_STATS_DUP),
    ]


def compute_snapshot_stats(df: DataFrame, keys: Sequence[str]) -> SnapshotStats:
    """Compute :class:`SnapshotStats` with one Spark job (when the engine did not)."""
    return SnapshotStats.from_row(df.agg(*snapshot_stats_exprs(keys)).collect()[0])


def check_names(cfg: QualityConfig) -> list[str]:
    """Every check name a run with ``cfg`` reports (built-in and user expectations)."""
    from diffcdc.core.quality_gx import planned_expectations

    return [*BUILTIN_CHECKS, *(p.name for p in planned_expectations(cfg))]


def validate_overrides(overrides: Collection[str], cfg: QualityConfig) -> None:
    """Raise :class:`ConfigError` for an override naming no check or a key check."""
    if not overrides:
        return
    for name in sorted(overrides):
        if name in NOT_OVERRIDABLE:
            raise ConfigError(
                f"check {name!r} cannot be overridden: the diff needs present, unique, "
                "non-NULL keys"
            )
    unknown = sorted(set(overrides) - set(check_names(cfg)))
    if unknown:
        raise ConfigError(
            f"unknown check name(s) to override: {', '.join(unknown)}",
            hint="known checks: " + ", ".join(check_names(cfg)),
        )


def gate_snapshot(
    df: DataFrame,
    *,
    keys: Sequence[str],
    previous_rows: int | None,
    cfg: QualityConfig,
    overrides: Collection[str] = frozenset(),
    stats: SnapshotStats | None = None,
    table: str | None = None,
    snapshot: str | None = None,
) -> GateReport:
    """Run the snapshot checks; never raises for a failed check (see ``raise_if_failed``).

    ``stats`` from the engine's own pass avoids another job; ``previous_rows`` is the last
    committed snapshot's row count (``None`` on the first load). ``table``/``snapshot`` only
    label the Data Docs.
    """
    _require_keys(keys)
    validate_overrides(overrides, cfg)
    by_lower = {c.lower(): c for c in df.columns}  # Spark resolves names case-insensitively
    missing = [k for k in keys if k.lower() not in by_lower]
    keys = [by_lower[k.lower()] for k in keys if k.lower() in by_lower]
    checks = [
        _result("keys_present", not missing, overrides, observed=missing,
                detail="missing key columns: " + ", ".join(missing) if missing else "")
    ]
    if missing:
        rows = stats.rows if stats is not None else df.count()
        checks += [_result(n, True, overrides, detail="skipped: key columns missing")
                   for n in ("keys_not_null", "keys_unique")]
    else:
        stats = stats if stats is not None else compute_snapshot_stats(df, keys)
        rows = stats.rows
        checks.append(_result(
            "keys_not_null", stats.null_keys == 0, overrides, observed=stats.null_keys,
            threshold=0, sample=lambda: _null_key_sample(df, keys),
        ))
        checks.append(_result(
            "keys_unique", stats.duplicate_keys == 0, overrides, observed=stats.duplicate_keys,
            threshold=0, sample=lambda: _duplicate_key_sample(df, keys),
            detail="duplicated keys",
        ))
    if previous_rows and not cfg.allow_empty:
        checks.append(_result("not_empty", rows > 0, overrides, observed=rows, threshold=1,
                              detail=f"table has {previous_rows} rows"))
    else:
        checks.append(_result("not_empty", True, overrides, observed=rows,
                              detail="skipped: allow_empty or no previous rows"))
    checks.append(_ratio_check(
        "row_count_ratio", rows, previous_rows, cfg.min_row_ratio, cfg.max_row_ratio, overrides,
        rows=rows, minimum=cfg.min_rows_for_ratios,
    ))
    if cfg.expectations or cfg.expectation_suite:
        from diffcdc.core.quality_gx import run_expectations

        checks += run_expectations(
            df, cfg=cfg, keys=keys, overrides=overrides,
            table=table, snapshot=snapshot,
        )
    return GateReport("snapshot", checks)


def gate_changes(
    counts: ChangeCounts,
    *,
    previous_rows: int | None,
    cfg: QualityConfig,
    overrides: Collection[str] = frozenset(),
) -> GateReport:
    """Run the change-set checks (pure arithmetic, no Spark)."""
    validate_overrides(overrides, cfg)
    changed = counts.inserted + counts.updated + counts.deleted
    return GateReport("changes", [
        _ratio_check("delete_ratio", counts.deleted, previous_rows, None,
                     cfg.max_delete_ratio, overrides, rows=counts.rows,
                     minimum=cfg.min_rows_for_ratios),
        _ratio_check("change_ratio", changed, previous_rows, None,
                     cfg.max_change_ratio, overrides, rows=counts.rows,
                     minimum=cfg.min_rows_for_ratios),
    ])


def _result(name: str, passed: bool, overrides: Collection[str], *, sample: Any = None,
            **fields: Any) -> CheckResult:
    keys = sample() if sample is not None and not passed else []
    return CheckResult(name=name, passed=passed, blocking=True, sample_keys=keys,
                       overridden=name in overrides, **fields)


def _ratio_check(name: str, count: int, previous: int | None, low: float | None,
                 high: float | None, overrides: Collection[str], *, rows: int,
                 minimum: int) -> CheckResult:
    if low is None and high is None:
        return _result(name, True, overrides, detail="skipped: no threshold configured")
    threshold: Any = [low, high] if name == "row_count_ratio" else high
    if not previous:
        return _result(name, True, overrides, threshold=threshold,
                       detail="skipped: no previous rows")
    if previous < minimum and rows < minimum:
        return _result(name, True, overrides, threshold=threshold,
                       detail=f"skipped: {previous} previous and {rows} new rows, fewer than "
                       f"min_rows_for_ratios {minimum}")
    # Exact rational comparison: 20 of 100 passes a 0.2 threshold, whatever floats say.
    ratio = Fraction(count, previous)
    ok = (low is None or ratio >= Fraction(repr(low))) and (
        high is None or ratio <= Fraction(repr(high)))
    return _result(name, ok, overrides, observed=float(ratio), threshold=threshold,
                   detail=f"{count} rows vs {previous} previous rows")


def _null_key_sample(df: DataFrame, keys: Sequence[str]) -> list[dict[str, Any]]:
    cols = [_col(k) for k in keys]
    rows = df.where(_any_null(keys)).select(*cols).orderBy(*cols).limit(SAMPLE_SIZE).collect()
    return [to_jsonable(dict(zip(keys, r))) for r in rows]


def _duplicate_key_sample(df: DataFrame, keys: Sequence[str]) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    cols = [_col(k) for k in keys]
    counted = df.where(~_any_null(keys)).groupBy(*cols).agg(F.count(F.lit(1)).alias("__dq_n"))
    rows = counted.where("__dq_n > 1").orderBy(*cols).limit(SAMPLE_SIZE).collect()
    return [to_jsonable(dict(zip(keys, r))) for r in rows]


def _col(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")  # names may contain dots or spaces


def _any_null(keys: Sequence[str]) -> Column:
    cond = _col(keys[0]).isNull()
    for k in keys[1:]:
        cond = cond | _col(k).isNull()
    return cond


def _require_keys(keys: Sequence[str]) -> None:
    if isinstance(keys, str) or not keys:
        raise ConfigError(f"key columns must be a non-empty list of names, got {keys!r}")


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
