"""Whether a SQL sink's target table is where the sink left it, and its refusals in words.

The sink left the table as its bookkeeping table's newest row for it says
(:mod:`diffcdc.sinks.sql.bookkeeping`): that row is the version the sink published last (of its
incarnation), the table exists with the identity recorded there (PostgreSQL: the ``pg_class``
oid; a table dropped and re-created has another) and holds the row count recorded there (rows
truncated, added or removed by another writer change it). Anything else is refused in one line
naming ``diffcdc reload --table T --sink NAME``; the table's other sinks go on. A first image (a
first load, a sink added) is written only where no table of that name exists. The catalog reads
and the count are the dialect's (:class:`~diffcdc.sinks.sql.dialect.Dialect`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diffcdc.errors import TargetMismatch
from diffcdc.sinks.sql import bookkeeping
from diffcdc.sinks.sql.dialect import Dialect
from diffcdc.sinks.sql.records import Expected, TableIdentity, Target


@dataclass(frozen=True)
class TargetCheck:
    """The checks of one sink's target table, with its refusals' wording."""

    sink_id: str
    table: str  #: the diffcdc table (messages)
    target: Target
    where: str  #: server and database (messages)
    reload: str  #: the command that gives the sink a full image
    dialect: Dialect

    @property
    def shown(self) -> str:
        return f"{self.target[0]}.{self.target[1]} on {self.where}"

    def mismatch(self, what: str) -> TargetMismatch:
        return TargetMismatch(
            f"sink {self.sink_id}: the {self.dialect.names.title} table {self.shown} is not where "
            f"the sink left it: {what}", table=self.table,
            hint=f"replace it with a full image: '{self.reload}'")

    def not_ours(self) -> TargetMismatch:
        return TargetMismatch(
            f"sink {self.sink_id}: a table the sink did not publish to is at "
            f"{self.shown}: a first image would overwrite it", table=self.table,
            hint="point the sink's schema/table at a table of its own, or move that table "
                 f"away, then run again; only if this sink owns it, replace it: '{self.reload}'")

    def row_count(self, cursor: Any) -> int:
        """The target's rows (one scan)."""
        cursor.execute(self.dialect.count_rows(self.target))
        return int(cursor.fetchone()[0])

    def verify(self, cursor: Any, expected: Expected, *, count: bool = True
               ) -> TableIdentity | None:
        """Refuse a table that is not where the sink left it; its identity (None: no table,
        and the sink published nothing yet). ``count``: also compare the row count (one
        scan)."""
        identity = self.dialect.table_identity(cursor, self.target)
        last = bookkeeping.last_applied(self.dialect, cursor, self.target)
        if expected.version is None:
            return identity
        if last is None:
            raise self._without_row(identity, expected.version)
        if (last.version, last.incarnation) != (expected.version, expected.incarnation):
            what = (f"its bookkeeping row is at version {last.version} of "
                    f"{'another incarnation' if last.incarnation != expected.incarnation else 'it'}"
                    f", the sink published version {expected.version} last")
            raise self.mismatch(what)
        if identity is None:
            raise self.mismatch("the table was dropped")
        if identity != last.table_oid:
            raise self.mismatch("the table was dropped and created again (another "
                                f"{self.dialect.names.identity})")
        if count:
            rows = self.row_count(cursor)
            if rows != last.row_count:
                raise self.mismatch(f"it holds {rows} rows, the sink left {last.row_count} "
                                    "(rows added, deleted or truncated by another writer)")
        return identity

    def _without_row(self, identity: TableIdentity | None, version: int) -> TargetMismatch:
        if identity is None:
            return self.mismatch(f"the table and its bookkeeping rows are gone (the sink "
                                 f"published version {version} last)")
        return self.mismatch(f"its bookkeeping row of version {version} is missing from "
                             f"{self.target[0]}.{bookkeeping.TABLE}")
