"""The history sink with a layout of its own (issue 41 items 2 and 3) as a contract sink kind:
deletes as tombstone rows, every metadata column renamed, both open-end sentinels. It runs
beside every kind of tests/support/sink_kinds.py (which the layout does not touch) on one
table; its own check is the independent history checker with the config's names."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from diffcdc.state.store import TableState
from tests.support.history import Names
from tests.support.sink_kinds import KINDS, SinkKind

MAX = 9223372036854775807
FAR = "9999-12-31T00:00:00Z"
#: The layout: dbt's names, a tombstone flag, both sentinels.
SETTINGS: dict[str, Any] = {
    "deletes": "row",
    "history_columns": {"start_at": "dbt_version_from", "end_at": "dbt_version_to",
                        "valid_from": "dbt_valid_from", "valid_to": "dbt_valid_to",
                        "changed_columns": "dbt_changed_columns", "deleted": "dbt_is_deleted"},
    "open_end": {"valid_to": FAR, "end_at": MAX},
}
NAMES = Names("dbt_version_from", "dbt_version_to", "dbt_valid_from", "dbt_valid_to",
              "dbt_changed_columns", "dbt_is_deleted", MAX,
              dt.datetime(9999, 12, 31, tzinfo=dt.timezone.utc))


def _entry(root: str, servers: dict[str, Any]) -> dict[str, Any]:
    return {"type": "delta", "name": "history_dbt", "path": os.path.join(root, "lake", "dbt"),
            "mode": "scd2", **SETTINGS}


def history_once(state: TableState, sink_id: str, names: Names) -> None:
    """One Delta commit per diffcdc version with changes since the sink's last full image; the
    history's rules hold (tombstones, names, sentinels), and as of every version since that
    image it is exactly that version's snapshot."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from tests.support.history import as_of, canonical, check_history, history_rows

    commits = state.commits()
    manifest = commits[-1].record.sinks[sink_id].manifest
    tagged = [h.get("diffcdc.version") for h in DeltaTable(manifest["target"]).history()
              if "diffcdc.version" in h]
    start = max(c.version for c in commits
                if sink_id in c.record.sinks and c.record.sinks[sink_id].manifest.get("initial"))
    with_rows = [str(c.version) for c in commits if c.version >= start
                 and c.record.sinks[sink_id].manifest.get("rows")]
    assert sorted(tagged, key=int)[-len(with_rows):] == with_rows, (tagged, with_rows)
    rows = history_rows(manifest["target"])
    check_history(rows, commits[-1].record.keys, names=names)
    for commit in commits:  # (a DataFrame's snapshot is no file)
        if commit.version >= start and os.path.exists(commit.record.snapshot_path or ""):
            data = pq.read_table(commit.record.snapshot_path)
            then = as_of(rows, commit.version, names)
            later = {c for r in then for c in r} - set(data.column_names)
            assert all(r[c] is None for r in then for c in later), commit.version
            assert canonical(then, data.column_names) == canonical(data.to_pylist()), (
                commit.version)


def _once(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
    history_once(state, sink_id, NAMES)


HISTORY_DBT = SinkKind("history_dbt", "delta", _entry, _once, ("delta_committed@history_dbt",))
#: Every sink kind, and the history with the layout beside them.
WITH_LAYOUT = [*KINDS, HISTORY_DBT]
