"""The current mode's SQL (pure: statements composed with psycopg.sql, no connection).

One version's change rows sit in a staging table (the table's columns plus
:data:`~diffcdc.core.changeset.OP`); inside the sink's one transaction they are applied to the
target by three statements whose row counts are checked against the version's counts, so a
target whose rows are not the ones the sink left is refused instead of silently mended:

* ``DELETE`` of the delete rows' keys (must delete exactly ``deleted`` rows);
* ``UPDATE … FROM`` the update rows (exactly ``updated`` rows; a column the snapshots no longer
  have — ``removed_columns = "null"`` — is set to NULL, as the Delta sink writes it);
* ``INSERT … SELECT`` of the insert rows (a key already there fails on the primary key).

Keys are never NULL (the quality gate's ``keys_not_null`` cannot be turned off), so ``=`` on
the key columns is exact. A full image is loaded into a new table that is swapped in
(:func:`swap_statements`).
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.sinks.sql.records import Statement, Target


def table_id(target: Target) -> sql.Composed:
    """``"schema"."table"``."""
    return sql.SQL("{}.{}").format(sql.Identifier(target[0]), sql.Identifier(target[1]))


def _key_match(keys: Sequence[str], left: str, right: str) -> sql.Composed:
    return sql.SQL(" AND ").join(
        sql.SQL("{}.{} = {}.{}").format(sql.Identifier(left), sql.Identifier(k),
                                       sql.Identifier(right), sql.Identifier(k))
        for k in keys)


def apply_statements(target: Target, staging: Target, columns: Sequence[str],
                     target_columns: Sequence[str], keys: Sequence[str], deleted: int,
                     updated: int, inserted: int) -> list[Statement]:
    """The statements applying one version's change rows from ``staging`` to ``target``
    (``columns``: the change set's columns; ``target_columns``: the target table's)."""
    t, s = table_id(target), table_id(staging)
    op = sql.Identifier(OP)
    out = []
    if deleted:
        out.append(Statement(sql.SQL("DELETE FROM {t} AS t USING {s} AS s WHERE s.{op} = {d} "
                                     "AND {match}").format(
            t=t, s=s, op=op, d=sql.Literal(OP_DELETE), match=_key_match(keys, "t", "s")),
            deleted, "deleted"))
    key_set = set(keys)
    given = set(columns)
    sets = [sql.SQL("{} = s.{}").format(sql.Identifier(c), sql.Identifier(c))
            for c in columns if c not in key_set]
    sets += [sql.SQL("{} = NULL").format(sql.Identifier(c))
             for c in target_columns if c not in given and c not in key_set]
    if updated and sets:
        out.append(Statement(sql.SQL("UPDATE {t} AS t SET {sets} FROM {s} AS s WHERE s.{op} = "
                                     "{u} AND {match}").format(
            t=t, s=s, op=op, u=sql.Literal(OP_UPDATE), sets=sql.SQL(", ").join(sets),
            match=_key_match(keys, "t", "s")), updated, "updated"))
    if inserted:
        names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        out.append(Statement(sql.SQL("INSERT INTO {t} ({names}) SELECT {names} FROM {s} "
                                     "WHERE {op} = {i}").format(
            t=t, s=s, names=names, op=op, i=sql.Literal(OP_INSERT)), inserted, "inserted"))
    return out


def add_column_statements(target: Target, added: Sequence[tuple[str, sql.Composable]]
                          ) -> list[sql.Composed]:
    """``ALTER TABLE … ADD COLUMN`` for each column the snapshots gained (name, PG type)."""
    return [sql.SQL("ALTER TABLE {t} ADD COLUMN {c} {type}").format(
        t=table_id(target), c=sql.Identifier(name), type=kind) for name, kind in added]


def create_table(target: Target, defs: sql.Composable, *, unlogged: bool = False
                 ) -> sql.Composed:
    """``CREATE [UNLOGGED] TABLE target (defs)``."""
    return sql.SQL("CREATE {unlogged}TABLE {t} ({defs})").format(
        unlogged=sql.SQL("UNLOGGED " if unlogged else ""), t=table_id(target), defs=defs)


def primary_key(target: Target, keys: Sequence[str]) -> sql.Composed:
    """The primary key on the keys, added after a full image's rows are loaded."""
    return sql.SQL("ALTER TABLE {t} ADD PRIMARY KEY ({keys})").format(
        t=table_id(target), keys=sql.SQL(", ").join(sql.Identifier(k) for k in keys))


def swap_statements(target: Target, new: str, exists: bool) -> list[sql.Composed]:
    """The new table ``new`` (in the target's schema) takes the target's place: the old one
    dropped (``exists``), the new one renamed (inside the sink's transaction: atomic)."""
    out = []
    if exists:
        out.append(sql.SQL("DROP TABLE {t}").format(t=table_id(target)))
    out.append(sql.SQL("ALTER TABLE {n} RENAME TO {name}").format(
        n=table_id((target[0], new)), name=sql.Identifier(target[1])))
    return out


def drop_column(target: Target, column: str) -> sql.Composed:
    return sql.SQL("ALTER TABLE {t} DROP COLUMN {c}").format(t=table_id(target),
                                                              c=sql.Identifier(column))


def drop_if_exists(target: Target) -> sql.Composed:
    return sql.SQL("DROP TABLE IF EXISTS {t}").format(t=table_id(target))


def count_rows(target: Target) -> sql.Composed:
    return sql.SQL("SELECT count(*) FROM {t}").format(t=table_id(target))


def lock_table(target: Target) -> sql.Composed:
    """No other writer while the version is applied (readers go on)."""
    return sql.SQL("LOCK TABLE {t} IN SHARE ROW EXCLUSIVE MODE").format(t=table_id(target))
