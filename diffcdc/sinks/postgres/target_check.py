"""Whether a PostgreSQL sink's target table is where the sink left it, and its refusals in words.

The sink left the table as its bookkeeping table's newest row for it says
(:mod:`diffcdc.sinks.postgres.bookkeeping`): that row is the version the sink published last
(of its incarnation), the table exists with the ``pg_class`` oid recorded there (a table
dropped and re-created has another) and holds the row count recorded there (rows truncated,
added or removed by another writer change it). Anything else is refused in one line naming
``diffcdc reload --table T --sink NAME``; the table's other sinks go on. A first image (a first
load, a sink added) is written only where no table of that name exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql

from diffcdc.errors import TargetMismatch
from diffcdc.sinks.postgres import bookkeeping
from diffcdc.sinks.postgres.apply_sql import Target, count_rows


def table_oid(cursor: Any, target: Target) -> int | None:
    """The ``pg_class`` oid of the table ``target`` (None: there is none)."""
    cursor.execute(sql.SQL(
        "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = {} AND c.relname = {} AND c.relkind IN ('r', 'p')").format(
        sql.Literal(target[0]), sql.Literal(target[1])))
    row = cursor.fetchone()
    return int(row[0]) if row else None


def table_columns(cursor: Any, oid: int) -> list[str]:
    """The table's column names, in order."""
    cursor.execute(sql.SQL("SELECT attname FROM pg_attribute WHERE attrelid = {} AND attnum > 0 "
                           "AND NOT attisdropped ORDER BY attnum").format(sql.Literal(oid)))
    return [str(r[0]) for r in cursor.fetchall()]


def column_types(cursor: Any, oid: int) -> dict[str, str]:
    """The table's columns and their types as PostgreSQL prints them (``numeric(12,2)``)."""
    cursor.execute(sql.SQL("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                           "WHERE attrelid = {} AND attnum > 0 AND NOT attisdropped "
                           "ORDER BY attnum").format(sql.Literal(oid)))
    return {str(n): str(t) for n, t in cursor.fetchall()}


def last_applied(cursor: Any, target: Target) -> bookkeeping.Applied | None:
    """The bookkeeping table's newest row for the target (None: none, or no such table)."""
    if table_oid(cursor, (target[0], bookkeeping.TABLE)) is None:
        return None
    cursor.execute(bookkeeping.last_query(target[0], target[1]))
    return bookkeeping.applied(cursor.fetchone())


def applied_version(cursor: Any, target: Target, version: int) -> bookkeeping.Applied | None:
    """The bookkeeping row of ``version`` (None: not applied, or no such table)."""
    if table_oid(cursor, (target[0], bookkeeping.TABLE)) is None:
        return None
    cursor.execute(bookkeeping.version_query(target[0], target[1], version))
    return bookkeeping.applied(cursor.fetchone())


@dataclass(frozen=True)
class Expected:
    """Where the sink left the table: its last applied version (None: it applied none since
    its last full image, so there is nothing to find) and that version's incarnation."""

    version: int | None
    incarnation: str | None


@dataclass(frozen=True)
class TargetCheck:
    """The checks of one sink's target table, with its refusals' wording."""

    sink_id: str
    table: str  #: the diffcdc table (messages)
    target: Target
    where: str  #: server and database (messages)
    reload: str  #: the command that gives the sink a full image

    @property
    def shown(self) -> str:
        return f"{self.target[0]}.{self.target[1]} on {self.where}"

    def mismatch(self, what: str) -> TargetMismatch:
        return TargetMismatch(
            f"sink {self.sink_id}: the PostgreSQL table {self.shown} is not where the sink left "
            f"it: {what}", table=self.table,
            hint=f"replace it with a full image: '{self.reload}'")

    def not_ours(self) -> TargetMismatch:
        return TargetMismatch(
            f"sink {self.sink_id}: a table the sink did not publish to is at "
            f"{self.shown}: a first image would overwrite it", table=self.table,
            hint="point the sink's schema/table at a table of its own, or move that table "
                 f"away, then run again; only if this sink owns it, replace it: '{self.reload}'")

    def verify(self, cursor: Any, expected: Expected, *, count: bool = True) -> int | None:
        """Refuse a table that is not where the sink left it; its oid (None: no table, and the
        sink published nothing yet). ``count``: also compare the row count (one scan)."""
        oid = table_oid(cursor, self.target)
        last = last_applied(cursor, self.target)
        if expected.version is None:
            return oid
        if last is None:
            return self._refuse_without_row(oid, expected.version)
        if (last.version, last.incarnation) != (expected.version, expected.incarnation):
            what = (f"its bookkeeping row is at version {last.version} of "
                    f"{'another incarnation' if last.incarnation != expected.incarnation else 'it'}"
                    f", the sink published version {expected.version} last")
            raise self.mismatch(what)
        if oid is None:
            raise self.mismatch("the table was dropped")
        if oid != last.table_oid:
            raise self.mismatch("the table was dropped and created again (another oid)")
        if count:
            cursor.execute(count_rows(self.target))
            rows = int(cursor.fetchone()[0])
            if rows != last.row_count:
                raise self.mismatch(f"it holds {rows} rows, the sink left {last.row_count} "
                                    "(rows added, deleted or truncated by another writer)")
        return oid

    def _refuse_without_row(self, oid: int | None, version: int) -> int | None:
        if oid is None:
            raise self.mismatch(f"the table and its bookkeeping rows are gone (the sink "
                                f"published version {version} last)")
        raise self.mismatch(f"its bookkeeping row of version {version} is missing from "
                            f"{self.target[0]}.{bookkeeping.TABLE}")
