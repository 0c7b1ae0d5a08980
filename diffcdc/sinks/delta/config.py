"""Settings of one Delta Lake sink (docs/delta.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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

    @field_validator("path", "changelog_path")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        return value
