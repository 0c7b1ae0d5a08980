"""The ``[tables.NAME.source]`` table of a non-folder source (``type = "jdbc"``); see docs/sources.md.

A table's ``source`` given as a string stays the folder source. The password of a database is
never part of the configuration: ``password_env`` names the environment variable holding it.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from diffcdc.secrets import env_password

#: Connection settings that carry a secret: never on a URL (it is recorded and printed).
_SECRET_ON_URL = re.compile(r"[?&;:](password|pwd|passwd|secret|token|sslpassword)=", re.I)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Databases whose partitioned reads can all see one snapshot (see docs/sources.md).
CONSISTENT_PARTITIONS = ("postgresql",)
#: Driver class per JDBC subprotocol, when ``driver`` is not given.
DEFAULT_DRIVERS = {"postgresql": "org.postgresql.Driver", "mysql": "org.mariadb.jdbc.Driver"}
#: ``column_types`` values: the database's text of each value, or a decimal checked value by value.
_COLUMN_TYPE = re.compile(r"^(string|decimal\(\s*(\d{1,2})\s*,\s*(\d{1,2})\s*\))$", re.I)
#: Driver jar per JDBC subprotocol, when ``driver_jar`` is not given (Debian's packages).
DEFAULT_JARS = {"postgresql": "/usr/share/java/postgresql.jar",
                "mysql": "/usr/share/java/mariadb-java-client.jar"}


class JdbcSourceConfig(BaseModel):
    """A database table or query read over JDBC by Spark; each read is one snapshot."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["jdbc"] = Field(description="Source type.")
    url: str = Field(description="JDBC URL, e.g. `jdbc:postgresql://db:5432/erp` (no password on it).")
    table: str | None = Field(default=None, description="Table (or view) to read, e.g. `public.orders`.")
    query: str | None = Field(default=None, description="A SELECT to read instead of a table.")
    user: str | None = Field(default=None, description="Database user.")
    password_env: str | None = Field(
        default=None, description="Environment variable holding the password (never the password)."
    )
    partition_column: str | None = Field(
        default=None, description="Numeric, date or timestamp column splitting the read."
    )
    num_partitions: int = Field(default=1, ge=1, description="Parallel reads (with partition_column).")
    lower_bound: int | float | str | None = Field(
        default=None, description="Lowest partition_column value to split at (default: its min)."
    )
    upper_bound: int | float | str | None = Field(
        default=None, description="Highest partition_column value to split at (default: its max)."
    )
    fetch_size: int = Field(default=10_000, ge=1, description="Rows per round trip to the database.")
    driver: str | None = Field(
        default=None, description="JDBC driver class (default: by URL, org.postgresql.Driver)."
    )
    driver_jar: str | None = Field(
        default=None,
        description="Driver jar put on Spark's classpath (default for PostgreSQL: "
        "/usr/share/java/postgresql.jar from Debian's libpostgresql-jdbc-java).",
    )
    snapshot_id_query: str | None = Field(
        default=None,
        description="A query returning one value used as the snapshot id (e.g. a batch number); "
        "default: the read's start time in UTC.",
    )
    wide_numeric: Literal["refuse", "string", "decimal"] = Field(
        default="refuse",
        description="Numeric columns wider than Spark's decimal(38) (`numeric(50,10)`, an "
        "unconstrained `numeric`): `refuse` the table (default), read each value's exact "
        "`string`, or a `decimal` — decimal(38,s), unconstrained decimal(38,18) — checked value "
        "by value (a value that does not fit fails the read).",
    )
    column_types: dict[str, str] = Field(
        default_factory=dict,
        description="Per column, the type to read it as: `\"string\"` (the database's text of each "
        "value) or `\"decimal(P,S)\"` (P <= 38; a value that does not fit fails the read). "
        "Overrides wide_numeric and the built-in mapping.",
    )
    lock_timeout: float = Field(
        default=60, ge=0,
        description="Seconds a read waits for a table lock (e.g. behind a DROP or ALTER) before it "
        "fails; 0 = wait for ever (PostgreSQL).",
    )
    statement_timeout: float = Field(
        default=86_400, ge=0,
        description="Seconds one query of the read may run before it fails; 0 = no limit.",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith("jdbc:") or len(value.split(":")) < 3:
            raise ValueError("must be a JDBC URL such as jdbc:postgresql://host:5432/database")
        if value.lower().startswith("jdbc:mariadb:"):
            # Spark knows no MariaDB dialect: it would quote column names with "..." and
            # MariaDB would read each as a string constant (every row: the column's name).
            raise ValueError(
                "jdbc:mariadb: URLs are read by Spark without its MySQL dialect (column names "
                "quoted as strings); write jdbc:mysql://... (MariaDB's driver takes it)"
            )
        if _SECRET_ON_URL.search(value):
            raise ValueError(
                "must not carry a password (it would be recorded in state and reports); "
                "use password_env"
            )
        return value

    @field_validator("password_env")
    @classmethod
    def _env(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError(  # the value is not echoed: it may be the password itself
                "is not an environment variable name (give the variable's name, not the password)"
            )
        return value

    @field_validator("column_types")
    @classmethod
    def _column_types(cls, value: dict[str, str]) -> dict[str, str]:
        for column, kind in value.items():
            found = _COLUMN_TYPE.match(kind.strip())
            if not found:
                raise ValueError(
                    f"column {column}: {kind!r} is not a type diffcdc reads a column as; use "
                    '"string" or "decimal(P,S)"'
                )
            if found.group(2) is not None:
                precision, scale = int(found.group(2)), int(found.group(3))
                if not 1 <= precision <= 38 or scale > precision:
                    raise ValueError(
                        f"column {column}: {kind} is not a Spark decimal (1 <= P <= 38, 0 <= S <= P)"
                    )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> JdbcSourceConfig:
        if (self.table is None) == (self.query is None):
            raise ValueError("give exactly one of `table` or `query`")
        if self.num_partitions > 1 and self.partition_column is None:
            raise ValueError("num_partitions > 1 needs partition_column")
        if self.partition_column is None and (self.lower_bound, self.upper_bound) != (None, None):
            raise ValueError("lower_bound / upper_bound need partition_column")
        if self.num_partitions > 1 and self.subprotocol not in CONSISTENT_PARTITIONS:
            raise ValueError(
                f"partitioned reads of {self.subprotocol} cannot be made to see one database "
                "snapshot (only PostgreSQL's exported snapshots allow it); use num_partitions = 1"
            )
        return self

    @property
    def subprotocol(self) -> str:
        """``postgresql`` for ``jdbc:postgresql://...``."""
        return self.url.split(":")[1].lower()

    @property
    def driver_class(self) -> str | None:
        return self.driver or DEFAULT_DRIVERS.get(self.subprotocol)

    @property
    def jar(self) -> str | None:
        """The driver jar to put on Spark's classpath, if one is known and present."""
        if self.driver_jar:
            return self.driver_jar
        default = DEFAULT_JARS.get(self.subprotocol)
        return default if default and os.path.exists(default) else None

    def password(self, table: str) -> str | None:
        """The password from the variable ``password_env`` names (None: no password_env)."""
        return env_password(self.password_env, table)

    def describe(self) -> str:
        """Where the rows come from, without any secret (recorded as the snapshot's path)."""
        what = f"table {self.table}" if self.table else "query"
        return f"{self.url} {what}"


class DataFrameSourceConfig(BaseModel):
    """A Spark DataFrame handed over in Python (:func:`diffcdc.run_dataframe`); not for files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["dataframe"] = Field(description="Source type.")
    description: str = Field(default="a Spark DataFrame", description="Recorded as the snapshot's path.")
