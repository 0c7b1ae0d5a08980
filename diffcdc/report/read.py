"""The IO of ``diffcdc report``: read each table's state (and the Delta tables that keep
changed-column lists), write the HTML file."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from diffcdc import __version__
from diffcdc.report.columns import DeltaPlace, changed_columns
from diffcdc.report.gather import table_view
from diffcdc.report.model import ColumnChanges, Report, TableView
from diffcdc.state.records import now_iso, sink_chain
from diffcdc.state.root import StateRoot
from diffcdc.state.store import TableState

#: The newest versions and run reports shown per table by default (a report over 500 tables
#: stays a few MB).
LAST = 60

#: Per table (its state folder name), per sink id: where a configured Delta sink's tables are.
Places = Mapping[str, Mapping[str, DeltaPlace]]


def read_report(state_root: StateRoot, entries: Sequence[Mapping[str, Any]], *,
                last: int = LAST, places: Places | None = None) -> Report:
    """The report of the tables ``entries`` (``status --json``'s entries, in its order);
    ``places``: the configured Delta sinks' tables (default: where the head commit says)."""
    tables = tuple(_table(state_root, entry, last, (places or {}).get(str(entry["table"]), {}))
                   for entry in entries)
    return Report(state=str(state_root.location), generated_at=now_iso(),
                  diffcdc_version=__version__, last=last, tables=tables)


def _table(state_root: StateRoot, entry: Mapping[str, Any], last: int,
           places: Mapping[str, DeltaPlace]) -> TableView:
    state = TableState(state_root, str(entry["table"]))
    commits = state.commits()
    columns: list[ColumnChanges] = []
    if commits:
        since = commits[-last:][0].version  # the versions the report shows
        for sink_id, sink in commits[-1].record.sinks.items():
            published = any(sink_id in c.published_sinks for c in sink_chain(commits, sink_id))
            found = changed_columns(sink_id, sink, places.get(sink_id), since, read=published)
            if found is not None:
                columns.append(found)
    return table_view(entry, commits, state.reports.newest(last), columns, last)


def write_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a new file beside it, then renamed)."""
    temp = os.path.join(os.path.dirname(os.path.abspath(path)),
                        f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(temp, "x", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
