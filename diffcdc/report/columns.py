"""The most-changed columns, where a sink keeps the changed-column lists: a Delta sink's
changelog table (``changelog_path``: ``__CHANGED_COLUMNS`` on each update's post-image row) or
its history table (``mode = "scd2"``: the layout's changed-columns column on each row an update
opened). Nothing else records which columns changed: state keeps one fingerprint per key, the
commit records and run reports count rows, not columns. Reads that one list column only.
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

#: At most this many columns are listed per sink.
TOP = 10


@dataclass(frozen=True)
class DeltaPlace:
    """Where a configured Delta sink's tables are now (the config's; a commit's manifest holds
    where they were when it was made) and the storage options they are read with."""

    path: str
    changelog_path: str | None = None
    storage_options: Mapping[str, str] = field(default_factory=dict)


def where_kept(entry: SinkEntry, place: DeltaPlace | None = None) -> tuple[str, str] | None:
    """The Delta table and column holding a sink's changed-column lists (None: it keeps none)."""
    manifest = entry.manifest
    if entry.type != "delta":
        return None
    if manifest.get("mode") == "scd2" and manifest.get("target"):
        return (place.path if place else str(manifest["target"])), HistoryLayout.from_record(
            manifest.get("layout")).changed_columns
    changelog = place.changelog_path if place else manifest.get("changelog")
    if changelog:
        return str(changelog), CHANGED_COLUMNS
    return None


def changed_columns(sink_id: str, entry: SinkEntry, place: DeltaPlace | None = None
                    ) -> ColumnChanges | None:
    """The sink's most-changed columns (None: it keeps no changed-column lists); a table that
    cannot be read gives its problem in place of the counts (a report is never refused)."""
    kept = where_kept(entry, place)
    if kept is None:
        return None
    path, column = kept
    try:
        counts = _count(path, column, dict(place.storage_options) if place else {})
    except Exception as exc:  # noqa: BLE001 - any library's error: shown in the report
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return ColumnChanges(sink_id, path, (), f"{type(exc).__name__}: {first}")
    return ColumnChanges(sink_id, path, column_counts(counts.items(), TOP))


def _count(path: str, column: str, storage_options: dict[str, str]) -> dict[str, Any]:
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from diffcdc.sinks.delta.feed import files_dataset

    lists = files_dataset(DeltaTable(path, storage_options=storage_options or None),
                          storage_options).to_table(columns=[column]).column(column)
    if lists.num_chunks == 0:
        return {}
    values = pc.value_counts(pc.list_flatten(lists))
    return dict(zip(values.field("values").to_pylist(), values.field("counts").to_pylist()))
