"""Settings of one Delta Lake sink (docs/delta.md)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from diffcdc.core import history_layout as hl
from diffcdc.sinks.history_settings import (
    TrackColumns,
    TrackExceptColumns,
    Tracking,
    tracking_settings_problem,
)
from diffcdc.sinks.targets import SinkTarget, folder_location


class HistoryColumns(BaseModel):
    """The names of a history's metadata columns (``mode = "scd2"``; docs/history.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    start_at: str = Field(default=hl.START_AT, description="The version that opened the row.")
    end_at: str = Field(default=hl.END_AT, description="The version that closed the row.")
    valid_from: str = Field(default=hl.VALID_FROM, description="The as-of time it opened.")
    valid_to: str = Field(default=hl.VALID_TO, description="The as-of time it closed.")
    changed_columns: str = Field(default=hl.CHANGED_COLUMNS,
                                 description="An update's changed columns.")
    deleted: str | None = Field(default=None, description="deletes = \"row\": the tombstone "
                                f"flag (default {hl.DELETED}).")


class OpenEndConfig(BaseModel):
    """What the open row holds instead of NULL (``mode = "scd2"``; docs/history.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    end_at: int | None = Field(default=None, description="A version sentinel above every "
                               "version, e.g. 9223372036854775807.")
    valid_to: str | dt.datetime | None = Field(
        default=None, description="A UTC time sentinel, e.g. \"9999-12-31T00:00:00Z\".")

    @field_validator("valid_to")
    @classmethod
    def _a_time(cls, value: str | dt.datetime | None) -> str | dt.datetime | None:
        if value is not None:
            hl.parse_open_time(value)
        return value


def history_layout(deletes: str, history_columns: HistoryColumns | None,
                   open_end: OpenEndConfig | None) -> hl.HistoryLayout:
    """The history's layout a sink's ``deletes``, ``history_columns`` and ``open_end`` give
    (every history sink type takes these three settings: Delta's, PostgreSQL's)."""
    names = history_columns or HistoryColumns()
    deleted = (names.deleted or hl.DELETED) if deletes == "row" else None
    end = open_end or OpenEndConfig()
    return hl.HistoryLayout(
        start_at=names.start_at, end_at=names.end_at, valid_from=names.valid_from,
        valid_to=names.valid_to, changed_columns=names.changed_columns, deleted=deleted,
        open_end=hl.OpenEnd(end.end_at, hl.parse_open_time(end.valid_to)
                            if end.valid_to is not None else None),
    )


def layout_settings_problem(mode: str, deletes: str, history_columns: HistoryColumns | None,
                            open_end: OpenEndConfig | None) -> str | None:
    """What is wrong with a sink's history layout settings for its ``mode``, or None."""
    given = [k for k, v in (("history_columns", history_columns), ("open_end", open_end))
             if v is not None]
    if deletes != "close":
        given.insert(0, "deletes")
    if mode != "scd2" and given:
        return f"{' / '.join(given)} need mode = \"scd2\" (a history table)"
    if history_columns is not None and history_columns.deleted is not None and deletes != "row":
        return ("history_columns.deleted names the tombstone flag of deletes = \"row\": set "
                "deletes = \"row\", or leave it out")
    if mode == "scd2":
        problems = history_layout(deletes, history_columns, open_end).problems()
        if problems:
            return problems[0]
    return None


class DeltaSinkConfig(BaseModel):
    """A Delta table whose change data feed is the diff (written with delta-rs)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["delta"] = "delta"
    name: str | None = Field(default=None, description="Sink id in the table (default: delta).")
    path: str = Field(description="The Delta table: a local folder or an object-store URL.")
    changelog_path: str | None = Field(
        default=None,
        description="A second, append-only Delta table keeping every change row forever.",
    )
    mode: Literal["current", "scd2"] = Field(
        default="current",
        description="`current`: the table's image, its change data feed the diff; `scd2`: a "
        "history table, every version of every row with its validity (docs/delta.md).",
    )
    track_history_columns: TrackColumns = None
    track_history_except_columns: TrackExceptColumns = None
    deletes: Literal["close", "row"] = Field(
        default="close",
        description="scd2: `close`: a delete closes the key's open row; `row`: it also opens "
        "a tombstone row (the key's last values, the deleted flag true).",
    )
    history_columns: HistoryColumns | None = Field(
        default=None, description="scd2: the metadata columns' names (default __START_AT ...).")
    open_end: OpenEndConfig | None = Field(
        default=None, description="scd2: sentinels the open row holds instead of NULL.")
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        repr=False,  # credentials
        description="delta-rs storage options for object-store URLs (credentials, endpoints).",
    )

    @property
    def sink_id(self) -> str:
        return self.name or self.type

    def targets(self, table: str, schema_name: str | None = None) -> list[SinkTarget]:
        """The Delta table's folder and the change log's."""
        paths = [("path", self.path), ("changelog_path", self.changelog_path)]
        return [SinkTarget("folder", key, folder_location(p), p) for key, p in paths if p]

    def history_layout(self) -> hl.HistoryLayout:
        """The history's layout these settings give (``mode = "scd2"``)."""
        return history_layout(self.deletes, self.history_columns, self.open_end)

    def tracking(self) -> Tracking:
        """Which columns' changes open a new history row (``mode = "scd2"``)."""
        return Tracking.of(self.track_history_columns, self.track_history_except_columns)

    @model_validator(mode="after")
    def _layout_settings(self) -> DeltaSinkConfig:
        problem = layout_settings_problem(self.mode, self.deletes, self.history_columns,
                                          self.open_end)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _history_settings(self) -> DeltaSinkConfig:
        problem = tracking_settings_problem(self.mode, self.track_history_columns,
                                            self.track_history_except_columns)
        if problem is not None:
            raise ValueError(problem)
        if self.mode == "scd2" and self.changelog_path:
            raise ValueError("changelog_path is for mode = \"current\": a history table "
                             "keeps every version itself")
        return self

    @field_validator("path", "changelog_path")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        return value
