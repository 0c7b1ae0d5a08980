"""Which table a state folder belongs to, so two tables can never share one.

A table's state folder is ``<Table>``, or ``<schema>.schema.<Table>`` with a schema: names that
existed before schemas keep their folder. So ``--schema a --table b`` and ``--table a.schema.b``
name one folder. Both stay usable alone; the table each commit record names tells them apart
(given the folder name, the table name determines the schema), and a table never reads or
writes a folder another table committed to. Two such tables in one config are refused when the
config is read (:class:`diffcdc.config.RunConfig`).
"""

from __future__ import annotations

from collections.abc import Sequence

from diffcdc.errors import StateOwnerError
from diffcdc.state.store import Commit, TableState

_SEPARATOR = ".schema."


def owner_label(folder: str, table: str) -> str:
    """``'b' (schema 'a')`` for the table ``table`` whose state folder is ``folder``."""
    if folder != table and folder.endswith(_SEPARATOR + table):
        return f"{table!r} (schema {folder[: -len(_SEPARATOR + table)]!r})"
    return repr(table)


def check_owner(
    state: TableState, table: str, schema_name: str | None, commits: Sequence[Commit] | None = None
) -> None:
    """Refuse (exit 2) when the state folder holds another table's commits.

    ``commits`` are the folder's commits when the caller has read them already.
    """
    commits = state.commits() if commits is None else commits
    if not commits or commits[-1].record.table == table:
        return
    theirs = owner_label(state.table, commits[-1].record.table)
    ours = repr(table) + (f" (schema {schema_name!r})" if schema_name else "")
    raise StateOwnerError(
        f"the state folder {state.storage.describe()} belongs to table {theirs}: the names of "
        f"table {ours} and "
        "that table map to the same state folder",
        table=table,
        path=state.storage.describe(),
        hint=f"rename table {ours} (both names cannot be used with one state root); the state "
        f"of {theirs} is left untouched",
    )
