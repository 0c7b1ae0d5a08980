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

This module holds the checks and the snapshot statistics they need. The settings are in
:mod:`diffcdc.core.quality_config`, the results in :mod:`diffcdc.core.quality_report`, and the
great-expectations part in :mod:`diffcdc.core.quality_gx`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from diffcdc.core.quality_config import BUILTIN_CHECKS, NOT_OVERRIDABLE, QualityConfig
from diffcdc.core.quality_report import SAMPLE_SIZE, CheckResult, GateReport, to_jsonable
from diffcdc.core.sql import quote
from diffcdc.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row

    from diffcdc.core.quality_gx import Suite


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


def check_names(cfg: QualityConfig, suite: Suite | None = None) -> list[str]:
    """Every check name a run with ``cfg`` reports (built-in and user expectations; ``suite``:
    the content of its suite file)."""
    from diffcdc.core.quality_gx import planned_expectations

    return [*BUILTIN_CHECKS, *(p.name for p in planned_expectations(cfg, suite))]


def validate_overrides(overrides: Collection[str], cfg: QualityConfig, suite: Suite | None = None,
                       table: str | None = None) -> None:
    """Raise :class:`ConfigError` (naming ``table``) for an override naming no check or a key
    check."""
    if not overrides:
        return
    for name in sorted(overrides):
        if name in NOT_OVERRIDABLE:
            raise ConfigError(
                f"check {name!r} cannot be overridden: the diff needs present, unique, "
                "non-NULL keys", table=table,
            )
    known = check_names(cfg, suite)
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown check name(s) to override: {', '.join(unknown)}",
            table=table, hint="known checks: " + ", ".join(known),
        )


def parse_overrides(values: Sequence[str], tables: Sequence[str]) -> dict[str, frozenset[str]]:
    """``--override-check [TABLE:]CHECK`` values → {table: checks}; a bare CHECK needs exactly
    one table.

    Check names may hold a colon themselves (``expect_column_values_to_not_be_null:amount``):
    the part before a colon is a table only when it names a table of this run.
    """
    out: dict[str, set[str]] = {}
    for value in values:
        table, check = _split_override(value, tables)
        if table is None:
            if len(tables) != 1:
                raise UsageError(
                    f"--override-check {value}: name the table as TABLE:{value} when several "
                    "tables run",
                    hint="tables of this run: " + ", ".join(tables),
                )
            table = tables[0]
        if not check:
            raise UsageError(f"--override-check {value}: no check name",
                             hint=f"e.g. --override-check {table}:delete_ratio")
        out.setdefault(table, set()).add(check)
    return {t: frozenset(c) for t, c in out.items()}


def _split_override(value: str, tables: Sequence[str]) -> tuple[str | None, str]:
    """(table, check) of one ``--override-check`` value; table None for a bare check."""
    for at in (i for i, c in enumerate(value) if c == ":"):
        if value[:at] in tables:
            return value[:at], value[at + 1:]
    prefix, _, rest = value.partition(":")
    if ":" in value and (len(tables) > 1 or rest in BUILTIN_CHECKS):
        raise UsageError(
            f"--override-check {value}: no table of this run is named {prefix!r}",
            hint="tables of this run: " + ", ".join(tables),
        )
    return None, value


def gate_snapshot(
    df: DataFrame,
    *,
    keys: Sequence[str],
    previous_rows: int | None,
    cfg: QualityConfig,
    suite: Suite | None = None,
    overrides: Collection[str] = frozenset(),
    stats: SnapshotStats | None = None,
    table: str | None = None,
    snapshot: str | None = None,
) -> GateReport:
    """Run the snapshot checks; never raises for a failed check (see ``raise_if_failed``).

    ``suite`` is the content of ``cfg``'s suite file (read by the caller: no IO here).
    ``stats`` from the engine's own pass avoids another job; ``previous_rows`` is the last
    committed snapshot's row count (``None`` on the first load). ``table``/``snapshot`` only
    label the Data Docs. ``overrides`` are valid for ``cfg`` (:func:`validate_overrides`: the
    engine's :class:`~diffcdc.engine.gate.Gate` checks them once per run).
    """
    _require_keys(keys)
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
            df, cfg=cfg, suite=suite, keys=keys, overrides=overrides,
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
    """Run the change-set checks (pure arithmetic, no Spark; ``overrides`` valid for ``cfg``,
    as for :func:`gate_snapshot`)."""
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

    return F.col(quote(name))  # names may contain dots or spaces


def _any_null(keys: Sequence[str]) -> Column:
    cond = _col(keys[0]).isNull()
    for k in keys[1:]:
        cond = cond | _col(k).isNull()
    return cond


def _require_keys(keys: Sequence[str]) -> None:
    if isinstance(keys, str) or not keys:
        raise ConfigError(f"key columns must be a non-empty list of names, got {keys!r}")

