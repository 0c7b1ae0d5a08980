"""The most-changed columns, where a sink keeps the changed-column lists: a Delta sink's
changelog table (``changelog_path``: ``__CHANGED_COLUMNS`` on each update's post-image row) or
its history table (``mode = "scd2"``: the layout's changed-columns column on each row an update
opened). Nothing else records which columns changed: state keeps one fingerprint per key, the
commit records and run reports count rows, not columns. Reads that list column (and the
version column it is filtered on) only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from diffcdc.core.column_changes import CHANGED_COLUMNS
from diffcdc.core.history_layout import HistoryLayout
from diffcdc.report.gather import column_counts
from diffcdc.report.model import ColumnChanges
from diffcdc.state.commit import SinkEntry

#: The changelog table's column of the diffcdc version (:func:`diffcdc.sinks.delta.feed.append_changelog`).
CHANGELOG_VERSION = "_diffcdc_version"
#: At most this many columns are listed per sink.
TOP = 10


@dataclass(frozen=True)
class DeltaPlace:
    """Where a configured Delta sink's tables are now (the config's; a commit's manifest holds
    where they were when it was made) and the storage options they are read with."""

    path: str
    changelog_path: str | None = None
    storage_options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Kept:
    """Where a sink keeps its changed-column lists."""

    path: str  #: the Delta table
    column: str  #: its list column
    version: str  #: its column of the diffcdc version that wrote the row


def where_kept(entry: SinkEntry, place: DeltaPlace | None = None) -> Kept | None:
    """The Delta table and columns holding a sink's changed-column lists (None: it keeps
    none)."""
    manifest = entry.manifest
    if entry.type != "delta":
        return None
    if manifest.get("mode") == "scd2" and manifest.get("target"):
        layout = HistoryLayout.from_record(manifest.get("layout"))
        return Kept(place.path if place else str(manifest["target"]), layout.changed_columns,
                    layout.start_at)
    changelog = place.changelog_path if place else manifest.get("changelog")
    if changelog:
        return Kept(str(changelog), CHANGED_COLUMNS, CHANGELOG_VERSION)
    return None


def changed_columns(sink_id: str, entry: SinkEntry, place: DeltaPlace | None = None,
                    since: int = 1, read: bool = True) -> ColumnChanges | None:
    """The sink's most-changed columns in the rows versions from ``since`` on wrote (None: it
    keeps no changed-column lists); a table that cannot be read gives its problem in place of
    the counts (a report is never refused). ``read`` False: the sink has published nothing
    yet (no table to read), no column counted."""
    kept = where_kept(entry, place)
    if kept is None:
        return None
    if not read:
        return ColumnChanges(sink_id, kept.path, (), since)
    try:
        counts = _count(kept, since, dict(place.storage_options) if place else {})
    except Exception as exc:  # noqa: BLE001 - any library's error: shown in the report
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return ColumnChanges(sink_id, kept.path, (), since, f"{type(exc).__name__}: {first}")
    return ColumnChanges(sink_id, kept.path, column_counts(counts.items(), TOP), since)


def _count(kept: Kept, since: int, storage_options: dict[str, str]) -> dict[str, Any]:
    """Per column, the rows of versions ``since`` on that list it: only the two columns are
    read, and row groups of older versions are skipped by their statistics."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    from diffcdc.sinks.delta.feed import files_dataset

    lists = files_dataset(DeltaTable(kept.path, storage_options=storage_options or None),
                          storage_options).to_table(
        columns=[kept.column], filter=ds.field(kept.version) >= since).column(kept.column)
    if lists.num_chunks == 0:
        return {}
    values = pc.value_counts(pc.list_flatten(lists))
    return dict(zip(values.field("values").to_pylist(), values.field("counts").to_pylist()))
