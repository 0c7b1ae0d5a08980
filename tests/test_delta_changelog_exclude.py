"""The Delta sink's change log lists an update's changed columns without the columns the table
excluded when the version was staged, not when it is published (as the history sinks compare
a version; found by the tracked-columns attack of issue 42)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from diffcdc.config import TableConfig
from diffcdc.sinks.delta.feed import plain_types
from diffcdc.state.store import TableState
from tests.support.killed_runs import killed_at
from tests.support.workspace import Workspace

pytestmark = pytest.mark.slow
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("note", pa.string())])


def test_a_version_published_after_exclude_changed_lists_the_columns_it_was_staged_with(
        spark, tmp_path):
    """Version 2 (key 1: ``name`` and ``note`` changed) is killed after the Delta commit,
    before its change log append; then ``note`` is excluded. The next run appends version 2
    listing ``["name", "note"]`` (``note`` was compared when it was staged): it listed
    ``["name"]``."""
    root = str(tmp_path)
    ws = Workspace(root)
    sinks = [{"type": "delta", "name": "delta", "path": f"{root}/lake/t",
              "changelog_path": f"{root}/lake/log"}]
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=sinks)
    ws.write("1.parquet", [{"id": 1, "name": "a", "note": "x"},
                           {"id": 2, "name": "b", "note": "x"}], SCHEMA)
    ws.run(spark)
    ws.write("2.parquet", [{"id": 1, "name": "a2", "note": "y"},
                           {"id": 2, "name": "b", "note": "x"}], SCHEMA)
    killed_at(ws.table, ws.state, root, "delta_committed@delta")
    assert TableState(ws.state, "T").head().unpublished == ["delta"]
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=sinks,
                           exclude=["note"])
    ws.run(spark)
    log = plain_types(DeltaTable(f"{root}/lake/log").to_pyarrow_table()).to_pylist()
    got = sorted((r["_diffcdc_version"], r["_change_type"], r["id"], r["__CHANGED_COLUMNS"])
                 for r in log if r["_diffcdc_version"] == 2)
    assert got == [(2, "update_postimage", 1, ["name", "note"]),
                   (2, "update_preimage", 1, None)]
