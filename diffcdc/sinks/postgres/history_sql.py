"""The PostgreSQL sink's history mode (``mode = "scd2"``): the SQL that keeps a history table,
with the Delta history's semantics, names and "as of" rule (:mod:`diffcdc.core.history_layout`,
:mod:`diffcdc.sinks.delta.history`).

Beside the table's own columns each row has the layout's start / end version (bigint), valid
from / to (timestamptz, UTC), the changed columns (text[], sorted) and, with deletes as rows,
the deleted flag (boolean). A key has at most one *open* row (its end is the open end: NULL or
the layout's sentinel) — a partial unique index on the keys over the open rows
(:func:`history_create`) both enforces that and finds a key's open row without a scan.

One version (:func:`history_apply`), from a staging table of its change rows (the table's
columns and the change op, :data:`diffcdc.core.changeset.OP`), as statements run in the
caller's one transaction:

1. a temporary table of actions: each staged row beside its key's open row (old values), the
   op (a full image's op is derived: a key not open or tombstoned → insert, open with other
   values → update, open and unchanged → nothing, open but not in the image → delete), the
   sorted changed columns (``IS DISTINCT FROM``: NULL equals only NULL, NaN equals NaN, -0.0
   equals 0.0, jsonb by value) and whether a tracked column changed;
2. close: the open row of every delete, tracked update, and key back after its tombstone gets
   ``end = version``, ``valid_to = `` the version's as-of time;
3. restate: an untracked update is written into the open row in place;
4. open: inserts and tracked updates open a row (an update lists its changed columns);
5. tombstones (deletes as rows): each delete opens a row with the key's last values, flagged.

Closing comes before opening, so the unique index holds after each statement. A staged column
the table lacks is for the caller to add first (``ALTER TABLE ... ADD COLUMN``); a table column
the staging lacks is NULL in the rows opened. :func:`history_check` finds what would break the
rules before anything is applied (an update or delete without an open row, an insert of a key
that is open, rows valid after the version's time).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from psycopg import sql
from pyspark.sql import types as T

from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.core.history_layout import HistoryLayout
from diffcdc.sinks.postgres.types import check_identifier, column_defs

#: The temporary table of one version's actions (dropped at the transaction's end).
ACTIONS = "_diffcdc_history_actions"
_NONE = 0


def _id(target: tuple[str, str]) -> sql.Identifier:
    return sql.Identifier(*target)


def _open(layout: HistoryLayout, alias: str | None) -> sql.Composable:
    """SQL: the row (``alias``; None: unqualified) is its key's open row."""
    column = sql.Identifier(*([alias] if alias else []), layout.end_at)
    if layout.open_end.end_at is None:
        return sql.SQL("{} IS NULL").format(column)
    return sql.SQL("{} = {}").format(column, sql.Literal(layout.open_end.end_at))


def history_create(target: tuple[str, str], schema: T.StructType, keys: Sequence[str],
                   layout: HistoryLayout) -> sql.Composed:
    """CREATE TABLE of the history (the data columns, then the layout's) and its partial
    unique index over the keys of the open rows; the layout is recorded as the comment of the
    start column (:func:`history_layout_query` reads it back)."""
    where = f"table {target[0]}.{target[1]}"
    for name in layout.columns:
        check_identifier(name, f"{where}, history column")
    meta = [
        sql.SQL("{} bigint NOT NULL").format(sql.Identifier(layout.start_at)),
        sql.SQL("{} bigint").format(sql.Identifier(layout.end_at)),
        sql.SQL("{} timestamptz NOT NULL").format(sql.Identifier(layout.valid_from)),
        sql.SQL("{} timestamptz").format(sql.Identifier(layout.valid_to)),
        sql.SQL("{} text[]").format(sql.Identifier(layout.changed_columns)),
    ]
    if layout.deleted is not None:
        meta.append(sql.SQL("{} boolean NOT NULL").format(sql.Identifier(layout.deleted)))
    table = _id(target)
    return sql.SQL("; ").join([
        sql.SQL("CREATE TABLE {} ({}, {})").format(table, column_defs(schema, where),
                                                  sql.SQL(", ").join(meta)),
        sql.SQL("CREATE UNIQUE INDEX ON {} ({}) WHERE {}").format(
            table, sql.SQL(", ").join(map(sql.Identifier, keys)), _open(layout, None)),
        sql.SQL("COMMENT ON COLUMN {} IS {}").format(
            sql.Identifier(*target, layout.start_at), sql.Literal(layout.text())),
    ])


def history_layout_query(target: tuple[str, str], start_at: str) -> sql.Composed:
    """A query of the layout recorded with the history (one row: its JSON text, or NULL)."""
    return sql.SQL("SELECT col_description({}::regclass, a.attnum) FROM pg_attribute a "
                   "WHERE a.attrelid = {}::regclass AND a.attname = {}").format(
        sql.Literal(_id(target).as_string(None)), sql.Literal(_id(target).as_string(None)),
        sql.Literal(start_at))


def _keys_match(keys: Sequence[str], left: str, right: Sequence[sql.Composable]
                ) -> sql.Composable:
    return sql.SQL(" AND ").join(sql.SQL("{} = {}").format(sql.Identifier(left, k), r)
                                 for k, r in zip(keys, right))


def history_check(target: tuple[str, str], staging: tuple[str, str], keys: Sequence[str],
                  layout: HistoryLayout, snapshot_time: dt.datetime) -> sql.Composed:
    """One row before an (incremental) version is applied, every count 0 when the history
    can take it: updates and deletes whose key has no open row that is no tombstone, inserts
    whose key has one, and the history's rows valid from after ``snapshot_time``."""
    tomb = (sql.SQL("COALESCE(h.{}, false)").format(sql.Identifier(layout.deleted))
            if layout.deleted is not None else sql.SQL("false"))
    live = sql.SQL("(h.{} IS NOT NULL AND NOT {})").format(sql.Identifier(layout.start_at), tomb)
    op = sql.SQL("s.{}").format(sql.Identifier(OP))
    return sql.SQL(
        "SELECT count(*) FILTER (WHERE {op} IN ({u}, {d}) AND NOT {live}), "
        "count(*) FILTER (WHERE {op} = {i} AND {live}), "
        "(SELECT count(*) FROM {t} WHERE {vf} > {at}) "
        "FROM {s} s LEFT JOIN {t} h ON {on} AND {open}").format(
        op=op, u=sql.Literal(OP_UPDATE), d=sql.Literal(OP_DELETE), i=sql.Literal(OP_INSERT),
        live=live, t=_id(target), s=_id(staging), vf=sql.Identifier(layout.valid_from),
        at=sql.Literal(snapshot_time),
        on=_keys_match(keys, "h", [sql.Identifier("s", k) for k in keys]),
        open=_open(layout, "h"))


def history_apply(
    target: tuple[str, str],
    staging: tuple[str, str],
    columns: Sequence[str],
    keys: Sequence[str],
    layout: HistoryLayout,
    version: int,
    snapshot_time: dt.datetime,
    *,
    initial: bool = False,
    target_empty: bool = False,
    compared: Sequence[str] | None = None,
    track_only: Sequence[str] | None = None,
    track_except: Sequence[str] = (),
) -> list[sql.Composed]:
    """The statements that apply version ``version`` (as of ``snapshot_time``, UTC) from the
    ``staging`` table to the history ``target``, in this order, in the caller's transaction.

    ``columns``: the staged data columns (the keys among them); the staging table also has
    :data:`OP`. ``initial``: the staging holds a full image (every row an insert), applied as
    what differs from the history's open rows; with ``target_empty`` (a history just created,
    a first load) every staged row is opened by one INSERT, without the actions table.
    ``compared``: the columns whose changes are
    listed (default: every staged column but the keys; one the staging lacks is NULL in the
    version's rows, its last value kept by a tombstone); ``track_only`` / ``track_except``:
    the history's tracked columns (a change of untracked columns only is restated in place),
    compared case-insensitively as the Delta history does.
    """
    cols = list(columns)
    if initial and target_empty:
        return [_open_all(target, staging, cols, layout, version, snapshot_time)]
    index = {c: i for i, c in enumerate(cols)}
    compared = sorted(set(compared if compared is not None
                          else [c for c in cols if c not in set(keys)]))
    only = None if track_only is None else {c.lower() for c in track_only}
    but = {c.lower() for c in track_except}

    def tracked(name: str) -> bool:
        return name.lower() in only if only is not None else name.lower() not in but

    # compared columns the staging lacks (the history has them, the snapshots no longer):
    # NULL in the version's rows, so a value they held is a change
    gone = [c for c in compared if c not in index]
    gone_index = {c: i for i, c in enumerate(gone)}

    def n(c: str) -> sql.Identifier:
        return sql.Identifier(f"n{index[c]}")

    def o(c: str) -> sql.Identifier:
        return sql.Identifier(f"o{index[c]}" if c in index else f"x{gone_index[c]}")

    differs = {c: (sql.SQL("j.{} IS DISTINCT FROM j.{}").format(o(c), n(c)) if c in index
                   else sql.SQL("j.{} IS NOT NULL").format(o(c))) for c in compared}
    changed = (sql.SQL("array_remove(ARRAY[{}]::text[], NULL)").format(sql.SQL(", ").join(
        sql.SQL("CASE WHEN {} THEN {} END").format(differs[c], sql.Literal(c))
        for c in compared)) if compared else sql.SQL("ARRAY[]::text[]"))
    watched = [differs[c] for c in compared if tracked(c)]
    any_tracked = sql.SQL(" OR ").join(watched) if watched else sql.SQL("false")
    any_change = (sql.SQL(" OR ").join(differs.values()) if differs else sql.SQL("false"))
    tomb = (sql.SQL("COALESCE(h.{}, false)").format(sql.Identifier(layout.deleted))
            if layout.deleted is not None else sql.SQL("false"))
    if initial:
        op = sql.SQL(
            "CASE WHEN j.s_in AND (NOT j.h_in OR j.h_tomb) THEN {i} "
            "WHEN j.s_in THEN CASE WHEN {change} THEN {u} ELSE {none} END "
            "WHEN j.h_in AND NOT j.h_tomb THEN {d} ELSE {none} END").format(
            i=sql.Literal(OP_INSERT), u=sql.Literal(OP_UPDATE), d=sql.Literal(OP_DELETE),
            none=sql.Literal(_NONE), change=any_change)
        join = sql.SQL("FULL JOIN")
        key_values = [sql.SQL("COALESCE(s.{0}, h.{0})").format(sql.Identifier(k)) for k in keys]
    else:
        op = sql.SQL("j.s_op")
        join = sql.SQL("LEFT JOIN")
        key_values = [sql.Identifier("s", k) for k in keys]
    inner = sql.SQL(
        "SELECT {keys}, {new}, {old}, s.{op} AS s_op, s.{op} IS NOT NULL AS s_in, "
        "h.{start} IS NOT NULL AS h_in, {tomb} AS h_tomb "
        "FROM {s} s {join} (SELECT * FROM {t} h WHERE {open}) h ON {on}").format(
        keys=sql.SQL(", ").join(sql.SQL("{} AS {}").format(v, sql.Identifier(f"k{i}"))
                                for i, v in enumerate(key_values)),
        new=sql.SQL(", ").join(sql.SQL("s.{} AS {}").format(sql.Identifier(c), n(c))
                               for c in cols),
        old=sql.SQL(", ").join(sql.SQL("h.{} AS {}").format(sql.Identifier(c), o(c))
                               for c in [*cols, *gone]),
        op=sql.Identifier(OP), start=sql.Identifier(layout.start_at), tomb=tomb,
        s=_id(staging), join=join, t=_id(target), open=_open(layout, "h"),
        on=_keys_match(keys, "h", [sql.Identifier("s", k) for k in keys]))
    actions = sql.Identifier(ACTIONS)
    create = sql.SQL(
        "CREATE TEMPORARY TABLE {a} ON COMMIT DROP AS SELECT * FROM (SELECT j.*, {op} AS op, "
        "{changed} AS changed, ({tracked}) AS tracked FROM ({inner}) j) x WHERE x.op <> {none}"
    ).format(a=actions, op=op, changed=changed, tracked=any_tracked, inner=inner,
             none=sql.Literal(_NONE))
    at, v = sql.Literal(snapshot_time), sql.Literal(version)
    match = _keys_match(keys, "t", [sql.Identifier("a", f"k{i}") for i in range(len(keys))])
    close = sql.SQL(
        "UPDATE {t} t SET {end} = {v}, {vto} = {at} FROM {a} a WHERE {match} AND {open} AND "
        "(a.op = {d} OR (a.op = {u} AND a.tracked) OR (a.op = {i} AND a.h_tomb))").format(
        t=_id(target), end=sql.Identifier(layout.end_at), v=v,
        vto=sql.Identifier(layout.valid_to), at=at, a=actions, match=match,
        open=_open(layout, "t"), d=sql.Literal(OP_DELETE), u=sql.Literal(OP_UPDATE),
        i=sql.Literal(OP_INSERT))
    # statistics of the new actions table: the joins below pick index lookups or a hash join
    statements = [sql.SQL("DROP TABLE IF EXISTS {}").format(actions), create,
                  sql.SQL("ANALYZE {}").format(actions), close]
    data = [c for c in cols if c not in set(keys)]
    if data:
        statements.append(sql.SQL(
            "UPDATE {t} t SET {sets} FROM {a} a WHERE {match} AND {open} AND a.op = {u} AND "
            "NOT a.tracked").format(
            t=_id(target), a=actions, match=match, open=_open(layout, "t"),
            u=sql.Literal(OP_UPDATE), sets=sql.SQL(", ").join(
                [*(sql.SQL("{} = a.{}").format(sql.Identifier(c), n(c)) for c in data),
                 *(sql.SQL("{} = NULL").format(sql.Identifier(c)) for c in gone)])))
    names = [*cols, *layout.columns]
    end = layout.open_end
    flag = [sql.Literal(False)] if layout.deleted is not None else []
    statements.append(sql.SQL(
        "INSERT INTO {t} ({names}) SELECT {new}, {v}, {end}::bigint, {at}, {vto}::timestamptz, "
        "CASE WHEN a.op = {u} THEN a.changed END{flag} FROM {a} a WHERE a.op = {i} OR "
        "(a.op = {u} AND a.tracked)").format(
        t=_id(target), names=sql.SQL(", ").join(map(sql.Identifier, names)),
        new=sql.SQL(", ").join(sql.SQL("a.{}").format(n(c)) for c in cols), v=v,
        end=sql.Literal(end.end_at), at=at, vto=sql.Literal(end.valid_to),
        u=sql.Literal(OP_UPDATE), i=sql.Literal(OP_INSERT), a=actions,
        flag=sql.SQL("").join(sql.SQL(", {}").format(f) for f in flag)))
    if layout.deleted is not None:
        statements.append(sql.SQL(
            "INSERT INTO {t} ({names}) SELECT {old}, {v}, {end}::bigint, {at}, "
            "{vto}::timestamptz, NULL, true FROM {a} a WHERE a.op = {d}").format(
            t=_id(target), names=sql.SQL(", ").join(map(sql.Identifier, [*cols, *gone,
                                                                        *layout.columns])),
            old=sql.SQL(", ").join(sql.SQL("a.{}").format(o(c)) for c in [*cols, *gone]), v=v,
            end=sql.Literal(end.end_at), at=at, vto=sql.Literal(end.valid_to),
            a=actions, d=sql.Literal(OP_DELETE)))
    statements.append(sql.SQL("DROP TABLE {}").format(actions))
    return statements


def _open_all(target: tuple[str, str], staging: tuple[str, str], cols: Sequence[str],
              layout: HistoryLayout, version: int, snapshot_time: dt.datetime) -> sql.Composed:
    """Every staged row opened at ``version``: a first load into an empty history."""
    end = layout.open_end
    flag = sql.SQL(", false") if layout.deleted is not None else sql.SQL("")
    return sql.SQL(
        "INSERT INTO {t} ({names}) SELECT {data}, {v}, {end}::bigint, {at}, {vto}::timestamptz, "
        "NULL{flag} FROM {s} s").format(
        t=_id(target), names=sql.SQL(", ").join(map(sql.Identifier, [*cols, *layout.columns])),
        data=sql.SQL(", ").join(sql.SQL("s.{}").format(sql.Identifier(c)) for c in cols),
        v=sql.Literal(version), end=sql.Literal(end.end_at), at=sql.Literal(snapshot_time),
        vto=sql.Literal(end.valid_to), flag=flag, s=_id(staging))
