"""The sink's bookkeeping rules: one row per diffcdc version applied to a target table.

A table ``<schema>._diffcdc_versions`` (:data:`TABLE`, in the target's schema) holds, per target
table and version, the sink's incarnation (a new one with every full image), the version's row
counts, the target's row count after it and the target's identity
(:class:`~diffcdc.sinks.sql.records.TableIdentity`). Its primary key ``(target_table, version)``
makes a second apply of a version fail inside the transaction that applies it, so a version is
in the target once or not at all; the last row is what the target checks compare the table with
(:mod:`diffcdc.sinks.sql.target_check`). The dialect writes the statements
(:class:`~diffcdc.sinks.sql.dialect.Dialect`'s ``bookkeeping_*``); their queries return the
columns of :class:`Applied`, in its order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from diffcdc.sinks.sql.records import Applied, Target

if TYPE_CHECKING:
    from diffcdc.sinks.sql.dialect import Dialect

TABLE = "_diffcdc_versions"


def applied(row: Sequence[Any] | None) -> Applied | None:
    """A fetched row as an :class:`Applied` (None: none)."""
    if row is None:
        return None
    identity = row[7] if isinstance(row[7], str) else int(row[7])
    return Applied(int(row[0]), str(row[1]), str(row[2]), int(row[3]), int(row[4]), int(row[5]),
                   int(row[6]), identity)


def last_applied(dialect: Dialect, cursor: Any, target: Target) -> Applied | None:
    """The bookkeeping table's newest row for the target (None: none, or no such table)."""
    if dialect.table_identity(cursor, (target[0], TABLE)) is None:
        return None
    cursor.execute(dialect.bookkeeping_last(target[0], target[1]))
    return applied(cursor.fetchone())


def applied_version(dialect: Dialect, cursor: Any, target: Target, version: int
                    ) -> Applied | None:
    """The bookkeeping row of ``version`` (None: not applied, or no such table)."""
    if dialect.table_identity(cursor, (target[0], TABLE)) is None:
        return None
    cursor.execute(dialect.bookkeeping_version(target[0], target[1], version))
    return applied(cursor.fetchone())


def prepare(dialect: Dialect, cursor: Any, schema: str) -> None:
    """The schema (when missing) and the bookkeeping table (when missing)."""
    cursor.execute(dialect.bookkeeping_schema_query(schema))
    for statement in dialect.bookkeeping_create(schema,
                                                schema_exists=bool(cursor.fetchone()[0])):
        cursor.execute(statement)
