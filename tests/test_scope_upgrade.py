"""A table whose state and landing zone were written by diffcdc before scopes (main at 487cccd:
``tests/data/state_main487``, table A keyed by ``id``, a base and a delta, regions ``eu``, ``us``
and NULL; made by running two snapshots through that commit's ``run_table``) goes on unchanged
without a scope, and with a scope added deletes nothing it cannot show to be in scope."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.config import TableConfig
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.engine.verify import verify_sinks, verify_table
from diffcdc.sinks.registry import build_sink
from diffcdc.sources.identity import identify
from diffcdc.state.store import TableState
from diffcdc.state.verify import verify_head
from tests.support.workspace import PERMISSIVE

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "state_main487")
#: Where the fixture was made; its records name paths under it.
MADE_AT = "/tmp/s4S/fixture_root"
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.string())])
#: The table as version 2 left it: ids 1-12, region by id % 3, id 1 updated.
REGIONS = ["eu", "us", None]
IMAGE = {i: (REGIONS[i % 3], f"v{i}" + ("*" if i < 2 else "")) for i in range(1, 13)}


@pytest.fixture
def old(tmp_path):
    """A copy of the fixture, its records pointed at the copy (paths and file identities)."""
    root = str(tmp_path / "old")
    shutil.copytree(FIXTURE, root)
    log = os.path.join(root, "state", "A", "log")
    for name in sorted(os.listdir(log)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(log, name), encoding="utf-8") as handle:
            text = handle.read().replace(MADE_AT, root)
        record = json.loads(text)
        if name == f"{name[:20]}.json" and name[:20].isdigit():
            snapshot = os.path.join(root, "src", "A", record["snapshot_id"])
            record["snapshot_identity"] = [asdict(f) for f in identify(snapshot)]
        with open(os.path.join(log, name), "w", encoding="utf-8") as handle:
            json.dump(record, handle)
    return root


def _table(root: str, scope: dict | None) -> TableConfig:
    return TableConfig(name="A", source=os.path.join(root, "src", "A"), keys=["id"],
                       landing=os.path.join(root, "landing"), scope=scope)


def _snapshot(root: str, name: str, rows: dict) -> str:
    path = os.path.join(root, "src", "A", name)
    pq.write_table(pa.Table.from_pylist(
        [{"id": i, "region": r, "v": v} for i, (r, v) in sorted(rows.items())], SCHEMA), path)
    return path


def _assert_image(spark, root: str, table: TableConfig, image: dict) -> None:
    path = _snapshot(root, "../expected.parquet", image)
    state = TableState(os.path.join(root, "state"), "A")
    sinks = {c.sink_id: build_sink(c, table.sink_table(), state) for c in table.sinks}
    try:
        (result,) = verify_sinks(spark, sinks, path).values()
    finally:
        for sink in sinks.values():
            sink.close()
    assert result.identical, result.to_dict()


def test_state_from_before_scopes_goes_on_without_one(spark, old):
    table = _table(old, None)
    rows = {i: v for i, v in IMAGE.items() if i != 3}
    path = _snapshot(old, "2026-11-03.parquet", rows)
    (result,) = run_table(spark, table, os.path.join(old, "state"),
                          RunOptions(quality=PERMISSIVE)).snapshots
    assert (result.deleted, result.kept) == (1, 0)
    head = TableState(os.path.join(old, "state"), "A").head().record
    assert head.scope is None and "scope" not in head.to_dict()
    (check,) = verify_table(spark, table, os.path.join(old, "state"), path).values()
    assert check.identical, check.to_dict()


def test_a_scope_added_to_state_from_before_deletes_nothing_it_cannot_show_in_scope(spark, old):
    table = _table(old, {"columns": ["region"]})
    state = os.path.join(old, "state")
    said: list[str] = []
    # eu only, without eu key 3: its region is not in the old state, so it is kept
    eu = {i: v for i, v in IMAGE.items() if v[0] == "eu" and i != 3}
    _snapshot(old, "2026-11-03.parquet", eu)
    options = RunOptions(quality=PERMISSIVE, progress=said.append)
    (result,) = run_table(spark, table, state, options).snapshots
    assert (result.deleted, result.kept) == (0, 12 - len(eu))
    head = TableState(state, "A").head().record
    assert head.scope is not None and head.scope.unknown == 12 - len(eu)
    assert head.state_parent is None  # the scope's columns are new: a whole state
    assert any("scope values not known yet" in line for line in said), said
    _assert_image(spark, old, table, IMAGE)
    # eu again without key 6, which the last snapshot held (eu): deleted; 3 still kept
    eu2 = {i: v for i, v in eu.items() if i != 6}
    _snapshot(old, "2026-11-04.parquet", eu2)
    (result,) = run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).snapshots
    assert (result.deleted, result.kept) == (1, 12 - len(eu))
    _assert_image(spark, old, table, {i: v for i, v in IMAGE.items() if i != 6})
    assert verify_head(TableState(state, "A")).ok
