"""State written by diffcdc before normalizers (main at 487cccd, tests/data/state_main_487cccd)
keeps working (issue 41.4): without normalizers it continues as it did (deltas, no
re-fingerprint); normalizers added later re-fingerprint it once (a base, no mass update) and
then decide, with verify and ``verify --state`` agreeing."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.config import StateCompaction, TableConfig
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.sources.identity import identify
from diffcdc.state.store import TableState
from diffcdc.state.verify import verify_head
from tests.support.workspace import PERMISSIVE

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "state_main_487cccd")


@pytest.fixture
def old(tmp_path):
    """A copy of the fixture, its records pointed at the copies of its snapshots and landing
    zone (standing for "the same files, still there") — nothing else changes."""
    root = tmp_path / "old"
    shutil.copytree(FIXTURE, root)
    log = root / "state" / "A" / "log"
    for name in sorted(os.listdir(log)):
        if name != f"{name[:20]}.json" or not name[:20].isdigit():
            continue
        record = json.loads((log / name).read_text(encoding="utf-8"))
        snapshot = str(root / "src" / "A" / record["snapshot_id"])
        record["snapshot_path"] = snapshot
        record["snapshot_identity"] = [asdict(f) for f in identify(snapshot)]
        record["sinks"]["open_mirroring"]["manifest"]["landing"] = str(root / "landing")
        (log / name).write_text(json.dumps(record), encoding="utf-8")
    return str(root)


def _table(root: str, normalize: dict | None = None) -> TableConfig:
    return TableConfig(name="A", source=os.path.join(root, "src", "A"), keys=["id"],
                       exclude=["audit"], landing=os.path.join(root, "landing"),
                       normalize=normalize or {},
                       state_compaction=StateCompaction(max_delta_ratio=100))


def _snapshot(root: str, name: str, rows: list[dict]) -> str:
    schema = pq.read_schema(os.path.join(root, "src", "A", "1.parquet"))
    path = os.path.join(root, "src", "A", name)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def _rows(changed: tuple[int, ...], case=str.upper, pad: int = 10) -> list[dict]:
    return [{"id": i, "code": (case(f"c{i:03d}") + ("x" if i in changed else "")).ljust(pad),
             "amount": i * 1.25, "audit": f"run {pad}"} for i in range(6)]


def test_state_from_before_normalizers_continues_and_takes_them_later(spark, old):
    state_root = os.path.join(old, "state")
    commits = TableState(state_root, "A").commits()
    assert [(c.record.format, c.record.state_parent) for c in commits] == [(3, None), (3, 1)]
    assert all("normalize" not in c.record.to_dict() or not c.record.normalize for c in commits)
    # without normalizers: as before (a delta, no re-fingerprint)
    _snapshot(old, "3.parquet", _rows((1, 2)))
    (result,) = run_table(spark, _table(old), state_root, RunOptions(quality=PERMISSIVE)).snapshots
    assert (result.updated, result.refingerprinted) == (1, None)
    assert TableState(state_root, "A").head().record.state_parent == 2
    # normalizers added: one re-fingerprint (spelled as before, one real change)
    rules = {"code": ["rtrim", "casefold"]}
    _snapshot(old, "4.parquet", _rows((1, 2, 3)))
    (result,) = run_table(spark, _table(old, rules), state_root,
                          RunOptions(quality=PERMISSIVE)).snapshots
    assert result.updated == 1 and result.refingerprinted is not None
    head = TableState(state_root, "A").head()
    assert head.record.state_parent is None and head.record.normalize.to_record() == rules
    # then they decide: lower case, other padding, another audit text: nothing changed
    five = _snapshot(old, "5.parquet", _rows((1, 2, 3), case=str.lower, pad=4))
    (result,) = run_table(spark, _table(old, rules), state_root,
                          RunOptions(quality=PERMISSIVE)).snapshots
    assert (result.inserted, result.updated, result.deleted, result.refingerprinted) == (
        0, 0, 0, None)
    assert verify_head(TableState(state_root, "A")).ok
    (checked,) = verify_table(spark, _table(old, rules), state_root, five,
                              ignore=["audit"]).values()
    assert checked.identical, checked.to_dict()
