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
from tests.support.sink_kinds import KINDS, SinkKind, history_once

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


def _once(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
    history_once(state, sink_id, NAMES)


HISTORY_DBT = SinkKind("history_dbt", "delta", _entry, _once, ("delta_committed@history_dbt",))
#: Every sink kind, and the history with the layout beside them.
WITH_LAYOUT = [*KINDS, HISTORY_DBT]
