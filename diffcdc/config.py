"""Validated configuration: one table's definition, and a config file with many tables.

The config file is TOML: Python reads it with the standard library (no extra dependency),
values are typed (no YAML surprises such as ``no`` becoming ``false`` or ``0123`` an octal),
comments are allowed, and ``[tables.Name]`` sections read naturally::

    [diffcdc]
    state = "state"            # state root (relative paths: relative to this file)
    landing = "landing"        # default landing root for every table
    keep_versions = 10

    [spark]
    master = "local[*]"
    conf = { "spark.driver.memory" = "4g" }

    [quality]                  # the data-quality gate, for every table
    max_delete_ratio = 0.2

    [defaults]                 # any table field, applied to every table
    codec = "zstd"

    [tables.Employees]
    source = "snapshots/employees"
    keys = ["EmployeeID"]
    exclude = ["ExtractedAt"]
    quality = { max_delete_ratio = 0.5 }   # replaces the global setting for this table

Every error names the file, the table and the field.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from diffcdc.core.quality import QualityConfig
from diffcdc.errors import ConfigError
from diffcdc.sinks.openmirroring.options import (
    PRESET_SEPARATOR,
    FileFormat,
    PartnerInfo,
    TextOptions,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Codec = Literal["snappy", "zstd", "gzip", "none"]

_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f/\\]")


def check_folder_name(value: str, what: str = "table name") -> str:
    """Refuse names that are not safe as one folder name in the landing zone."""
    if not value or not value.strip():
        raise ValueError(f"{what} is empty")
    if value in {".", ".."}:
        raise ValueError(f"{what} {value!r} is not a folder name")
    if _UNSAFE_NAME.search(value):
        raise ValueError(f"{what} {value!r} contains '/', '\\' or a control character")
    if value.startswith("_"):
        raise ValueError(f"{what} {value!r} starts with '_', which the landing zone ignores")
    if value != value.strip():
        raise ValueError(f"{what} {value!r} has leading or trailing spaces")
    return value


class TableConfig(BaseModel):
    """One table: where its snapshots come from and how its changes land."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Landing table name (one safe folder name).")
    source: str = Field(description="Folder with one entry per snapshot, taken in lexical order.")
    keys: list[str] = Field(description="Key columns (composite allowed).")
    landing: str = Field(
        description="Landing zone root: a local folder, or abfss:// / https:// (OneLake, ADLS "
        "Gen2; docs/remote-landing.md)."
    )
    exclude: list[str] = Field(default_factory=list, description="Columns left out of the fingerprint.")
    schema_name: str | None = Field(default=None, description="Schema folder (`<schema>.schema/`).")
    codec: Codec | None = Field(
        default=None,
        description="Compression of landing files (default: snappy for Parquet, none for text).",
    )
    max_rows_per_file: int = Field(default=1_000_000, gt=0, description="Rows per landing file at most.")
    fingerprint_bits: Literal[64, 128] = Field(default=64, description="Fingerprint width.")
    csv_infer_schema: bool = Field(
        default=False, description="Infer CSV column types (default: every CSV column is a string)."
    )
    landing_options: dict[str, Any] = Field(
        default_factory=dict,
        repr=False,  # may hold a secret (account_key, sas_token)
        description="Options of a remote landing root (credentials, workers, retries).",
    )
    quality: QualityConfig | None = Field(
        default=None, description="Quality gate settings that replace the global [quality] ones."
    )
    # -- landing contract options (docs/landing.md) -------------------------------------------
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
    schema_policy: Literal["fail", "recreate"] = Field(
        default="fail",
        description="Removed/renamed/retyped column: fail (exit 3) or recreate the table.",
    )
    removed_columns: Literal["policy", "null"] = Field(
        default="policy", description="null: a removed column continues as NULL (no policy)."
    )
    partner: PartnerInfo | None = Field(
        default=None, description="_partnerEvents.json at the landing root."
    )
    drop_timeout: float = Field(
        default=300.0, gt=0, description="Seconds to wait for a dropped table folder to vanish."
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return check_folder_name(value)

    @field_validator("schema_name")
    @classmethod
    def _safe_schema(cls, value: str | None) -> str | None:
        return None if value is None else check_folder_name(value, "schema name")

    @field_validator("keys")
    @classmethod
    def _keys(cls, value: list[str]) -> list[str]:
        if not value or any(not k or not k.strip() for k in value):
            raise ValueError("at least one non-empty key column is required")
        if len({k.lower() for k in value}) != len(value):
            raise ValueError(f"key columns repeat: {value}")
        return value

    @model_validator(mode="after")
    def _exclude_not_key(self) -> TableConfig:
        clash = {c.lower() for c in self.exclude} & {k.lower() for k in self.keys}
        if clash:
            raise ValueError(f"key columns cannot be excluded from the fingerprint: {sorted(clash)}")
        return self

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
    def _text_settings(self) -> TableConfig:
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

    @property
    def state_name(self) -> str:
        """The table's folder in the state root: ``<schema>.schema.<Table>`` with a schema."""
        return state_name(self.name, self.schema_name)


def state_name(table: str, schema_name: str | None = None) -> str:
    """State folder name of a table; tables of the same name in two schemas stay apart."""
    return f"{schema_name}.schema.{table}" if schema_name else table


class SparkSettings(BaseModel):
    """Where Spark runs: `local[*]` by default, any cluster master otherwise."""

    model_config = ConfigDict(extra="forbid")

    master: str | None = Field(default=None, description="Spark master URL; default local[*].")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings.")


class RunConfig(BaseModel):
    """A whole run: global settings and the tables."""

    model_config = ConfigDict(extra="forbid")

    state: str = Field(default="state", description="State root.")
    keep_versions: int = Field(default=10, ge=1, description="State versions kept for rollback.")
    spark: SparkSettings = Field(default_factory=SparkSettings)
    quality: QualityConfig = Field(default_factory=QualityConfig, description="Global gate settings.")
    tables: list[TableConfig] = Field(default_factory=list)
    source_file: str | None = Field(default=None, description="The config file this came from.")


def _location(loc: tuple[Any, ...], tables: list[str]) -> str:
    parts = list(loc)
    if len(parts) >= 2 and parts[0] == "tables" and isinstance(parts[1], int):
        name = tables[parts[1]] if parts[1] < len(tables) else str(parts[1])
        rest = ".".join(str(p) for p in parts[2:])
        return f"table {name}" + (f", field {rest}" if rest else "")
    return "field " + ".".join(str(p) for p in parts)


def _error_from_validation(exc: ValidationError, path: str, tables: list[str]) -> ConfigError:
    first = exc.errors()[0]
    where = _location(tuple(first["loc"]), tables)
    more = len(exc.errors()) - 1
    message = f"{where}: {first['msg']}" + (f" (and {more} more problem(s))" if more else "")
    return ConfigError(message, path=path, hint="fix the config file and run again")


def load_config(path: str) -> RunConfig:
    """Read and validate a TOML config file; relative paths are relative to the file."""
    try:
        with open(path, "rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError("config file not found", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    base = os.path.dirname(os.path.abspath(path))
    unknown = set(raw) - {"diffcdc", "spark", "quality", "defaults", "tables", "partner"}
    if unknown:
        raise ConfigError(
            f"unknown section(s) {sorted(unknown)}; expected diffcdc, spark, quality, defaults, "
            "partner, tables",
            path=path,
        )
    top = dict(raw.get("diffcdc", {}))
    landing_default = top.pop("landing", None)
    defaults = dict(raw.get("defaults", {}))
    if landing_default is not None:
        defaults.setdefault("landing", landing_default)
    if "partner" in raw:  # [partner] is database level: every table publishes the same file
        defaults.setdefault("partner", raw["partner"])
    tables_raw = raw.get("tables", {})
    if not isinstance(tables_raw, dict) or not tables_raw:
        raise ConfigError("no [tables.<Name>] section", path=path, hint="define at least one table")
    names = list(tables_raw)
    tables = []
    for name, body in tables_raw.items():
        if not isinstance(body, dict):
            raise ConfigError(f"table {name}: expected a [tables.{name}] section", path=path)
        merged = {**defaults, **body, "name": name}
        for key in ("source", "landing"):
            if isinstance(merged.get(key), str):
                merged[key] = _resolve(base, merged[key])
        if isinstance(merged.get("quality"), dict):
            merged["quality"] = _resolve_quality_paths(base, merged["quality"])
        tables.append(merged)
    state = _resolve(base, top.pop("state", "state"))
    try:
        return RunConfig(
            state=state,
            spark=raw.get("spark", {}),
            quality=_resolve_quality_paths(base, raw.get("quality", {})),
            tables=tables,
            source_file=os.path.abspath(path),
            **top,
        )
    except ValidationError as exc:
        raise _error_from_validation(exc, path, names) from None


def table_from_args(**fields: Any) -> TableConfig:
    """Build a TableConfig from command-line options, with the same validation."""
    try:
        return TableConfig(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "options"
        option = {"name": "table"}.get(field, field).replace("_", "-")
        raise ConfigError(
            f"option --{option}: {first['msg']}",
            table=fields.get("name") if isinstance(fields.get("name"), str) else None,
        ) from None


def _resolve_quality_paths(base: str, section: Any) -> Any:
    if not isinstance(section, dict):
        return section
    out = dict(section)
    for key in ("expectation_suite", "data_docs_dir"):
        if isinstance(out.get(key), str):
            out[key] = _resolve(base, out[key])
    return out


def _resolve(base: str, value: str) -> str:
    if "://" in value or os.path.isabs(value):
        return value
    return os.path.normpath(os.path.join(base, value))
