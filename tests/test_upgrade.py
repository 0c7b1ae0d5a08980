"""State and landing folders written by an earlier diffcdc keep working (state formats 1 and 2).

``tests/data/state_format1`` was written by diffcdc at commit 1a945a0, before sinks existed:
table A fully published at version 2; table B with version 2 committed but never published
(the run was killed right after its commit). Today's diffcdc reads those records as records
with one ``open_mirroring`` sink, finishes B's version 2, and continues both tables.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.config import StateCompaction, TableConfig
from diffcdc.engine.plan import RunRequest
from diffcdc.engine.repair import repair_table
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.errors import StateError
from diffcdc.sources.identity import identify
from diffcdc.state.chain import state_chain
from diffcdc.state.commit import LEGACY_SINK_ID
from diffcdc.state.integrity import checksum
from diffcdc.state.store import TableState
from diffcdc.state.verify import check_head, verify_head
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
        assert head.record.format == 3 and head.published
        assert head.record.state_parent == 2  # a delta on the old whole state
        (result,) = verify_table(
            spark, table, state_root, os.path.join(old, "src", name, "2026-11-03.parquet")
        ).values()
        assert result.identical, result.to_dict()


# -- state format 2: every version a whole state (tests/data/state_format2) -------------------

FORMAT2 = os.path.join(os.path.dirname(__file__), "data", "state_format2")


@pytest.fixture
def old2(tmp_path):
    """A copy of the format-2 fixture. Its records name the snapshots by path and file
    identity (inode, ctime) where they were made; a copy has new inodes, so the records are
    pointed at the copies (standing for "the same files, still there") — nothing else changes."""
    root = tmp_path / "old2"
    shutil.copytree(FORMAT2, root)
    log = root / "state" / "A" / "log"
    for name in sorted(os.listdir(log)):
        if not name[:20].isdigit() or name != f"{name[:20]}.json":
            continue
        with open(log / name, encoding="utf-8") as handle:
            record = json.load(handle)
        snapshot = str(root / "src" / "A" / record["snapshot_id"])
        record["snapshot_path"] = snapshot
        record["snapshot_identity"] = [asdict(f) for f in identify(snapshot)]
        with open(log / name, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
    return str(root)


def _table2(root: str) -> TableConfig:
    """Table A of the format-2 fixture; its snapshots here change most rows, so compaction is
    told to wait (every version a delta)."""
    return _table(root, "A").model_copy(update={"state_compaction": StateCompaction(
        max_delta_ratio=100)})


def _snapshot(root: str, name: str, ids, tag: str) -> str:
    schema = pq.read_schema(os.path.join(root, "src", "A", "2026-11-01.parquet"))
    rows = [{"id": i, "name": f"n{i}{tag}", "amount": None, "at": None} for i in ids]
    path = os.path.join(root, "src", "A", name)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def _tree_checksums(folder: str) -> dict[str, str]:
    out = {}
    for where, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(where, name)
            out[os.path.relpath(path, folder)] = checksum(path)
    return out


def test_format2_state_continues_with_deltas_on_it(spark, old2):
    state_root = os.path.join(old2, "state")
    state = TableState(state_root, "A")
    assert [c.record.format for c in state.commits()] == [2, 2, 2]
    assert len(state_chain(state.commits())) == 1  # a whole state: a base
    versions = os.path.join(state_root, "A", "versions")
    before = _tree_checksums(versions)
    table = _table2(old2)
    _snapshot(old2, "2026-11-04.parquet", range(2, 40), "")
    snapshot = _snapshot(old2, "2026-11-05.parquet", [*range(2, 30), 50], "v5")
    report = run_table(spark, table, state_root, RunOptions(quality=PERMISSIVE))
    assert [s.version for s in report.snapshots] == [4, 5] and report.outcome == "ok"
    commits = TableState(state_root, "A").commits()
    assert [(c.record.format, c.record.state_parent) for c in commits[3:]] == [(3, 3), (3, 4)]
    assert [link.version for link in state_chain(commits)] == [3, 4, 5]
    # nothing the earlier diffcdc wrote was rewritten
    after = _tree_checksums(versions)
    assert {k: v for k, v in after.items() if k in before} == before
    assert verify_head(TableState(state_root, "A")).ok
    (result,) = verify_table(spark, table, state_root, snapshot).values()
    assert result.identical, result.to_dict()


def test_rollback_and_repair_across_the_migration(spark, old2):
    """A rollback to a format-2 version after format-3 deltas; a damaged format-2 base under
    deltas refuses the run, and repair rebuilds it from its snapshot."""
    state_root = os.path.join(old2, "state")
    table = _table2(old2)
    _snapshot(old2, "2026-11-04.parquet", range(2, 40), "")
    assert run_table(spark, table, state_root, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    report = run_table(spark, table, state_root,
                       RunOptions(quality=PERMISSIVE, request=RunRequest(rollback_to=2)))
    assert report.outcome == "ok" and [s.version for s in report.snapshots] == [5]
    commits = TableState(state_root, "A").commits()
    assert commits[-1].record.extra["rollback_to"] == 2 and commits[-1].record.state_parent == 4
    two = os.path.join(old2, "src", "A", "2026-11-02.parquet")
    assert check_head(TableState(state_root, "A"), two).ok
    (result,) = verify_table(spark, table, state_root, two).values()
    assert result.identical, result.to_dict()

    # the format-2 base (version 3) loses its data file: refused, then rebuilt
    base = TableState(state_root, "A").abspath(state_chain(commits)[0].path)
    assert state_chain(commits)[0].version == 3
    (part,) = [n for n in os.listdir(base) if n.endswith(".parquet")]
    os.unlink(os.path.join(base, part))
    _snapshot(old2, "2026-11-06.parquet", range(1, 20), "v6")
    with pytest.raises(StateError, match="state version 3 is damaged: the file is missing"):
        run_table(spark, table, state_root, RunOptions(quality=PERMISSIVE))
    repaired = repair_table(spark, table, state_root)
    assert repaired.repaired and repaired.version == 3
    assert verify_head(TableState(state_root, "A")).ok
    assert run_table(spark, table, state_root, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    six = os.path.join(old2, "src", "A", "2026-11-06.parquet")
    (result,) = verify_table(spark, table, state_root, six).values()
    assert result.identical, result.to_dict()


def test_a_history_sink_added_to_state_from_before_as_of_times(spark, old2):
    """Records written before as-of times have none: a history sink added later starts with
    a full image at the first new version and goes on from there."""
    from tests.support.history import as_of, canonical, check_history, history_rows

    state_root = os.path.join(old2, "state")
    assert all(c.record.snapshot_time is None for c in TableState(state_root, "A").commits())
    table = _table2(old2)
    history = os.path.join(old2, "lake", "history")
    table = TableConfig.model_validate({**table.model_dump(), "sinks": [
        *[s.model_dump() for s in table.sinks], {"type": "delta", "name": "history",
                                                 "path": history, "mode": "scd2"}]})
    first = _snapshot(old2, "2026-11-04.parquet", range(2, 40), "")
    second = _snapshot(old2, "2026-11-05.parquet", [*range(2, 30), 50], "v5")
    report = run_table(spark, table, state_root, RunOptions(quality=PERMISSIVE))
    assert [s.version for s in report.snapshots] == [4, 5] and report.outcome == "ok"
    rows = history_rows(history)
    check_history(rows, ["id"])
    for version, path in ((4, first), (5, second)):
        assert canonical(as_of(rows, version)) == canonical(pq.read_table(path).to_pylist())
    assert all(c.record.snapshot_time for c in TableState(state_root, "A").commits()[3:])
