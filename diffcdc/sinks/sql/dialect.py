"""What a SQL server's dialect gives the dialect-neutral SQL sink (:mod:`diffcdc.sinks.sql.sink`).

The flow (stage, publish in one transaction, the target checks, the bookkeeping rules, full
images and their swap, verify) is written once against :class:`Dialect`; a server's package
(``diffcdc/sinks/postgres/dialect.py``) implements it with its driver. The flow never builds SQL
text: every statement comes from the dialect as an opaque :data:`Query` it hands back to the
dialect's own cursor (DB-API: ``execute``, ``fetchone``, ``fetchall``, ``rowcount``), and every
driver error is the dialect's to put in one line.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from diffcdc.core.compare import Replayed
from diffcdc.core.history_layout import HistoryLayout
from diffcdc.errors import DiffcdcError
from diffcdc.sinks.history_settings import Tracking
from diffcdc.sinks.sql.records import Applied, Statement, TableIdentity, Target

#: A statement as the dialect composes it (PostgreSQL: ``psycopg.sql.Composed``).
Query = Any


@dataclass(frozen=True)
class DialectNames:
    """How the flow names the dialect: the sink type (``postgres``; its kill points are
    ``<kind>_copied``, ``<kind>_before_commit``, ``<kind>_committed``) and the words of its
    messages."""

    kind: str
    #: The server as messages name it (``PostgreSQL``).
    title: str
    #: What the table's identity is called (``oid``).
    identity: str
    #: The bulk load as messages name it (``COPY``).
    bulk: str


class SqlSinkSettings(Protocol):
    """The dialect-neutral part of a SQL sink's settings (its config model has more: the
    connection differs per server)."""

    @property
    def mode(self) -> str: ...

    @property
    def db_schema(self) -> str: ...

    def table_name(self, table: str) -> str: ...

    def where(self) -> str: ...

    def history_layout(self) -> HistoryLayout: ...

    def tracking(self) -> Tracking:
        """Which columns' changes open a new history row (``mode = "scd2"``)."""
        ...


class Dialect(Protocol):
    """A SQL server as the flow uses it. Every ``where`` is the place messages name (``sink
    pg, table s.t``); a ``cursor`` is one of a connection :meth:`connect` opened."""

    names: DialectNames
    #: Columns of the dialect's own in a table it loads (they are no data column).
    work_columns: tuple[str, ...]

    # -- the server -------------------------------------------------------------------------
    def connect(self, where: str) -> Any:
        """An open DB-API connection (autocommit off, every wait bounded); a server that is
        down or a refused login as one line (:class:`DiffcdcError`)."""
        ...

    def server_error(self, exc: BaseException, where: str, what: str, hint: str
                     ) -> DiffcdcError | None:
        """A driver error while doing ``what`` as one line (a lock or statement timeout says
        so); None: ``exc`` is not the driver's."""
        ...

    def is_unique_violation(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the server refusing a second row of a unique key."""
        ...

    # -- names and types --------------------------------------------------------------------
    def table_name_problem(self, name: str) -> str | None:
        """Why ``name`` cannot be the sink's target table (too long, the sink's own prefix),
        or None."""
        ...

    def check_columns(self, schema: T.StructType, where: str) -> None:
        """Refuse a column name the server would not keep as given, or a type it cannot hold
        losslessly (:class:`DiffcdcError`, one line naming the column)."""
        ...

    def type_text(self, cursor: Any, spark_type: T.DataType, where: str) -> str:
        """The column type the sink gives ``spark_type``, spelled as :meth:`column_types`
        shows it."""
        ...

    # -- the catalog ------------------------------------------------------------------------
    def table_identity(self, cursor: Any, target: Target) -> TableIdentity | None:
        """The table's identity (None: there is no such table)."""
        ...

    def column_types(self, cursor: Any, target: Target) -> dict[str, str]:
        """The table's columns in order and their types as the server prints them (none: no
        such table)."""
        ...

    # -- tables -----------------------------------------------------------------------------
    def create_staging(self, target: Target, schema: T.StructType, where: str) -> Query:
        """A table for one version's change rows: ``schema``'s columns, the change op
        (:data:`diffcdc.core.changeset.OP`) and the :attr:`work_columns` (unlogged where the
        server can)."""
        ...

    def create_image(self, target: Target, schema: T.StructType, where: str) -> Query:
        """A table for a full image's rows: ``schema``'s columns and the work columns."""
        ...

    def finish_image(self, target: Target, keys: Sequence[str]) -> list[Query]:
        """After its load: the image's work columns dropped, its primary key on ``keys``."""
        ...

    def add_columns(self, target: Target, fields: Sequence[T.StructField], where: str
                    ) -> list[Query]:
        """Columns the snapshots gained, added (typed as :meth:`create_staging` types them)."""
        ...

    def add_column_as(self, target: Target, column: str, kind: str) -> Query:
        """A column of the type ``kind`` (as :meth:`column_types` prints it), added."""
        ...

    def retype_when_null(self, target: Target, column: str, kind: str) -> Query:
        """A column holding only NULLs given the type ``kind`` (its values NULL)."""
        ...

    def drop_if_exists(self, target: Target) -> Query: ...

    def lock(self, target: Target) -> Query:
        """No other writer of the table until the transaction ends (readers go on)."""
        ...

    def count_rows(self, target: Target) -> Query:
        """One row: the table's row count."""
        ...

    def count_not_null(self, target: Target, column: str) -> Query:
        """One row: the count of the table's rows whose ``column`` is not NULL."""
        ...

    def swap(self, target: Target, new: str, exists: bool) -> list[Query]:
        """The table ``new`` (in the target's schema) takes the target's place, atomically in
        the transaction (``exists``: the target is there and goes)."""
        ...

    # -- the current image ------------------------------------------------------------------
    def apply_current(self, target: Target, staging: Target, columns: Sequence[str],
                      target_columns: Sequence[str], keys: Sequence[str], deleted: int,
                      updated: int, inserted: int) -> list[Statement]:
        """The statements applying one version's change rows from ``staging``, each with the
        row count it must affect (``columns``: the change set's; ``target_columns``: the
        table's, one the change set lacks is set NULL by an update)."""
        ...

    # -- the history ------------------------------------------------------------------------
    def history_create(self, target: Target, schema: T.StructType, keys: Sequence[str],
                       layout: HistoryLayout) -> Query:
        """The history table (data columns, then the layout's), one open row per key, the
        layout recorded with it."""
        ...

    def history_layout_query(self, target: Target, start_at: str) -> Query:
        """One row: the layout the history was made with (its JSON text, or NULL)."""
        ...

    def history_check(self, target: Target, staging: Target, keys: Sequence[str],
                      layout: HistoryLayout, snapshot_time: dt.datetime) -> Query:
        """One row of three counts, all 0 when the history can take the version: updates and
        deletes without an open row, inserts of an open key, rows valid after its time."""
        ...

    def history_apply(self, target: Target, staging: Target, columns: Sequence[str],
                      keys: Sequence[str], layout: HistoryLayout, version: int,
                      snapshot_time: dt.datetime, *, initial: bool, target_empty: bool,
                      compared: Sequence[str] | None, track_only: Sequence[str] | None,
                      track_except: Sequence[str]) -> list[Query]:
        """The statements applying one version to the history, in the caller's transaction."""
        ...

    # -- the bookkeeping table (diffcdc.sinks.sql.bookkeeping) --------------------------------
    def bookkeeping_schema_query(self, schema: str) -> Query:
        """One row: whether the schema exists (its first value true)."""
        ...

    def bookkeeping_create(self, schema: str, *, schema_exists: bool) -> list[Query]:
        """The schema (unless ``schema_exists``) and the bookkeeping table, when missing."""
        ...

    def bookkeeping_last(self, schema: str, target_table: str) -> Query:
        """The newest row of ``target_table`` (:class:`Applied`'s columns)."""
        ...

    def bookkeeping_version(self, schema: str, target_table: str, version: int) -> Query:
        """The row of ``version`` of ``target_table`` (:class:`Applied`'s columns)."""
        ...

    def bookkeeping_insert(self, schema: str, target_table: str, diffcdc_table: str,
                           row: Applied) -> Query:
        """The version's row (fails on the primary key when it is there already)."""
        ...

    def bookkeeping_forget(self, schema: str, target_table: str) -> Query:
        """Every row of ``target_table`` (a full image starts its record afresh)."""
        ...

    # -- rows in and out --------------------------------------------------------------------
    def bulk_load(self, spark: SparkSession | None, staged: str, into: Target,
                  columns: Sequence[str], where: str) -> int:
        """The staged Parquet folder's rows loaded into the existing, empty table ``into``
        (``spark`` None: from this process); the number of rows loaded."""
        ...

    def read_table(self, conn: Any, target: Target, keys: list[str],
                   layout: HistoryLayout | None, compared: T.StructType | None) -> Replayed:
        """The table's rows for verify (a history: its live open rows, without its own
        columns); no table: no rows."""
        ...
