"""Settings of one Open Mirroring landing-zone sink (spec §1; docs/landing.md).

A table without ``sinks`` in its config has exactly one of these, built from the landing
fields at table level (``landing``, ``codec``, ``file_format`` ...), as before sinks existed;
in a table with ``sinks``, those table-level fields are defaults for its open_mirroring sinks.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from diffcdc.core.fields import PathText
from diffcdc.sinks.openmirroring.options import (
    PRESET_SEPARATOR,
    FileFormat,
    PartnerInfo,
    TextOptions,
)
from diffcdc.sinks.targets import SinkTarget, folder_location

Codec = Literal["snappy", "zstd", "gzip", "none"]


class OpenMirroringSinkConfig(BaseModel):
    """A Microsoft Fabric Open Mirroring landing zone (local folder, OneLake or ADLS Gen2)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["open_mirroring"] = "open_mirroring"
    name: str | None = Field(default=None, description="Sink id in the table (default: the type).")
    landing: PathText = Field(
        description="Landing zone root: a local folder, or abfss:// / https:// (OneLake, ADLS "
        "Gen2; docs/remote-landing.md)."
    )
    landing_options: dict[str, Any] = Field(
        default_factory=dict,
        repr=False,  # may hold a secret (account_key, sas_token)
        description="Options of a remote landing root (credentials, workers, retries).",
    )
    codec: Codec | None = Field(
        default=None,
        description="Compression of landing files (default: snappy for Parquet, none for text).",
    )
    max_rows_per_file: int = Field(default=1_000_000, gt=0, description="Rows per landing file at most.")
    file_format: FileFormat = Field(
        default="parquet", description="Landing files: parquet, or delimited text csv/tsv/psv/text."
    )
    file_extension: str | None = Field(
        default=None, description="Extension of text files (default: the format; needed for text)."
    )
    text: TextOptions = Field(
        default_factory=TextOptions, description="Delimited-text properties (separators, quote...)."
    )
    upsert_default: bool = Field(
        default=False, description="isUpsertDefaultRowMarker: inserts and updates land as UPSERT."
    )
    file_detection: Literal["sequential", "last_update_time"] = Field(
        default="sequential",
        description="last_update_time: fileDetectionStrategy LastUpdateTimeFileDetection.",
    )
    partner: PartnerInfo | None = Field(
        default=None, description="_partnerEvents.json at the landing root."
    )
    drop_timeout: float = Field(
        default=300.0, gt=0, description="Seconds to wait for a dropped table folder to vanish."
    )

    @property
    def sink_id(self) -> str:
        return self.name or self.type

    def targets(self, table: str, schema_name: str | None = None) -> list[SinkTarget]:
        """The landing root (shared with the other tables in it) and the table's folder."""
        from diffcdc.sinks.openmirroring.contract import table_folder

        root = folder_location(self.landing)
        folder = table_folder(table, schema_name)
        partner = None if self.partner is None else repr(self.partner.document())
        return [
            SinkTarget("root", "landing", root, self.landing, shared=partner),
            SinkTarget("landing_table", "landing", f"{root.rstrip('/')}/{folder}",
                       f"{self.landing.rstrip('/')}/{folder}"),
        ]

    @model_validator(mode="before")
    @classmethod
    def _sas_out_of_url(cls, data: Any) -> Any:
        """A SAS token on a remote landing URL moves to ``landing_options["sas_token"]``.

        So ``landing`` never holds a secret, wherever it is shown.
        """
        if not isinstance(data, dict):
            return data
        landing, options = data.get("landing"), data.get("landing_options")
        if not (isinstance(landing, str) and "://" in landing and "?" in landing):
            return data
        if options is not None and not isinstance(options, dict):
            return data  # the field's own validation reports it
        url, _, query = landing.partition("?")
        options = dict(options or {})
        if query:
            if options.get("sas_token") or options.get("sas_token_env"):
                raise ValueError("a SAS token on the landing URL and sas_token(_env) in landing_options")
            options["sas_token"] = query
        return {**data, "landing": url, "landing_options": options}

    @field_validator("file_extension")
    @classmethod
    def _extension(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.lstrip(".")
        if not re.fullmatch(r"[A-Za-z0-9]{1,16}", value) or value.lower() == "parquet":
            raise ValueError(f"file_extension {value!r} must be 1-16 letters/digits, not parquet")
        return value

    @model_validator(mode="after")
    def _text_settings(self) -> OpenMirroringSinkConfig:
        if self.file_format == "parquet" and self.file_extension is not None:
            raise ValueError("file_extension applies to text formats only")
        if self.file_format == "text" and self.file_extension is None:
            raise ValueError("file_format 'text' needs file_extension (e.g. 'txt', 'dat')")
        return self

    @property
    def is_text(self) -> bool:
        return self.file_format != "parquet"

    @property
    def extension(self) -> str:
        """The data file extension: ``parquet``, or the text extension."""
        if not self.is_text:
            return "parquet"
        return self.file_extension or self.file_format

    @property
    def landing_codec(self) -> str:
        return self.codec or ("none" if self.is_text else "snappy")

    @property
    def column_separator(self) -> str:
        return self.text.column_separator or PRESET_SEPARATOR[self.file_format if self.is_text else "csv"]


#: Table-level fields that configure a table's open_mirroring sinks (see the module docstring).
LANDING_FIELDS = tuple(
    f for f in OpenMirroringSinkConfig.model_fields if f not in ("type", "name")
)
