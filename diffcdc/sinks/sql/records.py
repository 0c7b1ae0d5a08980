"""The records a SQL sink's flow and its dialect exchange (no driver, no SQL text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: A table as ``(schema, name)``, both as the snapshots spell them (the dialect quotes them).
Target = tuple[str, str]
#: What tells a table from one dropped and created again under its name (PostgreSQL: the
#: ``pg_class`` oid; a server without such a number: a token the sink gives the table).
TableIdentity = int | str


@dataclass(frozen=True)
class Statement:
    """One statement of a version's apply and the row count it must affect (None: any).
    ``query`` is the dialect's own (PostgreSQL: a ``psycopg.sql.Composed``): the flow only
    hands it back to the cursor."""

    query: Any
    rows: int | None
    what: str


@dataclass(frozen=True)
class Expected:
    """Where the sink left the table: its last applied version (None: it applied none since
    its last full image, so there is nothing to find) and that version's incarnation."""

    version: int | None
    incarnation: str | None


@dataclass(frozen=True)
class Applied:
    """One row of the bookkeeping table: a version the sink applied to its target."""

    version: int
    incarnation: str
    sink_id: str
    inserted: int
    updated: int
    deleted: int
    #: The target's row count right after the version (current mode; a history: its rows).
    row_count: int
    #: The target table's identity (PostgreSQL: its ``pg_class`` oid, in the column
    #: ``table_oid``; a re-created table has another one).
    table_oid: TableIdentity
