"""A history made by diffcdc at main's 487cccd (tests/data/history_487cccd: no layout recorded
in its schema, manifests without one) keeps working unchanged, and takes a new layout only
through ``reload --sink``, which rebuilds it with every version kept."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from dataclasses import asdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from diffcdc.config import TableConfig
from diffcdc.engine.plan import RunRequest
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.errors import ConfigError
from diffcdc.sinks.delta.history import table_layout
from diffcdc.sources.identity import identify
from diffcdc.state.store import TableState
from tests.support.history import Names, as_of, canonical, check_history, history_rows
from tests.support.workspace import PERMISSIVE

pytestmark = pytest.mark.slow
FIXTURE = os.path.join(os.path.dirname(__file__), "data", "history_487cccd")
UTC = dt.timezone.utc


@pytest.fixture
def made(tmp_path):
    """A copy of the fixture, its records pointed at the copied snapshots (as test_upgrade's
    format-2 fixture: the same files, still there)."""
    root = tmp_path / "made"
    shutil.copytree(FIXTURE, root)
    log = root / "state" / "A" / "log"
    for name in sorted(os.listdir(log)):
        if name != f"{name[:20]}.json" or not name[:20].isdigit():
            continue
        with open(log / name, encoding="utf-8") as handle:
            record = json.load(handle)
        snapshot = str(root / "src" / "A" / record["snapshot_id"])
        record["snapshot_path"] = snapshot
        record["snapshot_identity"] = [asdict(f) for f in identify(snapshot)]
        with open(log / name, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
    return str(root)


def _table(root: str, **settings) -> TableConfig:
    return TableConfig(name="A", source=os.path.join(root, "src", "A"), keys=["id"],
                       snapshot_time="id:%Y-%m-%d",
                       sinks=[{"type": "delta", "name": "history", "mode": "scd2",
                               "path": os.path.join(root, "lake", "history"), **settings}])


def _snapshot(root: str, day: str, rows: list[tuple]) -> None:
    schema = pq.read_schema(os.path.join(root, "src", "A", "2026-11-01.parquet"))
    pq.write_table(pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema),
                   os.path.join(root, "src", "A", f"{day}.parquet"))


def _exact(root: str, names: Names) -> list[dict]:
    rows = history_rows(os.path.join(root, "lake", "history"))
    check_history(rows, ["id"], names=names)
    for commit in TableState(os.path.join(root, "state"), "A").commits():
        snapshot = pq.read_table(commit.record.snapshot_path).to_pylist()
        assert canonical(as_of(rows, commit.version, names)) == canonical(snapshot), commit.version
    return rows


def test_a_history_from_before_layouts_goes_on_unchanged(spark, made):
    state = os.path.join(made, "state")
    assert all("layout" not in c.record.sinks["history"].manifest
               for c in TableState(state, "A").commits())
    path = os.path.join(made, "lake", "history")
    assert not any(f.metadata for f in DeltaTable(path).schema().fields)  # nothing recorded
    _exact(made, Names())
    _snapshot(made, "2026-11-04", [(1, "n1", 11), (3, "n3b", 30), (8, "n8", None)])
    report = run_table(spark, _table(made), state, RunOptions(quality=PERMISSIVE))
    assert report.outcome == "ok" and report.snapshots[0].version == 4
    _exact(made, Names())
    assert table_layout(DeltaTable(path)) == _table(made).sinks[0].history_layout()


def test_a_history_from_before_layouts_takes_a_new_one_only_by_a_reload(spark, made):
    state = os.path.join(made, "state")
    path = os.path.join(made, "lake", "history")
    settings = {"deletes": "row", "history_columns": {"valid_from": "dbt_valid_from",
                                                      "valid_to": "dbt_valid_to"},
                "open_end": {"valid_to": "9999-12-31T00:00:00Z"}}
    names = Names(valid_from="dbt_valid_from", valid_to="dbt_valid_to", deleted="__DELETED",
                  open_valid_to=dt.datetime(9999, 12, 31, tzinfo=UTC))
    table = _table(made, **settings)
    _snapshot(made, "2026-11-04", [(1, "n1", 11), (3, "n3b", 30), (8, "n8", None)])
    delta_version = DeltaTable(path).version()
    with pytest.raises(ConfigError, match="an existing history keeps its layout") as refused:
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    assert "diffcdc reload --table A --sink history --yes" in str(refused.value)
    assert TableState(state, "A").head().version == 3
    assert DeltaTable(path).version() == delta_version
    report = run_table(spark, table, state, RunOptions(quality=PERMISSIVE, request=RunRequest(
        reload=True, reload_sinks=("history",))))
    # the reload's full image is the pending snapshot, version 4
    assert report.outcome == "ok" and [v.version for v in report.snapshots] == [4]
    rows = _exact(made, names)
    # the deletes main's history recorded as gaps are tombstones now: 2 at version 2 (back at
    # 3), 4 at version 3 (never back); then the image's: 2, 5, 6, 7 at version 4
    tombs = sorted((r["id"], r["__START_AT"], r["__END_AT"]) for r in rows if r["__DELETED"])
    assert tombs == [(2, 2, 3), (2, 4, None), (4, 3, None), (5, 4, None), (6, 4, None),
                     (7, 4, None)]
    _snapshot(made, "2026-11-05", [(1, "n1", 12), (4, "n4", 40)])  # 4 back, 3 and 8 deleted
    assert run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    _exact(made, names)
    assert table_layout(DeltaTable(path)) == table.sinks[0].history_layout()
