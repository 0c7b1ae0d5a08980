"""The quality gate inside a run: every refusal publishes nothing, keeps state, exits 3."""

from __future__ import annotations

import os

import pytest

from diffcdc.core.quality_config import ExpectationSpec, QualityConfig
from diffcdc.errors import QualityGateFailed
from diffcdc.state.store import TableState
from tests.support.workspace import Workspace


def small(**fields) -> QualityConfig:
    """Gate settings whose ratio checks apply to these tables of about 100 rows."""
    return QualityConfig(min_rows_for_ratios=0, **fields)


def people(n: int, start: int = 0, region: str = "eu") -> list[dict]:
    return [{"region": region, "id": i, "age": 20 + i % 50} for i in range(start, start + n)]


def refuse_then_recover(spark, ws, bad_rows, good_rows, quality, check):
    before = ws.snapshot_state()
    files = ws.data_files()
    ws.write("2.parquet", bad_rows)
    with pytest.raises(QualityGateFailed) as err:
        ws.run(spark, quality=quality)
    message = str(err.value)
    assert err.value.exit_code == 3 and check in message and "2.parquet" in message
    assert "\n" not in message
    assert ws.data_files() == files and ws.snapshot_state() == before
    report = TableState(ws.state, ws.table.name).reports.last()
    assert report["outcome"] == "failed" and report["refused_gate"]
    failed = [c["name"] for s in report["refused_gate"] for c in s["checks"] if not c["passed"]]
    assert any(name == check or name.startswith(check + ":") for name in failed)
    ws.write("2.parquet", good_rows)  # the fixed extract replaces the bad one
    assert ws.run(spark, quality=quality).outcome == "ok"
    ws.assert_mirror_equals(spark, "2.parquet")
    return message


@pytest.fixture
def ws(spark, tmp_path):
    ws = Workspace(str(tmp_path), keys=("region", "id"))
    ws.write("1.parquet", people(100))
    ws.run(spark, quality=small())
    return ws


def test_empty_snapshot_refused(spark, ws):
    import pyarrow as pa
    import pyarrow.parquet as pq

    empty = pa.Table.from_pylist(people(1)).slice(0, 0)
    refuse_then_recover(spark, ws, empty, people(100), small(), "not_empty")
    pq.write_table(empty, os.path.join(ws.source, "3.parquet"))
    assert ws.run(spark, quality=small(allow_empty=True, max_delete_ratio=None,
                                               min_row_ratio=None)).snapshots[0].deleted == 100


def test_truncated_snapshot_refused_by_row_ratio(spark, ws):
    message = refuse_then_recover(spark, ws, people(49), people(100), small(), "row_count_ratio")
    assert "0.49" in message


def test_delete_ratio_at_and_over_the_threshold(spark, ws):
    refuse_then_recover(spark, ws, people(79), people(80), small(), "delete_ratio")
    assert ws.run(spark, quality=small()).outcome == "nothing to do"


def test_change_ratio_when_configured(spark, ws):
    changed = [{**r, "age": r["age"] + 1} for r in people(100)]
    cfg = small(max_change_ratio=0.1)
    refuse_then_recover(spark, ws, changed, changed[:10] + people(90, start=10), cfg, "change_ratio")


def test_null_in_one_composite_key_column(spark, ws):
    bad = people(100)
    bad[3]["region"] = None
    message = refuse_then_recover(spark, ws, bad, people(100), small(), "keys_not_null")
    assert "1" in message


def test_duplicate_composite_keys_with_sample(spark, ws):
    message = refuse_then_recover(spark, ws, people(100) + people(1, start=7), people(100),
                                  small(), "keys_unique")
    assert "7" in message
    assert "--override-check" not in message and "keys_unique cannot be overridden" in message


def test_user_expectations_blocking_and_warn_only(spark, ws):
    blocking = small(expectations=[ExpectationSpec(
        type="expect_column_values_to_be_between", kwargs={"column": "age", "min_value": 0, "max_value": 120})])
    bad = people(100)
    bad[5]["age"] = 999
    message = refuse_then_recover(spark, ws, bad, people(100), blocking,
                                  "expect_column_values_to_be_between")
    assert (f"--override-check {ws.table.name}:expect_column_values_to_be_between:age"
            in message), message
    warn = small(expectations=[ExpectationSpec(
        type="expect_column_values_to_be_between", blocking=False,
        kwargs={"column": "age", "min_value": 0, "max_value": 120})])
    ws.write("3.parquet", bad)
    snapshot = ws.run(spark, quality=warn).snapshots[0]
    assert snapshot.updated == 1
    checks = [c for stage in snapshot.gate for c in stage["checks"]]
    assert any(c["name"].startswith("expect_column_values_to_be_between") and not c["passed"] for c in checks)


def test_override_lets_one_check_pass_once(spark, ws):
    ws.write("2.parquet", people(50))
    with pytest.raises(QualityGateFailed):
        ws.run(spark, quality=small(min_row_ratio=None))
    report = ws.run(spark, quality=small(min_row_ratio=None), overrides=frozenset({"delete_ratio"}))
    assert report.overrides == ["delete_ratio"] and report.snapshots[0].deleted == 50


def test_ratios_leave_small_tables_alone_by_default(spark, ws):
    """Half of a 100-row table deleted: an ordinary night there, not a refusal."""
    ws.write("2.parquet", people(50))
    report = ws.run(spark, quality=QualityConfig())
    assert report.outcome == "ok" and report.snapshots[0].deleted == 50
    ws.assert_mirror_equals(spark, "2.parquet")


def test_a_refusal_names_the_exact_override(spark, ws):
    message = refuse_then_recover(spark, ws, people(79), people(80), small(), "delete_ratio")
    assert message.endswith(f"with: --override-check {ws.table.name}:delete_ratio"), message
