"""The Delta change data feed: a permanent changelog copy, and replaying the feed from nothing.

A change feed lives only as long as the table's history (spec §2); the optional changelog table
keeps every change row forever, with ``_change_type``, ``_commit_version`` and
``_commit_timestamp`` as ordinary columns, appended from the feed of each commit itself, and
``__CHANGED_COLUMNS`` on each ``update_postimage`` row (the columns the update changed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.fs import DeltaStorageHandler

from diffcdc.core.column_changes import CHANGED_COLUMNS, changed_columns, partners

#: The change feed's own columns (spec §2).
CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


def plain_types(table: pa.Table) -> pa.Table:
    """``string_view`` / ``binary_view`` columns (as delta-rs returns them) as plain types."""
    fields = []
    for field in table.schema:
        if pa.types.is_string_view(field.type):
            field = field.with_type(pa.string())
        elif pa.types.is_binary_view(field.type):
            field = field.with_type(pa.binary())
        fields.append(field)
    return table.cast(pa.schema(fields))


def unsliced(table: pa.Table) -> pa.Table:
    """``table`` as batches whose arrays start at offset 0, as delta-rs must be handed it.

    delta-rs (arrow-rs 59) panics importing a nested struct that is a slice, in a callback
    that cannot unwind: the process aborts. A table whose columns are chunked differently
    (``pa.concat_tables``, a column appended) is handed over in slices: the sliced arrays of
    each batch are copied, the rest stay shared."""
    batches = []
    for batch in table.to_batches():
        if any(column.offset for column in batch.columns):
            batch = pa.RecordBatch.from_arrays(
                [pa.concat_arrays([c]) if c.offset else c for c in batch.columns],
                schema=batch.schema)
        batches.append(batch)
    return pa.Table.from_batches(batches, table.schema)


def files_dataset(table: DeltaTable, storage_options: dict[str, str] | None = None) -> ds.Dataset:
    """The table's rows as a pyarrow dataset over its data files (the log's ``add`` actions),
    read as stored. delta-rs's own dataset parses each file's statistics into Python values and
    fails on a date before year 1 or after 9999 ("Invalid isoformat string: '-0221-09-04'").
    A table only delta-rs reads right (another writer's deletion vectors, column mapping or
    partitions: diffcdc writes none) is read through delta-rs."""
    features = set(table.protocol().reader_features or ())
    metadata = table.metadata()
    if (features & {"deletionVectors", "columnMapping"} or metadata.partition_columns
            or metadata.configuration.get("delta.columnMapping.mode", "none") != "none"):
        return table.to_pyarrow_dataset()
    schema = pa.schema(table.schema().to_arrow())
    files = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    filesystem = pafs.PyFileSystem(DeltaStorageHandler(table.table_uri, storage_options))
    return ds.dataset(files, schema=schema, filesystem=filesystem, format="parquet")


def commit_of(table: DeltaTable, version: int) -> int | None:
    """The Delta version whose commit carries ``diffcdc.version = version``, or None."""
    for entry in table.history():
        if str(entry.get("diffcdc.version")) == str(version):
            return int(entry["version"])
    return None


def feed_of(table: DeltaTable, delta_version: int) -> pa.Table:
    """The change feed rows of one Delta commit."""
    rows = table.load_cdf(starting_version=delta_version, ending_version=delta_version)
    return plain_types(pa.table(rows.read_all()))


def append_changelog(
    table: DeltaTable, version: int, path: str, app_id: str, storage_options: dict[str, str],
    incarnation: str = "", image: pa.Table | None = None, *, keys: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> None:
    """Append the feed of diffcdc ``version``'s commit to the changelog table (exactly once),
    each row also carrying ``_diffcdc_version`` and ``_diffcdc_incarnation`` (a Delta table
    made anew restarts ``_commit_version`` at 0; these keep its rows apart from the old).

    A full image (``image``: a first load, a re-creation, ``reload --sink``) starts a new
    incarnation: its rows go in as inserts. The feed of an overwrite would also list the old
    rows as deletes, read from files a damaged table (the reason for a reload) may have lost.
    """
    delta_version = commit_of(table, version)
    if delta_version is None:
        return  # no commit for this version (it had no changes)
    rows = feed_of(table, delta_version) if image is None else _image_rows(
        table, delta_version, image)
    rows = with_changed_columns(rows, keys, exclude)
    rows = rows.append_column("_diffcdc_version", pa.array([version] * rows.num_rows, pa.int64()))
    rows = rows.append_column("_diffcdc_incarnation",
                              pa.array([incarnation] * rows.num_rows, pa.string()))
    props = CommitProperties(
        custom_metadata={"diffcdc.version": str(version)},
        app_transactions=[Transaction(app_id, version)],
    )
    write_deltalake(path, unsliced(rows), mode="append", schema_mode="merge",
                    storage_options=storage_options, commit_properties=props)


def with_changed_columns(rows: pa.Table, keys: Sequence[str], exclude: Sequence[str]
                         ) -> pa.Table:
    """The feed rows of one commit with ``__CHANGED_COLUMNS``: on each ``update_postimage``
    row the non-key, non-excluded columns that differ from its preimage; NULL elsewhere."""
    kinds = rows.column("_change_type")
    post = pc.indices_nonzero(pc.equal(kinds, "update_postimage")).to_pylist()
    column: list[list[str] | None] = [None] * rows.num_rows
    if post:
        after = rows.take(post)
        before = rows.filter(pc.equal(kinds, "update_preimage"))
        found = partners(after, before, keys)
        if any(i is None for i in found):
            raise ValueError("an update_postimage row has no update_preimage of its key")
        skip = {c.lower() for c in (*keys, *exclude, *CHANGE_COLUMNS)}
        compared = [c for c in rows.column_names if c.lower() not in skip]
        changes = changed_columns(before.take(found), after, compared)
        for i, changed in zip(post, changes):
            column[i] = changed
    return rows.append_column(CHANGED_COLUMNS, pa.array(column, pa.list_(pa.string())))


def _image_rows(table: DeltaTable, delta_version: int, image: pa.Table) -> pa.Table:
    """A full image as change rows of ``delta_version``'s commit (every row an insert)."""
    stamp = next((h["timestamp"] for h in table.history() if h.get("version") == delta_version), 0)
    n = image.num_rows
    return (image.append_column("_change_type", pa.array(["insert"] * n, pa.string()))
            .append_column("_commit_version", pa.array([delta_version] * n, pa.uint64()))
            .append_column("_commit_timestamp", pa.array([stamp] * n, pa.timestamp("ms"))))


def replay_change_feed(path: str, keys: list[str], storage_options: dict[str, str] | None = None
                       ) -> list[dict[str, Any]]:
    """Apply a Delta table's whole change feed, from version 0, to an empty table."""
    table = DeltaTable(path, storage_options=storage_options or {})
    feed = feed_of_range(table, 0, table.version())
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    # within one commit the old rows go first: an overwrite (a full image) deletes and
    # inserts the same key in one commit
    rank = pc.if_else(pc.is_in(feed.column("_change_type"),
                               value_set=pa.array(["delete", "update_preimage"])), 0, 1)
    feed = feed.append_column("__rank", rank)
    order = pc.sort_indices(feed, sort_keys=[("_commit_version", "ascending"),
                                             ("__rank", "ascending")])
    feed = feed.drop_columns(["__rank"])
    for row in feed.take(order).to_pylist():
        kind = row.pop("_change_type")
        row.pop("_commit_version")
        row.pop("_commit_timestamp")
        key = tuple(row[k] for k in keys)
        if kind in ("insert", "update_postimage"):
            rows[key] = row
        elif kind == "delete":
            rows.pop(key, None)
    return list(rows.values())


def feed_of_range(table: DeltaTable, start: int, end: int) -> pa.Table:
    rows = table.load_cdf(starting_version=start, ending_version=end)
    return plain_types(pa.table(rows.read_all()))
