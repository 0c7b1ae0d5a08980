"""Issue 38 for the Delta sinks (second part): a Delta table this state never wrote at a sink's
path (another tool's, another diffcdc state's) is refused, also when it appears between the
check and the publish; two states on one Delta path; verify of dates before year 1 and after
9999."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from diffcdc.config import TableConfig
from diffcdc.engine.verify import verify_table
from tests.support.workspace import Workspace

pytestmark = pytest.mark.slow


def _ws(root: str, sinks: list[dict]) -> Workspace:
    ws = Workspace(root, keys=("id",))
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=sinks)
    return ws


def _far_dates(shift_days: int = 0, tag: str = "a") -> pa.Table:
    return pa.table({
        "id": pa.array([1, 2, 3], pa.int64()),
        "d": pa.array([0, 3_000_000 + shift_days, -800_000], pa.date32()),
        "v": [f"{tag}1", f"{tag}2", f"{tag}3"],
    })


def test_verify_of_delta_sinks_holding_dates_before_year_1_and_after_9999(spark, tmp_path):
    lake = tmp_path / "lake"
    ws = _ws(str(tmp_path), [
        {"type": "delta", "name": "delta", "path": str(lake / "t")},
        {"type": "delta", "name": "history", "path": str(lake / "h"), "mode": "scd2"},
    ])
    ws.write("1.parquet", _far_dates())
    assert ws.run(spark).outcome == "ok"
    ws.write("2.parquet", _far_dates(tag="b"))  # the history reads its open rows back
    assert ws.run(spark).outcome == "ok"
    snapshot = os.path.join(ws.source, "2.parquet")
    results = verify_table(spark, ws.table, ws.state, snapshot)
    assert all(r.identical for r in results.values()), {k: r.to_dict() for k, r in results.items()}
    other = ws.write("other.parquet", _far_dates(shift_days=1, tag="b"))
    os.replace(other, str(tmp_path / "other.parquet"))
    results = verify_table(spark, ws.table, ws.state, str(tmp_path / "other.parquet"))
    for sink_id, result in results.items():
        assert not result.identical and result.missing == [2] and result.unexpected == [2], (
            sink_id, result.to_dict())
