"""The quality gate's settings: thresholds and user expectations, as validated models.

:class:`QualityConfig` holds the global ``[quality]`` defaults and a table's own settings
(:meth:`QualityConfig.merged`); :class:`ExpectationSpec` is one great-expectations expectation
written in the config. The names of the built-in checks, and which of them an operator
override may never name, are here too. The checks themselves are in
:mod:`diffcdc.core.quality`, their results in :mod:`diffcdc.core.quality_report`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Built-in checks of each stage, in report order.
SNAPSHOT_CHECKS = ("keys_present", "keys_not_null", "keys_unique", "not_empty", "row_count_ratio")
CHANGE_CHECKS = ("delete_ratio", "change_ratio")
BUILTIN_CHECKS = SNAPSHOT_CHECKS + CHANGE_CHECKS
#: The diff itself needs present, non-NULL, unique keys: these can never be overridden.
NOT_OVERRIDABLE = frozenset({"keys_present", "keys_not_null", "keys_unique"})
#: Ratio checks need this many rows (previous or new snapshot) unless configured otherwise.
DEFAULT_MIN_ROWS_FOR_RATIOS = 1000


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
