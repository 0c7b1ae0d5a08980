"""Validated configuration: one table's definition (:class:`TableConfig`) and a whole run
(:class:`RunConfig`: global settings and the tables). The TOML config file that holds them is
read by :mod:`diffcdc.config_file`; every error names the file, the table and the field.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from functools import lru_cache
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    PrivateAttr,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError, PydanticKnownError

from diffcdc.core.fields import STRICT_SETTINGS, PathText
from diffcdc.core.names import MAX_NAME_BYTES, check_folder_name
from diffcdc.core.normalize import Normalizers
from diffcdc.core.quality_config import QualityConfig
from diffcdc.core.scope import ScopeConfig
from diffcdc.errors import ConfigError, DiffcdcError
from diffcdc.observe.settings import LineageSettings, MetricsSettings
from diffcdc.plugin_registry import first_line
from diffcdc.sinks.openmirroring.shorthand import TABLE_LEVEL
from diffcdc.sinks.plugin import SinkPlugin
from diffcdc.sinks.registry import plugin_answer, plugin_of, sink_plugin, sink_plugins
from diffcdc.sinks.table import SinkTable
from diffcdc.sinks.targets import (
    OwnedTarget,
    folder_location,
    folder_overlap,
    own,
    target_clash,
)
from diffcdc.sources.plugin import SourcePlugin
from diffcdc.sources.registry import (
    check_source_secrets,
    source_folder,
    source_jars,
    source_kind,
    source_plugin,
    source_plugins,
    source_type,
)
from diffcdc.sources.snapshot_time import SnapshotTimeRule
from diffcdc.spark.connect import DEFAULT_CONNECT_TIMEOUT
from diffcdc.state.chain import MAX_DELTA_RATIO, MAX_DELTAS
from diffcdc.state.root import StateRoot


@lru_cache(maxsize=8)
def _source_union(plugins: tuple[type[SourcePlugin], ...]) -> TypeAdapter[Any]:
    """The union of these source types' settings, by ``type`` (one per set of known types):
    a folder (a string) or a table selected by its ``type``; errors name the branch meant."""
    return TypeAdapter(
        Annotated[Union[tuple(Annotated[p.config, Tag(p.type)] for p in plugins)],
                  Discriminator(source_kind)],
        config=ConfigDict(strict=True),
    )


def _source_setting(value: Any, info: ValidationInfo) -> Any:
    """A table's ``source`` validated by the config of its type, among the source types
    registered when it is validated: a plug-in a package or a test registers is named in a
    config file like a built-in one. Its errors keep their places (``source.jdbc.url``); an
    unknown type is refused with the known ones listed."""
    plugins = source_plugins()
    if source_kind(value) is None:
        in_file = [p.type for p in plugins if p.in_file and p.config is not str]
        kind = source_type(value)
        if kind is not None and kind not in {p.type for p in plugins}:
            text = (f"unknown source type {kind!r}; give a folder path or type = one of "
                    + ", ".join(repr(t) for t in in_file))
        else:  # no type, or a folder's given as a table
            text = "must be a folder path or a table with type = " + " or ".join(
                f'"{t}"' for t in in_file)
        raise PydanticCustomError("source_kind", "{text}", {"text": text})
    try:
        return _source_union(plugins).validate_python(value, context=info.context)
    except (ValidationError, DiffcdcError):
        raise
    except Exception as exc:  # noqa: BLE001 - a plug-in's config model failed: name the source
        kind = source_kind(value)
        plugin = source_plugin(value)
        raise ConfigError(
            f"source type {kind!r}: the config model of its plug-in {plugin.__qualname__} "
            f"failed: {first_line(exc)}",
            hint="fix the source plug-in, or check this source setting against it",
        ) from exc


#: A table's ``source``: a folder path (a string) or the config of a registered source type.
SourceConfig = Annotated[Any, PlainValidator(_source_setting)]


def _sink_type(entry: Any) -> str | None:
    """A sink entry's ``type`` as text (None: it has none), for the union's discriminator."""
    if isinstance(entry, dict):
        return str(entry["type"]) if "type" in entry else None
    kind = getattr(entry, "type", None)
    return kind if isinstance(kind, str) else None


@lru_cache(maxsize=8)
def _sink_union(plugins: tuple[type[SinkPlugin], ...]) -> TypeAdapter[Any]:
    """The union of these sink types' config models, by ``type`` (one per set of known types)."""
    return TypeAdapter(
        Annotated[Union[tuple(Annotated[p.config, Tag(p.type)] for p in plugins)],
                  Discriminator(_sink_type)],
        config=ConfigDict(strict=True),
    )


def _sink_entry(value: Any, info: ValidationInfo) -> Any:
    """One sink entry validated by the config model of its ``type``, among the sink types
    registered when it is validated (not when this module was imported): a plug-in a package
    or a test registers is named in a config file like a built-in one. Its errors keep their
    places (``sinks.0.delta.path``) and an unknown type lists the known ones."""
    if not isinstance(value, (dict, BaseModel)):  # as a model field says it
        raise PydanticKnownError("model_attributes_type")
    try:
        return _sink_union(sink_plugins()).validate_python(value, context=info.context)
    except (ValidationError, DiffcdcError):
        raise
    except Exception as exc:  # noqa: BLE001 - a plug-in's config model failed: name the sink
        kind = _sink_type(value)
        plugin = sink_plugin(kind) if kind is not None else None
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise ConfigError(
            f"sink type {kind!r}: the config model of its plug-in "
            f"{plugin.__qualname__ if plugin else '?'} failed: "
            f"{type(exc).__name__}{': ' + first if first else ''}",
            hint="fix the sink plug-in, or check this sink entry against it",
        ) from exc


#: One entry of a table's ``sinks``: the config model of a registered sink type, by its ``type``.
SinkConfig = Annotated[Any, PlainValidator(_sink_entry)]


class StateCompaction(BaseModel):
    """When a version's state is written whole again instead of as a delta (see
    :mod:`diffcdc.state.chain`)."""

    model_config = STRICT_SETTINGS

    max_deltas: int = Field(
        default=MAX_DELTAS, ge=0,
        description="Deltas on one base before the next version writes a base (0: every version "
        "writes a whole state, as diffcdc did before deltas).",
    )
    max_delta_ratio: float = Field(
        default=MAX_DELTA_RATIO, ge=0,
        description="Rows in the deltas on one base, as a share of the table's rows, before the "
        "next version writes a base.",
    )


class TableConfig(BaseModel):
    """One table: where its snapshots come from, how they are diffed, and its sinks."""

    model_config = STRICT_SETTINGS

    name: str = Field(description="Table name (one safe folder name; the landing table name).")
    source: SourceConfig = Field(
        description="Folder with one entry per snapshot, taken in lexical order; or a table "
        "`{type = \"jdbc\", ...}` reading a database (docs/sources.md)."
    )
    keys: list[str] = Field(description="Key columns (composite allowed).")
    exclude: list[str] = Field(default_factory=list, description="Columns left out of the fingerprint.")
    normalize: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per column, rules applied to its value before the fingerprint (what "
        "counts as a change; the published values stay as they are): `{code = [\"trim\", "
        "\"casefold\"], amount = [\"round:2\"]}`; rules: trim, rtrim, casefold, round:N, "
        "empty_as_null, json (docs/normalizers.md).",
    )
    schema_name: str | None = Field(default=None, description="Schema (`<schema>.schema/` folder).")
    fingerprint_bits: Literal[64, 128] = Field(default=64, description="Fingerprint width.")
    csv_infer_schema: bool = Field(
        default=False, description="Infer CSV column types (default: every CSV column is a string)."
    )
    csv_encoding: str = Field(
        default="utf-8",
        description="Encoding of CSV snapshots; a byte that is not valid in it refuses the file.",
    )
    snapshot_time: str | None = Field(
        default=None,
        description="A folder snapshot's as-of time: `\"mtime\"` (default: its files' newest "
        "modification time) or `\"id:<strptime format>\"` parsed from the snapshot id, e.g. "
        "`\"id:%Y-%m-%d\"`. Set, a snapshot older than the last one is refused.",
    )
    snapshot_time_ahead: int = Field(
        default=3600, ge=0,
        description="Seconds a snapshot's as-of time may lie past the run's clock (clock skew); "
        "a snapshot further in the future is refused (exit 3).",
    )
    quality: QualityConfig | None = Field(
        default=None, description="Quality gate settings that replace the global [quality] ones."
    )
    schema_policy: Literal["fail", "recreate"] = Field(
        default="fail",
        description="Removed/renamed/retyped column: fail (exit 3) or recreate the table.",
    )
    removed_columns: Literal["policy", "null"] = Field(
        default="policy", description="null: a removed column continues as NULL (no policy)."
    )
    keep_snapshots: int = Field(
        default=0,
        ge=0,
        description="Parquet copies of the last N snapshots read from a database or DataFrame "
        "kept under the state (for `diffcdc verify`); 0: deleted once committed.",
    )
    state_compaction: StateCompaction = Field(
        default_factory=StateCompaction,
        description="When the state is written whole again: `{max_deltas = 30, "
        "max_delta_ratio = 0.5}` (a version's state is otherwise only what it changed).",
    )
    scope: ScopeConfig | None = Field(
        default=None,
        description="What a snapshot covers (`columns` and/or `where`): a key the snapshot does "
        "not hold is deleted only inside it, kept outside (docs/scope.md). None: everything.",
    )
    sinks: list[SinkConfig] = Field(
        min_length=1,
        description="Where the changes go; without `sinks`, one open_mirroring sink from the "
        "table-level landing fields.",
    )

    @model_validator(mode="before")
    @classmethod
    def _table_fields_to_sinks(cls, data: Any) -> Any:
        """Table-level sink fields: the one sink of a table without ``sinks``, else defaults.

        Before sinks existed a table had one landing zone configured by fields at table level
        (``landing``, ``codec``, ``file_format`` ...); such configs keep working unchanged
        (Open Mirroring's shorthand, :data:`~diffcdc.sinks.openmirroring.shorthand.TABLE_LEVEL`).
        """
        if not isinstance(data, dict):
            return data
        fields = TABLE_LEVEL.fields
        given = {k: data[k] for k in fields if k in data}
        rest = {k: v for k, v in data.items() if k not in fields}
        if "sinks" not in rest:
            if given:
                rest["sinks"] = [{"type": TABLE_LEVEL.type, **given}]
            return rest
        sinks = rest["sinks"]
        if isinstance(sinks, list) and given:
            rest["sinks"] = [
                {**given, **s} if isinstance(s, dict) and s.get("type") == TABLE_LEVEL.type else s
                for s in sinks
            ]
        return rest

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return check_folder_name(value)

    @field_validator("snapshot_time")
    @classmethod
    def _time_rule(cls, value: str | None) -> str | None:
        if value is not None:
            SnapshotTimeRule.parse(value)
        return value

    @field_validator("csv_encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        try:
            return codecs.lookup(value).name
        except LookupError:
            raise ValueError(f"unknown encoding {value!r} (e.g. utf-8, latin-1, cp1252)") from None

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

    @field_validator("normalize")
    @classmethod
    def _known_rules(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        Normalizers.parse(value)
        return value

    @model_validator(mode="after")
    def _normalize_not_key(self) -> TableConfig:
        """A key column cannot be normalized (keys are identities), an excluded one need not."""
        for column in self.normalize:
            if column.lower() in {k.lower() for k in self.keys}:
                raise ValueError(f"key column {column!r} cannot be normalized: keys are the rows' "
                                 "identities, compared as they are; remove it from normalize")
            if column.lower() in {c.lower() for c in self.exclude}:
                raise ValueError(f"column {column!r} is excluded from the fingerprint: a "
                                 "normalizer on it would do nothing; remove it from normalize "
                                 "or from exclude")
        return self

    @model_validator(mode="after")
    def _scope_can_delete(self) -> TableConfig:
        problem = self.scope.keys_problem(self.keys) if self.scope is not None else None
        if problem is not None:
            raise ValueError(problem)
        return self

    @property
    def normalizers(self) -> Normalizers:
        """The table's normalizers (:mod:`diffcdc.core.normalize`), typed."""
        return Normalizers.parse(self.normalize)

    @model_validator(mode="after")
    def _exclude_not_key(self) -> TableConfig:
        if self.snapshot_time is not None and \
                not source_plugin(self.source).capabilities.snapshot_times:
            raise ValueError(
                "snapshot_time is a rule for folder snapshots: a JDBC read's time is its start, "
                "a DataFrame's is run_dataframe(snapshot_time=...)")
        clash = {c.lower() for c in self.exclude} & {k.lower() for k in self.keys}
        if clash:
            raise ValueError(f"key columns cannot be excluded from the fingerprint: {sorted(clash)}")
        ids = [s.sink_id for s in self.sinks]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(f"sink ids repeat: {repeated}; give each sink its own `name`")
        for sink_id in ids:
            check_folder_name(sink_id, "sink name")
        if len(self.state_name.encode()) > MAX_NAME_BYTES:
            raise ValueError(f"schema and table name together are too long for a state folder "
                             f"({len(self.state_name.encode())} bytes; at most {MAX_NAME_BYTES})")
        clash = target_clash(self.targets())
        if clash:
            raise ValueError(clash)
        folder = source_folder(self)
        if folder is not None:  # a folder of snapshots
            overlap = folder_overlap(
                self.targets(), folder, "the table's source folder",
                "what the sink writes would be read as a snapshot (or a snapshot taken for "
                "its output)")
            if overlap:
                raise ValueError(overlap)
        return self

    def targets(self) -> list[OwnedTarget]:
        """Where each of the table's sinks writes (compared with every other sink's at load)."""
        label = table_label(self)
        return [t for s in self.sinks
                for t in own(label, s.sink_id, s.targets(self.name, self.schema_name))]

    @property
    def state_name(self) -> str:
        """The table's folder in the state root: ``<schema>.schema.<Table>`` with a schema."""
        return state_name(self.name, self.schema_name)

    def sink_table(self, keys: Sequence[str] | None = None) -> SinkTable:
        """The table as its sinks see it; ``keys``: the key columns as a snapshot spells them
        (the configured ones match them case-blind), else as configured."""
        return SinkTable(self.name, tuple(self.keys if keys is None else keys), self.schema_name,
                         tuple(self.exclude))

    def with_table_fields(self, **fields: Any) -> TableConfig:
        """A copy whose sinks that take these table-level fields get them (``--landing``,
        ``--landing-option``: Open Mirroring's shorthand; validated)."""
        sinks = []
        level = TABLE_LEVEL
        for sink in self.sinks:
            if sink.type == level.type and set(fields) <= set(level.fields):
                sink = level.override(sink, fields)
            sinks.append(sink)
        return self.model_copy(update={"sinks": sinks})


def state_name(table: str, schema_name: str | None = None) -> str:
    """State folder name of a table; tables of the same name in two schemas stay apart."""
    return f"{schema_name}.schema.{table}" if schema_name else table


class SparkSettings(BaseModel):
    """Where Spark runs: `local[*]` by default, any cluster master otherwise."""

    model_config = ConfigDict(extra="forbid", strict=True)

    master: str | None = Field(default=None, description="Spark master URL; default local[*].")
    remote: str | None = Field(
        default=None,
        description="A Spark Connect server (sc://host:port) to run on instead of a Spark of "
        "this process's own; default: the SPARK_REMOTE environment variable, if set.",
    )
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings.")
    connect_timeout: float = Field(
        default=DEFAULT_CONNECT_TIMEOUT, gt=0, allow_inf_nan=False,
        description="With a Spark Connect server: seconds it may go without answering (killed, "
        "hung, its network gone) before the run ends, releasing what the table holds.",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> SparkSettings:
        if self.master is not None and self.remote is not None:
            raise ValueError("master and remote exclude each other: a Spark Connect server "
                             "has its own master")
        return self


class RunConfig(BaseModel):
    """A whole run: global settings and the tables."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)

    state: PathText = Field(
        default="state",
        description="State root: a local folder (or a mount), or an abfss:// / https:// URL for "
        "the state documents (then state_data holds the state Parquet).",
    )
    state_data: PathText | None = Field(
        default=None,
        description="The folder for the state Parquet and staged output: with a URL state root "
        "a folder the Spark driver and every executor open at the same path, or (with any "
        "state root) a webhdfs://namenode:port/path URL.",
    )
    state_options: dict[str, Any] = Field(
        default_factory=dict,
        repr=False,  # may hold a secret (account_key, sas_token)
        description="Options of a URL state root (credentials, retries), as landing_options.",
    )
    keep_versions: int = Field(default=10, ge=1, description="State versions kept for rollback.")
    lease_seconds: float = Field(
        default=120.0,
        gt=0,
        le=86400,
        description="How long a run's lease on a table lasts without a heartbeat (renewed every "
        "quarter of it); a killed run's table is taken over after that (at once on the same "
        "machine).",
    )
    parallelism: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Tables processed at once in one Spark application (default: the machine's "
        "cores, at least 2, at most 8).",
    )
    spark: SparkSettings = Field(default_factory=SparkSettings)
    quality: QualityConfig = Field(default_factory=QualityConfig, description="Global gate settings.")
    tables: list[TableConfig] = Field(default_factory=list)
    source_file: str | None = Field(default=None, description="The config file this came from.")
    lineage: LineageSettings | None = Field(
        default=None, description="OpenLineage events of every run (docs/lineage.md).")
    metrics: MetricsSettings | None = Field(
        default=None, description="The Prometheus metrics of every run (docs/metrics.md).")

    #: The StateRoot made from the settings it was made from (one ADLS client for a URL root,
    #: shared by the idle checks, the run and copies of this config).
    _root: tuple[tuple[Any, ...], StateRoot] | None = PrivateAttr(default=None)

    def state_root(self) -> StateRoot:
        """The state root these settings name (raises ConfigError when they do not fit)."""
        settings = (self.state, self.state_data, sorted(self.state_options.items()))
        if self._root is None or self._root[0] != settings:
            self._root = (settings, StateRoot(self.state, self.state_data, self.state_options))
        return self._root[1]

    def jars(self) -> list[str]:
        """Driver jars the tables' JDBC sources need on Spark's classpath."""
        jars = [j for t in self.tables for j in source_jars(t)]
        return list(dict.fromkeys(jars))


    @model_validator(mode="after")
    def _one_state_folder_per_table(self) -> RunConfig:
        """Two tables never share a state folder (and its lock): the second would never run."""
        seen: dict[str, TableConfig] = {}
        for table in self.tables:
            other = seen.setdefault(table.state_name, table)
            if other is not table:
                raise ValueError(
                    f"tables {table_label(other)} and {table_label(table)} would share the state "
                    f"folder {table.state_name!r} (and its lock); rename one of them"
                )
        clash = target_clash([t for table in self.tables for t in table.targets()])
        if clash:
            raise ValueError(clash)
        problem = self._folders_apart()
        if problem:
            raise ValueError(problem)
        return self

    def _folders_apart(self) -> str | None:
        """A sink folder of any table inside (or around) another table's source folder, the
        state root or ``state_data``; or a source folder and the state root one inside the
        other (what the state holds would be read as snapshots) — in words, or None."""
        targets = [t for table in self.tables for t in table.targets()]
        overlap = sinks_apart_from_state(targets, self.state, self.state_data)
        if overlap:
            return overlap
        roots = [(f, what) for f, what in ((self.state, "the state root"),
                                           (self.state_data, "the state data folder")) if f]
        for table in self.tables:
            source = source_folder(table)
            if source is None:
                continue
            overlap = folder_overlap(  # a table's own sinks: checked with the table
                [t for t in targets if t.table != table_label(table)], source,
                f"the source folder of table {table_label(table)}",
                "what the sink writes would be read as that table's snapshots")
            if overlap:
                return overlap
            for folder, what in roots:
                here, there = folder_location(source), folder_location(folder)
                if here == there or here.startswith(there.rstrip("/") + "/") or \
                        there.startswith(here.rstrip("/") + "/"):
                    return (f"table {table_label(table)} reads its snapshots from "
                            f"{source}, which is, lies inside or holds {what} {folder}: "
                            "the state would be read as snapshots, or snapshots as state; give "
                            "them folders side by side")
        return None


def sinks_apart_from_state(targets: list[OwnedTarget], state: str,
                           state_data: str | None = None) -> str | None:
    """The first sink folder that is, lies inside or holds the state root or ``state_data``,
    in words; None when they all lie apart."""
    for folder, what in ((state, "the state root"), (state_data, "the state data folder")):
        if folder:
            overlap = folder_overlap(
                targets, folder, what,
                "the sink's output and the state would be taken for each other")
            if overlap:
                return overlap
    return None


def check_secrets(tables: list[TableConfig]) -> None:
    """Every environment variable a table reads a secret from is set — a JDBC source's
    ``password_env``, a Kafka sink's ``sasl_password_env`` — found before Spark starts (exit
    2, one line), not once the read or the publish begins."""
    for table in tables:
        check_source_secrets(table)
        for sink in table.sinks:
            plugin = plugin_of(sink)
            plugin_answer(plugin, f"check the secrets of sink {sink.sink_id} of table {table.name}",
                          lambda: plugin.check_secrets(sink, table.name))  # noqa: B023 - called here


def table_label(table: TableConfig) -> str:
    """``'Name'`` or ``'Name' (schema 's')``, for messages about tables."""
    return repr(table.name) + (f" (schema {table.schema_name!r})" if table.schema_name else "")
