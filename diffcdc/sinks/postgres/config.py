"""Settings of one PostgreSQL sink (docs/postgres.md).

The connection is given as the JDBC source spells it (``url = "jdbc:postgresql://host:5432/db"``)
or by ``host`` / ``port`` / ``dbname``; the password is never part of the configuration:
``password_env`` names the environment variable holding it. Every wait on the server is
bounded: connecting (``connect_timeout``), a lock (``lock_timeout``), one statement
(``statement_timeout``).
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from diffcdc.core import history_layout as hl
from diffcdc.secrets import env_password
from diffcdc.sinks.delta.config import (
    HistoryColumns,
    OpenEndConfig,
    history_layout,
    layout_settings_problem,
)
from diffcdc.sinks.history_settings import (
    TrackColumns,
    TrackExceptColumns,
    Tracking,
    tracking_settings_problem,
)
from diffcdc.sinks.postgres.connection import PgConnection
from diffcdc.sinks.targets import SinkTarget

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: URL parameters the sink passes on to libpq (anything else on the URL is refused: a JDBC
#: driver's own parameters mean nothing to libpq, and a password must not be on it).
URL_PARAMETERS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "application_name")
#: PostgreSQL's identifier limit (NAMEDATALEN - 1): a longer name is cut short by the server.
MAX_IDENTIFIER_BYTES = 63


def identifier_problem(name: str) -> str | None:
    """Why ``name`` cannot be a PostgreSQL identifier as given, or None."""
    if not name:
        return "is empty"
    if "\x00" in name:
        return "holds a NUL character (PostgreSQL names cannot)"
    size = len(name.encode("utf-8"))
    if size > MAX_IDENTIFIER_BYTES:
        return (f"is {size} bytes long: PostgreSQL cuts names at {MAX_IDENTIFIER_BYTES} bytes "
                "(the table would get another name)")
    return None


def own_table_problem(name: str) -> str | None:
    """Why ``name`` cannot be a target table: the sink's own tables (its bookkeeping table,
    its staging tables) are named ``_diffcdc_*`` next to the target."""
    if name.lower().startswith("_diffcdc_"):
        return ("starts with _diffcdc_, the prefix of the sink's own tables (its bookkeeping "
                "table _diffcdc_versions, its staging tables)")
    return None


class PostgresSinkConfig(BaseModel):
    """A PostgreSQL table kept equal to the snapshots (or a history of them), one transaction
    per diffcdc version."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    type: Literal["postgres"] = "postgres"
    name: str | None = Field(default=None, description="Sink id in the table (default: postgres).")
    url: str | None = Field(
        default=None,
        description="The database as the JDBC source spells it: "
        "`jdbc:postgresql://host:5432/database` (no password on it); or host/port/dbname.")
    host: str | None = Field(default=None, description="The server's host (instead of url).")
    port: int = Field(default=5432, ge=1, le=65535, description="The server's port.")
    dbname: str | None = Field(default=None, description="The database (instead of url).")
    user: str | None = Field(default=None, description="Database user.")
    password_env: str | None = Field(
        default=None, description="Environment variable holding the password (never the password).")
    db_schema: str = Field(default="public", alias="schema",
                           description="The target table's schema (created when missing).")
    table: str | None = Field(default=None,
                              description="The target table (default: the diffcdc table's name).")
    mode: Literal["current", "scd2"] = Field(
        default="current",
        description="`current`: the table is the latest snapshot; `scd2`: a history table, every "
        "version of every row with its validity (the Delta history's layout and rules).")
    deletes: Literal["close", "row"] = Field(
        default="close", description="scd2: `close` a deleted key's open row, or also open a "
        "tombstone `row`.")
    history_columns: HistoryColumns | None = Field(
        default=None, description="scd2: the metadata columns' names (default __START_AT ...).")
    open_end: OpenEndConfig | None = Field(
        default=None, description="scd2: sentinels the open row holds instead of NULL.")
    track_history_columns: TrackColumns = None
    track_history_except_columns: TrackExceptColumns = None
    connect_timeout: float = Field(default=10, gt=0, le=3600,
                                   description="Seconds to wait for a connection.")
    lock_timeout: float = Field(default=30, gt=0, le=86_400,
                                description="Seconds a statement waits for a lock on the table.")
    statement_timeout: float = Field(default=3600, gt=0, le=7 * 86_400,
                                     description="Seconds one statement may run.")

    @property
    def sink_id(self) -> str:
        return self.name or self.type

    def table_name(self, table: str) -> str:
        """The target table's name (``table``, or the diffcdc table's)."""
        return self.table or table

    def server(self) -> tuple[str, int, str, dict[str, str]]:
        """``(host, port, dbname, libpq parameters)`` from ``url`` or the fields."""
        if self.url is None:
            assert self.host is not None and self.dbname is not None
            return self.host, self.port, self.dbname, {}
        parts = urlsplit(self.url[len("jdbc:"):])
        return (unquote(parts.hostname or ""), parts.port or 5432,
                unquote(parts.path.lstrip("/")), dict(parse_qsl(parts.query)))

    def where(self) -> str:
        """The server, database and table as messages name them (no secrets)."""
        host, port, dbname, _ = self.server()
        return f"{host}:{port}/{dbname}"

    def connection(self, table: str) -> PgConnection:
        """The connection's settings, the password read from ``password_env``."""
        host, port, dbname, params = self.server()
        return PgConnection(
            host=host, port=port, dbname=dbname, user=self.user, password=self.password(table),
            connect_timeout=self.connect_timeout, lock_timeout=self.lock_timeout,
            statement_timeout=self.statement_timeout,
            application_name=params.get("application_name", "diffcdc"),
            ssl={k: v for k, v in params.items() if k.startswith("ssl")})

    def password(self, table: str) -> str | None:
        """The password from the variable ``password_env`` names (None: no password_env)."""
        return env_password(self.password_env, table, f"sink {self.sink_id}: ")

    def targets(self, table: str, schema_name: str | None = None) -> list[SinkTarget]:
        """The database table, on its server."""
        host, port, dbname, _ = self.server()
        name = self.table_name(table)
        return [SinkTarget("db_table", "table", f"{dbname}/{self.db_schema}/{name}",
                           f"{self.db_schema}.{name} (database {dbname})",
                           frozenset({f"{host.lower()}:{port}"}))]

    def history_layout(self) -> hl.HistoryLayout:
        """The history's layout these settings give (``mode = "scd2"``)."""
        return history_layout(self.deletes, self.history_columns, self.open_end)

    def tracking(self) -> Tracking:
        """Which columns' changes open a new history row (``mode = "scd2"``)."""
        return Tracking.of(self.track_history_columns, self.track_history_except_columns)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.startswith("jdbc:postgresql://"):
            raise ValueError("must be a URL such as jdbc:postgresql://host:5432/database")
        parts = urlsplit(value[len("jdbc:"):])
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            raise ValueError("has a port that is not a number") from None
        if not parts.hostname or not parts.path.strip("/"):
            raise ValueError("must name a host and a database: jdbc:postgresql://host:5432/database")
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not carry a user or password; use user and password_env")
        unknown = [k for k, _ in parse_qsl(parts.query) if k not in URL_PARAMETERS]
        if unknown:
            raise ValueError(f"has parameters {unknown} the sink does not pass on (a password "
                             f"goes in password_env; known: {', '.join(URL_PARAMETERS)})")
        return value

    @field_validator("password_env")
    @classmethod
    def _env(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError(  # the value is not echoed: it may be the password itself
                "is not an environment variable name (give the variable's name, not the password)")
        return value

    @field_validator("db_schema", "table")
    @classmethod
    def _identifier(cls, value: str | None) -> str | None:
        if value is not None and (problem := identifier_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @field_validator("table")
    @classmethod
    def _not_the_sinks_own(cls, value: str | None) -> str | None:
        if value is not None and (problem := own_table_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> PostgresSinkConfig:
        if (self.url is None) == (self.host is None and self.dbname is None):
            raise ValueError("give url, or host and dbname, not both")
        if self.url is None and (self.host is None or self.dbname is None):
            raise ValueError("give both host and dbname (or url)")
        problem = layout_settings_problem(self.mode, self.deletes, self.history_columns,
                                          self.open_end)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _history_settings(self) -> PostgresSinkConfig:
        problem = tracking_settings_problem(self.mode, self.track_history_columns,
                                            self.track_history_except_columns)
        if problem is not None:
            raise ValueError(problem)
        return self
