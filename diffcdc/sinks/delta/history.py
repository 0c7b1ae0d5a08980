"""The Delta sink's history mode (``mode = "scd2"``): every version of every row, as a table.

What the rows mean — the metadata columns, their names, the open end, tombstones, "as of" — is
:mod:`diffcdc.core.history_layout`; by default beside the table's own columns each row has:

* ``__START_AT`` / ``__END_AT`` (bigint): the diffcdc version that opened / closed it;
  ``__END_AT`` NULL = the key's current row. A key's rows are half-open and contiguous:
  an update closes the open row at version V and opens the next at V.
* ``__VALID_FROM`` / ``__VALID_TO`` (timestamp, UTC): the same, as the snapshots' as-of times
  (:mod:`diffcdc.sources.snapshot_time`), never the time of the run.
* ``__CHANGED_COLUMNS`` (array<string>, sorted): on a row that continues the key's previous
  row (an update), the non-key columns that differ from it (:mod:`diffcdc.core.column_changes`);
  NULL on a row that opens a key (an insert, a key back after a delete) and on a tombstone.

So the rows with ``__START_AT <= V AND (__END_AT IS NULL OR __END_AT > V)`` are exactly
version V's snapshot. A delete closes the key's open row (with ``deletes = "row"`` it also
opens a tombstone: the key's last values, the deleted flag true; a key that comes back closes
it); a key change closes the old key and opens the new one. With tracked columns
(``track_history_columns`` / ``track_history_except_columns``) a change in untracked columns
only is written into the open row in place (earlier versions then show today's value of those
columns).

The layout a history was made with is recorded in its schema (the metadata of its start
column, :data:`LAYOUT_KEY`): it is written with the table's first rows and kept by every
MERGE, so it cannot part from the rows. A table without it is a history made before layouts
were configurable: the default layout. A changed layout is applied by a full image
(:func:`convert`: the whole history rewritten in one commit, then merged as usual).

Each diffcdc version with changes is one Delta MERGE, carrying the application transaction like
the current mode. Its source holds one row per action: close (matched on the key's open row),
open (never matches: a NULL merge key) or restate in place (matched).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable

from diffcdc.core.column_changes import changed_columns, key_rows, partners
from diffcdc.core.history_layout import HistoryLayout
from diffcdc.core.sql import quote
from diffcdc.sinks.delta.feed import files_dataset, unsliced
from diffcdc.sinks.history_settings import Tracking

#: The default layout (a history made before layouts were configurable has it).
DEFAULT = HistoryLayout()
START_AT, END_AT = DEFAULT.start_at, DEFAULT.end_at
VALID_FROM, VALID_TO = DEFAULT.valid_from, DEFAULT.valid_to
CHANGED = DEFAULT.changed_columns
HISTORY_COLUMNS = DEFAULT.columns
TIME = pa.timestamp("us", tz="UTC")
#: The metadata key of the start column's Delta field that records the layout.
LAYOUT_KEY = "diffcdc.history.layout"
_ACTION = "__diffcdc_action"
CLOSE, OPEN, RESTATE = 1, 2, 3


def history_fields(layout: HistoryLayout = DEFAULT) -> list[pa.Field]:
    """The metadata columns' Arrow fields; the start column's carries the layout."""
    fields = [
        pa.field(layout.start_at, pa.int64(), metadata={LAYOUT_KEY: layout.text()}),
        pa.field(layout.end_at, pa.int64()), pa.field(layout.valid_from, TIME),
        pa.field(layout.valid_to, TIME), pa.field(layout.changed_columns, pa.list_(pa.string())),
    ]
    if layout.deleted is not None:
        fields.append(pa.field(layout.deleted, pa.bool_()))
    return fields


def table_layout(table: DeltaTable) -> HistoryLayout | None:
    """The layout the history at ``table`` was made with (None: the table is no history)."""
    fields = table.schema().fields
    for f in fields:
        recorded = (f.metadata or {}).get(LAYOUT_KEY)
        if recorded is not None:
            return HistoryLayout.from_record(recorded if isinstance(recorded, str)
                                             else str(recorded))
    names = {f.name for f in fields}
    return DEFAULT if set(DEFAULT.validity) <= names else None


def live_open_mask(rows: pa.Table, layout: HistoryLayout) -> pa.Array:
    """Which history rows are their key's open row and no tombstone: the current image."""
    end = rows.column(layout.end_at)
    sentinel = layout.open_end.end_at
    mask = pc.is_null(end) if sentinel is None else pc.fill_null(pc.equal(end, sentinel), False)
    if layout.deleted is not None:
        mask = pc.and_(mask, pc.invert(pc.fill_null(rows.column(layout.deleted), False)))
    return mask


def merge_key(i: int) -> str:
    return f"__diffcdc_mk{i}"


def is_history(table: DeltaTable) -> bool:
    """Whether a Delta table is a history table (has a layout's validity columns)."""
    return table_layout(table) is not None


@dataclass(frozen=True)
class Version:
    """The diffcdc version being published: its number and as-of time."""

    number: int
    valid_from: dt.datetime


def image_rows(data: pa.Table, version: Version, layout: HistoryLayout = DEFAULT) -> pa.Table:
    """Rows of ``data`` (table columns) opened at ``version``: a first load's history."""
    n = data.num_rows
    return _with_history(data, version, pa.nulls(n, pa.list_(pa.string())), layout)


def _with_history(data: pa.Table, version: Version, changed: pa.Array,
                  layout: HistoryLayout = DEFAULT, deleted: bool = False) -> pa.Table:
    """``data`` with the metadata columns of rows opened at ``version`` (open ended)."""
    n = data.num_rows
    end = layout.open_end
    columns = [
        pa.array([version.number] * n, pa.int64()), pa.array([end.end_at] * n, pa.int64()),
        pa.array([version.valid_from] * n, TIME), pa.array([end.valid_to] * n, TIME), changed,
    ]
    if layout.deleted is not None:
        columns.append(pa.array([deleted] * n, pa.bool_()))
    for field, column in zip(history_fields(layout), columns):
        data = data.append_column(field, column)
    return data


def newest_valid_from(table: DeltaTable, storage_options: dict[str, str] | None = None,
                      layout: HistoryLayout = DEFAULT) -> dt.datetime | None:
    """The latest valid-from time of the history (None: no rows): from the files' statistics,
    or read from the column where a file has none."""
    column = layout.valid_from
    actions = pa.table(table.get_add_actions(flatten=True))
    stat = f"max.{column}"
    if not actions.num_rows:
        return None
    if stat in actions.column_names and not actions.column(stat).null_count:
        values = actions.column(stat).cast(TIME)
    else:
        values = files_dataset(table, storage_options).to_table(
            columns=[column]).column(column)
    newest = pc.max(values).as_py()
    return newest.astimezone(dt.timezone.utc) if newest is not None else None


def open_rows(table: DeltaTable, keys: Sequence[str], of: pa.Table | None,
              storage_options: dict[str, str] | None = None,
              layout: HistoryLayout = DEFAULT) -> pa.Table:
    """The open (current) rows of the history, of the keys in ``of`` (None: all of them).

    Read batch by batch, each batch cut to rows whose every key value occurs in ``of`` (a
    superset of the keys' rows, matched exactly by the caller): only those stay in memory. The
    key test is not handed to the dataset's scan: delta-rs's files may hold a string column as
    ``string_view``, which the scan's statistics cannot compare with a string value.
    """
    dataset = files_dataset(table, storage_options)  # a date before year 1 is read too
    end = pc.field(layout.end_at)
    sentinel = layout.open_end.end_at
    batches = dataset.to_batches(filter=end.is_null() if sentinel is None else end == sentinel)
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
                  props: CommitProperties, layout: HistoryLayout = DEFAULT) -> None:
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
    # the target names quoted too, as in :func:`merge` (``e.n.d`` is no table alias)
    (
        table.merge(unsliced(source), predicate=f"{on} AND {layout.open_sql('t.', quote)}",
                    source_alias="s", target_alias="t", commit_properties=props)
        .when_matched_delete(predicate=f"s.{_ACTION} = {CLOSE}")
        .when_not_matched_insert(updates={quote(c): f"s.{quote(c)}" for c in rows.column_names},
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
    layout: HistoryLayout = DEFAULT,
    restate_unchanged: bool = False,
) -> pa.Table:
    """One row per action of ``version``: close each key of ``gone``; for each row of
    ``new_rows`` open it (no current row), or close the current row and open it (a tracked
    change), or restate the current row in place (an untracked change; nothing when
    ``unchanged_possible`` and no column changed, as in a full image). ``current`` holds the
    open rows of (at least) the keys of ``new_rows``. ``restate_unchanged``: a row of
    ``new_rows`` in which no compared column changed is restated in place all the same (an
    update the version publishes: its excluded columns may differ, as after a re-fingerprint
    for a new ``exclude``).

    With tombstones (``layout.deleted``) ``current`` also holds the open rows of ``gone``'s
    keys: each gone key's live row is closed and its tombstone opened (the row's values, the
    flag true); a row of ``new_rows`` whose key's open row is a tombstone closes it and opens
    (a key back after its delete)."""
    tombs = current.slice(0, 0)
    if layout.deleted is not None and current.num_rows:
        flag = pc.fill_null(current.column(layout.deleted), False)
        tombs, current = current.filter(flag), current.filter(pc.invert(flag))
    found = partners(new_rows, current, keys)
    matched = [i for i, j in enumerate(found) if j is not None]
    old = current.take(row_indices([found[i] for i in matched]))
    changes = changed_columns(old, new_rows.take(row_indices(matched)), compared)
    opened, restated, closed_keys, opened_changed = [], [], [], []
    for i, j in enumerate(found):
        if j is None:
            opened.append(i)
            opened_changed.append(None)
    if tombs.num_rows:  # back after a delete: its tombstone is closed
        back = partners(new_rows.take(row_indices(opened)), tombs, keys)
        closed_keys += [i for i, j in zip(opened, back) if j is not None]
    for i, changed in zip(matched, changes):
        if not changed:
            if restate_unchanged:
                restated.append(i)
                continue
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
        parts.append(_actions(close, keys, CLOSE, version, layout, keyed=True))
    if opened:
        rows = _with_history(new_rows.take(row_indices(opened)), version,
                             pa.array(opened_changed, pa.list_(pa.string())), layout)
        parts.append(_actions(rows, keys, OPEN, version, layout, keyed=False))
    if layout.deleted is not None and gone.num_rows:
        last = [j for j in partners(gone, current, keys) if j is not None]
        data = current.take(row_indices(last)).drop_columns(
            [c for c in layout.columns if c in current.column_names])
        rows = _with_history(data, version, pa.nulls(len(last), pa.list_(pa.string())),
                             layout, deleted=True)
        parts.append(_actions(rows, keys, OPEN, version, layout, keyed=False))
    if restated:
        parts.append(_actions(new_rows.take(row_indices(restated)), keys, RESTATE, version,
                              layout, keyed=True))
    if not parts:
        return pa.table({})
    return pa.concat_tables(parts, promote_options="permissive")


def row_indices(indices: Sequence[int | None]) -> pa.Array:
    """Row indices for ``take`` (typed: an empty list takes nothing)."""
    return pa.array(indices, pa.int64())


def _actions(rows: pa.Table, keys: Sequence[str], action: int, version: Version,
             layout: HistoryLayout, *, keyed: bool) -> pa.Table:
    n = rows.num_rows
    for i, k in enumerate(keys):
        key = rows.column(k) if keyed else pa.nulls(n, rows.schema.field(k).type)
        rows = rows.append_column(merge_key(i), key)
    if layout.valid_from not in rows.column_names:  # a close sets the valid-to time from it
        rows = rows.append_column(pa.field(layout.valid_from, TIME),
                                  pa.array([version.valid_from] * n, TIME))
    return rows.append_column(_ACTION, pa.array([action] * n, pa.int8()))


def merge(table: DeltaTable, source: pa.Table, keys: Sequence[str], version: Version,
          props: CommitProperties, layout: HistoryLayout = DEFAULT) -> None:
    """Apply :func:`merge_source`'s actions to the history in one commit."""
    target = pa.schema(table.schema().to_arrow())
    for field in target:  # a column the snapshots no longer have: NULL in the rows opened
        if field.name not in source.column_names:
            source = source.append_column(field, pa.nulls(source.num_rows, field.type))
    data = [c for c in source.column_names
            if c not in layout.columns and c != _ACTION and not c.startswith("__diffcdc_mk")]
    # the layout is the target's own (recorded when it was made, or none by an earlier diffcdc):
    # a source field's metadata would replace it, and delta-rs then reads the column's
    # earlier values as NULL
    source = source.cast(pa.schema([f.remove_metadata() for f in source.schema]))
    # every name quoted, the target columns' too (delta-rs parses them as SQL: ``order.id``
    # unquoted is column ``id`` of a table ``order``)
    on = " AND ".join(f"t.{quote(k)} = s.{quote(merge_key(i))}" for i, k in enumerate(keys))
    action = f"s.{quote(_ACTION)}"
    (
        table.merge(unsliced(source), predicate=f"{on} AND {layout.open_sql('t.', quote)}",
                    source_alias="s", target_alias="t", merge_schema=True,
                    commit_properties=props)
        .when_matched_update(
            updates={quote(layout.end_at): str(version.number),
                     quote(layout.valid_to): f"s.{quote(layout.valid_from)}"},
            predicate=f"{action} = {CLOSE}")
        .when_matched_update(updates={quote(c): f"s.{quote(c)}" for c in data},
                             predicate=f"{action} = {RESTATE}")
        .when_not_matched_insert(
            updates={quote(c): f"s.{quote(c)}" for c in [*data, *layout.columns]},
            predicate=f"{action} = {OPEN}")
        .execute()
    )


def convert(rows: pa.Table, keys: Sequence[str], old: HistoryLayout, new: HistoryLayout
            ) -> pa.Table:
    """A whole history in layout ``old`` rewritten in layout ``new``: the same versions of
    the same rows, the columns renamed, the open ends given the new sentinels, tombstones
    derived (a key's row closed at V without a row starting at V was deleted at V: its
    tombstone runs until the key's next row, or stays open) or dropped."""
    data = [c for c in rows.column_names if c not in old.columns]
    clash = [c for c in data if c.lower() in {n.lower() for n in new.columns}]
    if clash:
        raise ValueError(f"the history holds column(s) {clash} that the new layout names")
    end = rows.column(old.end_at)
    sentinel = old.open_end.end_at
    is_open = pc.is_null(end) if sentinel is None else pc.fill_null(pc.equal(end, sentinel),
                                                                       False)
    flag = (pc.fill_null(rows.column(old.deleted), False) if old.deleted is not None
            else pa.array([False] * rows.num_rows, pa.bool_()))
    if new.deleted is None:  # tombstones go: their gaps are what a delete leaves
        keep = pc.invert(flag)
        rows, is_open, flag = rows.filter(keep), is_open.filter(keep), flag.filter(keep)
    start = rows.column(old.start_at).to_pylist()
    ends = rows.column(old.end_at).to_pylist()
    valid_from = rows.column(old.valid_from)
    valid_to = rows.column(old.valid_to).to_pylist()
    opened = is_open.to_pylist()
    table = rows.select(data)
    columns = {"start": start, "end": [None if o else e for o, e in zip(opened, ends)],
               "from": valid_from.to_pylist(),
               "to": [None if o else t for o, t in zip(opened, valid_to)],
               "changed": rows.column(old.changed_columns).to_pylist(),
               "deleted": flag.to_pylist()}
    extra: list[int] = []  # (row whose gap gets a tombstone)
    tomb_end: list[tuple[int | None, dt.datetime | None]] = []
    if new.deleted is not None and old.deleted is None:
        by_key: dict[tuple, list[int]] = defaultdict(list)
        for i, key in enumerate(key_rows(rows, keys)):
            by_key[key].append(i)
        for indices in by_key.values():
            indices.sort(key=lambda i: start[i])
            for i, nxt in zip(indices, [*indices[1:], None]):
                closed = columns["end"][i]
                if closed is None or (nxt is not None and start[nxt] <= closed):
                    continue
                extra.append(i)
                tomb_end.append((None, None) if nxt is None else (start[nxt],
                                                                  columns["from"][nxt]))
    n_extra = len(extra)
    out = pa.concat_tables([table, table.take(row_indices(extra))])

    def filled(values: list, open_value: object) -> list:
        return [open_value if v is None else v for v in values]

    tomb_start = [columns["end"][i] for i in extra]
    tomb_from = [columns["to"][i] for i in extra]
    end_at = filled(columns["end"] + [e for e, _ in tomb_end], new.open_end.end_at)
    valid_to_all = filled(columns["to"] + [t for _, t in tomb_end], new.open_end.valid_to)
    meta = [
        pa.array(start + tomb_start, pa.int64()), pa.array(end_at, pa.int64()),
        pa.array(columns["from"] + tomb_from, TIME), pa.array(valid_to_all, TIME),
        pa.array(columns["changed"] + [None] * n_extra, pa.list_(pa.string())),
    ]
    if new.deleted is not None:
        meta.append(pa.array(columns["deleted"] + [True] * n_extra, pa.bool_()))
    for field, column in zip(history_fields(new), meta):
        out = out.append_column(field, column)
    return out
