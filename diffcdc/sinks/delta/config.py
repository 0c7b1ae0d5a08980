"""Settings of one Delta Lake sink (docs/delta.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from diffcdc.sinks.targets import SinkTarget, folder_location


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
    track_history_columns: list[str] | None = Field(
        default=None,
        description="scd2: only a change in these columns opens a new history row; a change "
        "in the others is written into the open row.",
    )
    track_history_except_columns: list[str] | None = Field(
        default=None,
        description="scd2: a change in these columns alone is written into the open row; "
        "every other column opens a new history row.",
    )
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

    @model_validator(mode="after")
    def _history_settings(self) -> DeltaSinkConfig:
        tracking = self.track_history_columns is not None or self.track_history_except_columns
        if self.mode == "current" and tracking:
            raise ValueError("track_history_columns / track_history_except_columns need "
                             "mode = \"scd2\"")
        if self.track_history_columns is not None and self.track_history_except_columns:
            raise ValueError("give track_history_columns or track_history_except_columns, "
                             "not both")
        if self.track_history_columns is not None and not self.track_history_columns:
            raise ValueError("track_history_columns is empty: name at least one column, or "
                             "leave it out to track every column")
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
