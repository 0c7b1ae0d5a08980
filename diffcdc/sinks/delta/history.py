"""The Delta sink's history mode (``mode = "scd2"``): every version of every row, as a table.

Beside the table's own columns each row has:

* ``__START_AT`` / ``__END_AT`` (bigint): the diffcdc version that opened / closed it;
  ``__END_AT`` NULL = the key's current row. A key's rows are half-open and contiguous:
  an update closes the open row at version V and opens the next at V.
* ``__VALID_FROM`` / ``__VALID_TO`` (timestamp, UTC): the same, as the snapshots' as-of times
  (:mod:`diffcdc.sources.snapshot_time`), never the time of the run.
* ``__CHANGED_COLUMNS`` (array<string>, sorted): on a row that continues the key's previous
  row (an update), the non-key columns that differ from it (:mod:`diffcdc.core.column_changes`);
  NULL on a row that opens a key (an insert, a key back after a delete).

So the rows with ``__START_AT <= V AND (__END_AT IS NULL OR __END_AT > V)`` are exactly
version V's snapshot. A delete closes the key's open row; a key change closes the old key and
opens the new one. With tracked columns (``track_history_columns`` /
``track_history_except_columns``) a change in untracked columns only is written into the open
row in place (earlier versions then show today's value of those columns).

Each diffcdc version with changes is one Delta MERGE, carrying the application transaction like
the current mode. Its source holds one row per action: close (matched on the key's open row),
open (never matches: a NULL merge key) or restate in place (matched).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable

from diffcdc.core.column_changes import CHANGED_COLUMNS, changed_columns, key_rows, partners
from diffcdc.core.sql import quote
from diffcdc.sinks.delta.feed import files_dataset, unsliced

START_AT, END_AT = "__START_AT", "__END_AT"
VALID_FROM, VALID_TO = "__VALID_FROM", "__VALID_TO"
CHANGED = CHANGED_COLUMNS
HISTORY_COLUMNS = (START_AT, END_AT, VALID_FROM, VALID_TO, CHANGED)
TIME = pa.timestamp("us", tz="UTC")
HISTORY_FIELDS = (
    pa.field(START_AT, pa.int64()), pa.field(END_AT, pa.int64()), pa.field(VALID_FROM, TIME),
    pa.field(VALID_TO, TIME), pa.field(CHANGED, pa.list_(pa.string())),
)
_ACTION = "__diffcdc_action"
CLOSE, OPEN, RESTATE = 1, 2, 3


def merge_key(i: int) -> str:
    return f"__diffcdc_mk{i}"


def is_history(table: DeltaTable) -> bool:
    """Whether a Delta table is a history table (has the validity columns)."""
    names = {f.name for f in table.schema().fields}
    return {START_AT, END_AT, VALID_FROM, VALID_TO} <= names


@dataclass(frozen=True)
class Tracking:
    """Which columns open a new row when they change (the rest are restated in place)."""

    only: tuple[str, ...] | None = None  #: track_history_columns
    but: tuple[str, ...] = ()  #: track_history_except_columns

    def tracked(self, changed: Sequence[str]) -> bool:
        """Whether a change in ``changed`` columns opens a new row."""
        lower = [c.lower() for c in changed]
        if self.only is not None:
            return any(c.lower() in lower for c in self.only)
        but = {c.lower() for c in self.but}
        return any(c not in but for c in lower)


@dataclass(frozen=True)
class Version:
    """The diffcdc version being published: its number and as-of time."""

    number: int
    valid_from: dt.datetime


def image_rows(data: pa.Table, version: Version) -> pa.Table:
    """Rows of ``data`` (table columns) opened at ``version``: a first load's history."""
    n = data.num_rows
    return _with_history(data, version, pa.nulls(n, pa.list_(pa.string())))


def _with_history(data: pa.Table, version: Version, changed: pa.Array) -> pa.Table:
    n = data.num_rows
    columns = [
        pa.array([version.number] * n, pa.int64()), pa.nulls(n, pa.int64()),
        pa.array([version.valid_from] * n, TIME), pa.nulls(n, TIME), changed,
    ]
    for field, column in zip(HISTORY_FIELDS, columns):
        data = data.append_column(field, column)
    return data


def newest_valid_from(table: DeltaTable, storage_options: dict[str, str] | None = None
                      ) -> dt.datetime | None:
    """The latest ``__VALID_FROM`` of the history (None: no rows): from the files' statistics,
    or read from the column where a file has none."""
    actions = pa.table(table.get_add_actions(flatten=True))
    stat = f"max.{VALID_FROM}"
    if not actions.num_rows:
        return None
    if stat in actions.column_names and not actions.column(stat).null_count:
        values = actions.column(stat).cast(TIME)
    else:
        values = files_dataset(table, storage_options).to_table(
            columns=[VALID_FROM]).column(VALID_FROM)
    newest = pc.max(values).as_py()
    return newest.astimezone(dt.timezone.utc) if newest is not None else None


def open_rows(table: DeltaTable, keys: Sequence[str], of: pa.Table | None,
              storage_options: dict[str, str] | None = None) -> pa.Table:
    """The open (current) rows of the history, of the keys in ``of`` (None: all of them).

    Read batch by batch, each batch cut to rows whose every key value occurs in ``of`` (a
    superset of the keys' rows, matched exactly by the caller): only those stay in memory. The
    key test is not handed to the dataset's scan: delta-rs's files may hold a string column as
    ``string_view``, which the scan's statistics cannot compare with a string value.
    """
    dataset = files_dataset(table, storage_options)  # a date before year 1 is read too
    batches = dataset.to_batches(filter=pc.field(END_AT).is_null())
    if of is None:
        return pa.Table.from_batches(batches, dataset.schema)
    wanted = {k: pc.unique(of.column(k).combine_chunks()).drop_null() for k in keys}
    kept = []
    for batch in batches:
        mask = None
        for k in keys:
            column = batch.column(k)
            found = pc.is_in(column, value_set=wanted[k].cast(column.type))
            mask = found if mask is None else pc.and_(mask, found)
        kept.append(batch.filter(mask))
    return pa.Table.from_batches(kept, dataset.schema)


def copied_open_rows(current: pa.Table, keys: Sequence[str]) -> tuple[pa.Table, list[tuple]]:
    """Keys with several open rows in ``current`` (another writer's rows): one row of each key
    whose open rows are exact copies of one another, and the keys whose open rows differ."""
    found = key_rows(current, keys)
    counts = Counter(found)
    groups: dict[tuple, list[int]] = {}
    for i, k in enumerate(found):
        if counts[k] > 1:
            groups.setdefault(k, []).append(i)
    whole = key_rows(current, current.column_names)
    copies = [rows[0] for rows in groups.values() if len({whole[i] for i in rows}) == 1]
    differ = [k for k, rows in groups.items() if len({whole[i] for i in rows}) > 1]
    return current.take(row_indices(copies)), differ


def remove_copies(table: DeltaTable, rows: pa.Table, keys: Sequence[str],
                  props: CommitProperties) -> None:
    """One commit that deletes the open rows of ``rows``' keys and inserts ``rows`` (one of
    each key's identical copies) back: the history as it was before the copies."""
    n = rows.num_rows
    drop = rows
    keep = rows
    for i, k in enumerate(keys):
        drop = drop.append_column(merge_key(i), rows.column(k))
        keep = keep.append_column(merge_key(i), pa.nulls(n, rows.schema.field(k).type))
    drop = drop.append_column(_ACTION, pa.array([CLOSE] * n, pa.int8()))
    keep = keep.append_column(_ACTION, pa.array([OPEN] * n, pa.int8()))
    source = pa.concat_tables([drop, keep])
    on = " AND ".join(f"t.{quote(k)} = s.{merge_key(i)}" for i, k in enumerate(keys))
    (
        table.merge(unsliced(source), predicate=f"{on} AND t.{END_AT} IS NULL",
                    source_alias="s", target_alias="t", commit_properties=props)
        .when_matched_delete(predicate=f"s.{_ACTION} = {CLOSE}")
        .when_not_matched_insert(updates={c: f"s.{quote(c)}" for c in rows.column_names},
                                 predicate=f"s.{_ACTION} = {OPEN}")
        .execute()
    )


def merge_source(
    new_rows: pa.Table,
    gone: pa.Table,
    current: pa.Table,
    keys: Sequence[str],
    compared: Sequence[str],
    tracking: Tracking,
    version: Version,
    *,
    unchanged_possible: bool,
) -> pa.Table:
    """One row per action of ``version``: close each key of ``gone``; for each row of
    ``new_rows`` open it (no current row), or close the current row and open it (a tracked
    change), or restate the current row in place (an untracked change; nothing when
    ``unchanged_possible`` and no column changed, as in a full image). ``current`` holds the
    open rows of (at least) the keys of ``new_rows``."""
    found = partners(new_rows, current, keys)
    matched = [i for i, j in enumerate(found) if j is not None]
    old = current.take(row_indices([found[i] for i in matched]))
    changes = changed_columns(old, new_rows.take(row_indices(matched)), compared)
    opened, restated, closed_keys, opened_changed = [], [], [], []
    for i, j in enumerate(found):
        if j is None:
            opened.append(i)
            opened_changed.append(None)
    for i, changed in zip(matched, changes):
        if not changed:
            if unchanged_possible:
                continue
            raise ValueError(f"row {i} is an update with no changed column")
        if tracking.tracked(changed):
            opened.append(i)
            opened_changed.append(changed)
            closed_keys.append(i)
        else:
            restated.append(i)
    parts = []
    if gone.num_rows or closed_keys:
        close = pa.concat_tables([gone.select(list(keys)),
                                  new_rows.select(list(keys)).take(row_indices(closed_keys))],
                                 promote_options="permissive")  # the image's and the table's
        parts.append(_actions(close, keys, CLOSE, version, keyed=True))
    if opened:
        rows = _with_history(new_rows.take(row_indices(opened)), version,
                             pa.array(opened_changed, pa.list_(pa.string())))
        parts.append(_actions(rows, keys, OPEN, version, keyed=False))
    if restated:
        parts.append(_actions(new_rows.take(row_indices(restated)), keys, RESTATE, version,
                              keyed=True))
    if not parts:
        return pa.table({})
    return pa.concat_tables(parts, promote_options="permissive")


def row_indices(indices: Sequence[int | None]) -> pa.Array:
    """Row indices for ``take`` (typed: an empty list takes nothing)."""
    return pa.array(indices, pa.int64())


def _actions(rows: pa.Table, keys: Sequence[str], action: int, version: Version, *,
             keyed: bool) -> pa.Table:
    n = rows.num_rows
    for i, k in enumerate(keys):
        key = rows.column(k) if keyed else pa.nulls(n, rows.schema.field(k).type)
        rows = rows.append_column(merge_key(i), key)
    if VALID_FROM not in rows.column_names:  # a close sets __VALID_TO from it
        rows = rows.append_column(pa.field(VALID_FROM, TIME),
                                  pa.array([version.valid_from] * n, TIME))
    return rows.append_column(_ACTION, pa.array([action] * n, pa.int8()))


def merge(table: DeltaTable, source: pa.Table, keys: Sequence[str], version: Version,
          props: CommitProperties) -> None:
    """Apply :func:`merge_source`'s actions to the history in one commit."""
    target = pa.schema(table.schema().to_arrow())
    for field in target:  # a column the snapshots no longer have: NULL in the rows opened
        if field.name not in source.column_names:
            source = source.append_column(field, pa.nulls(source.num_rows, field.type))
    data = [c for c in source.column_names
            if c not in HISTORY_COLUMNS and c != _ACTION and not c.startswith("__diffcdc_mk")]
    # every name quoted, the target columns' too (delta-rs parses them as SQL: ``order.id``
    # unquoted is column ``id`` of a table ``order``)
    on = " AND ".join(f"t.{quote(k)} = s.{quote(merge_key(i))}" for i, k in enumerate(keys))
    action = f"s.{quote(_ACTION)}"
    (
        table.merge(unsliced(source), predicate=f"{on} AND t.{quote(END_AT)} IS NULL",
                    source_alias="s", target_alias="t", merge_schema=True,
                    commit_properties=props)
        .when_matched_update(
            updates={quote(END_AT): str(version.number), quote(VALID_TO): f"s.{quote(VALID_FROM)}"},
            predicate=f"{action} = {CLOSE}")
        .when_matched_update(updates={quote(c): f"s.{quote(c)}" for c in data},
                             predicate=f"{action} = {RESTATE}")
        .when_not_matched_insert(
            updates={quote(c): f"s.{quote(c)}" for c in [*data, *HISTORY_COLUMNS]},
            predicate=f"{action} = {OPEN}")
        .execute()
    )
