"""State and landing folders written by an earlier diffcdc keep working (state format 1).

``tests/data/state_format1`` was written by diffcdc at commit 1a945a0, before sinks existed:
table A fully published at version 2; table B with version 2 committed but never published
(the run was killed right after its commit). Today's diffcdc reads those records as records
with one ``open_mirroring`` sink, finishes B's version 2, and continues both tables.
"""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.config import TableConfig
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.state.commit import LEGACY_SINK_ID
from diffcdc.state.store import TableState
from tests.support.workspace import PERMISSIVE

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "state_format1")


@pytest.fixture
def old(tmp_path):
    root = tmp_path / "old"
    shutil.copytree(FIXTURE, root)
    return str(root)


def _table(root: str, name: str) -> TableConfig:
    return TableConfig(
        name=name, source=os.path.join(root, "src", name), keys=["id"],
        landing=os.path.join(root, "landing"),
    )


def test_format1_records_read_as_one_landing_sink(old):
    a, b = TableState(os.path.join(old, "state"), "A"), TableState(os.path.join(old, "state"), "B")
    head_a, head_b = a.head(), b.head()
    assert head_a.record.format == 1 and head_a.version == 2 and head_a.published
    assert list(head_a.record.sinks) == [LEGACY_SINK_ID]
    manifest = head_a.record.sinks[LEGACY_SINK_ID].manifest
    assert manifest["sequence"] == {"first": 2, "next": 3} and manifest["landing_folder"] == "A"
    assert head_b.version == 2 and head_b.unpublished == [LEGACY_SINK_ID]


def test_earlier_state_is_finished_and_continued(spark, old):
    state_root = os.path.join(old, "state")
    # B: the committed, unpublished version 2 of the old format is published first
    report = run_table(spark, _table(old, "B"), state_root, RunOptions(quality=PERMISSIVE))
    assert report.resumed_versions == [2] and report.outcome == "ok"
    assert sorted(os.listdir(os.path.join(old, "landing", "B"))) == [
        "00000000000000000001.parquet", "00000000000000000002.parquet", "_metadata.json"]
    # both tables continue with a new snapshot, numbered after the old files
    for name in ("A", "B"):
        rows = [{"id": i, "name": f"new{i}", "amount": None, "at": None} for i in (1, 3, 11)]
        schema = pq.read_schema(os.path.join(old, "src", name, "2026-11-01.parquet"))
        pq.write_table(
            pa.Table.from_pylist(rows, schema=schema),
            os.path.join(old, "src", name, "2026-11-03.parquet"),
        )
        table = _table(old, name)
        report = run_table(spark, table, state_root, RunOptions(quality=PERMISSIVE))
        assert [s.files for s in report.snapshots] == [["00000000000000000003.parquet"]]
        head = TableState(state_root, name).head()
        assert head.record.format == 2 and head.published
        (result,) = verify_table(
            spark, table, state_root, os.path.join(old, "src", name, "2026-11-03.parquet")
        ).values()
        assert result.identical, result.to_dict()
