"""Which columns' changes open a new history row: ``track_history_columns`` /
``track_history_except_columns``, taken alike by every history sink type (the Delta sink's,
the PostgreSQL sink's; docs/history.md). Pure: the settings' fields and their validation, the
check against a snapshot's columns, and what a version's manifest records of them (a version
is published with the tracking it was staged with)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from diffcdc.errors import ConfigError

#: The settings' fields, as each history sink's config model declares them.
TrackColumns = Annotated[list[str] | None, Field(
    description="scd2: only a change in these columns opens a new history row; a change in "
    "the others is written into the open row.")]
TrackExceptColumns = Annotated[list[str] | None, Field(
    description="scd2: a change in these columns alone is written into the open row; every "
    "other column opens a new history row.")]


def tracking_settings_problem(mode: str, track_columns: list[str] | None,
                              track_except_columns: list[str] | None) -> str | None:
    """What is wrong with a sink's tracking settings for its ``mode``, or None."""
    tracking = track_columns is not None or track_except_columns
    if mode != "scd2" and tracking:
        return "track_history_columns / track_history_except_columns need mode = \"scd2\""
    if track_columns is not None and track_except_columns:
        return "give track_history_columns or track_history_except_columns, not both"
    if track_columns is not None and not track_columns:
        return ("track_history_columns is empty: name at least one column, or leave it out "
                "to track every column")
    return None


@dataclass(frozen=True)
class Tracking:
    """Which columns open a new row when they change (the rest are restated in place);
    names compare case-insensitively."""

    only: tuple[str, ...] | None = None  #: track_history_columns
    but: tuple[str, ...] = ()  #: track_history_except_columns

    @classmethod
    def of(cls, track_columns: Sequence[str] | None,
           track_except_columns: Sequence[str] | None) -> Tracking:
        """The tracking a sink's two settings give."""
        return cls(tuple(track_columns) if track_columns is not None else None,
                   tuple(track_except_columns or ()))

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> Tracking:
        """The tracking a version was staged with (a manifest without it: every column)."""
        return cls.of(manifest.get("track"), manifest.get("track_except"))

    def record(self) -> dict[str, Any]:
        """The manifest's fields (:meth:`from_manifest` reads them back)."""
        return {"track": list(self.only) if self.only is not None else None,
                "track_except": list(self.but)}

    @property
    def named(self) -> list[str]:
        """The columns the settings name."""
        return [*(self.only or ()), *self.but]

    def tracked(self, changed: Sequence[str]) -> bool:
        """Whether a change in ``changed`` columns opens a new row."""
        lower = [c.lower() for c in changed]
        if self.only is not None:
            return any(c.lower() in lower for c in self.only)
        but = {c.lower() for c in self.but}
        return any(c not in but for c in lower)


def tracked_columns_problem(tracking: Tracking, columns: Sequence[str],
                            keys: Sequence[str], exclude: Sequence[str] = ()) -> str | None:
    """What is wrong with the columns the tracking names for a snapshot of ``columns`` with
    ``keys``: each must be a non-key column of it (case-insensitively), and one
    ``track_history_columns`` names must not be among the table's ``exclude`` (a change there
    is no change: the history would never open a row for it); None: nothing."""
    present = {c.lower() for c in columns}
    named = tracking.named
    missing = [c for c in named if c.lower() not in present]
    if missing:
        return f"tracked history columns {missing} are not columns of the snapshot"
    key_names = {k.lower() for k in keys}
    named_keys = [c for c in named if c.lower() in key_names]
    if named_keys:
        return f"tracked history columns {named_keys} are key columns"
    excluded = {c.lower() for c in exclude}
    untracked = [c for c in tracking.only or () if c.lower() in excluded]
    if untracked:
        return (f"tracked history columns {untracked} are excluded from the table's "
                "fingerprint (exclude): a change only there is no update, so it would never "
                "open a history row")
    return None


def refuse_tracked_columns(sink_id: str, tracking: Tracking, columns: Sequence[str],
                           keys: Sequence[str], *, table: str, snapshot: str,
                           exclude: Sequence[str] = ()) -> None:
    """Raise :class:`ConfigError` when :func:`tracked_columns_problem` finds something (a
    sink's ``accept``)."""
    problem = tracked_columns_problem(tracking, columns, keys, exclude)
    if problem is not None:
        raise ConfigError(
            f"sink {sink_id}: {problem}", table=table, snapshot=snapshot,
            hint="name non-key columns of the table in track_history_columns / "
                 "track_history_except_columns (in track_history_columns: columns the table "
                 "does not exclude)",
        )
