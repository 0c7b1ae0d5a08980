"""The data-quality gate: built-in checks at their thresholds, GX suites, overrides, reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from diffcdc.core.quality import (
    ChangeCounts,
    SnapshotStats,
    check_names,
    compute_snapshot_stats,
    gate_changes,
    gate_snapshot,
    snapshot_stats_exprs,
    validate_overrides,
)
from diffcdc.core.quality_config import QualityConfig
from diffcdc.core.quality_report import CheckResult, GateReport
from diffcdc.engine.gate import read_suite
from diffcdc.errors import ConfigError, QualityGateFailed

DATA = Path(__file__).parent / "data" / "quality"
KEYS = ["region", "id"]
SCHEMA = "region string, id int, amount double, status string"
CLEAN = [("eu", 1, 10.0, "open"), ("eu", 2, 20.0, "closed"), ("us", 1, 30.0, "open")]


def check(report: GateReport, name: str) -> CheckResult:
    (found,) = [c for c in report.checks if c.name == name]
    return found


@pytest.fixture(scope="module")
def clean(spark):
    return spark.createDataFrame(CLEAN, SCHEMA)


# --- config ---------------------------------------------------------------------------------


def test_config_defaults_merge_and_validation():
    cfg = QualityConfig()
    assert (cfg.min_row_ratio, cfg.max_row_ratio, cfg.max_delete_ratio) == (0.5, 2.0, 0.2)
    assert cfg.max_change_ratio is None and cfg.allow_empty is False
    global_cfg = QualityConfig(max_delete_ratio=0.1, allow_empty=True)
    table = QualityConfig(max_delete_ratio=0.5)  # only explicitly set fields override
    merged = global_cfg.merged(table)
    assert (merged.max_delete_ratio, merged.allow_empty) == (0.5, True)
    assert global_cfg.merged({"min_row_ratio": None}).min_row_ratio is None
    assert global_cfg.merged(None) is global_cfg
    for bad in ({"max_delete_ratio": -1}, {"bogus": 1}, {"min_row_ratio": 3.0},
                {"expectations": [{"type": "not_an_expectation"}]}):
        with pytest.raises(ValidationError):
            QualityConfig.model_validate(bad)
    for name, field in QualityConfig.model_fields.items():
        assert field.description, f"{name} has no field docstring"


# --- built-in snapshot checks -----------------------------------------------------------------


def test_stats_exprs_combine_with_other_aggregates(spark):
    from pyspark.sql import functions as F

    rows = CLEAN + [("eu", None, 1.0, "open"), (None, None, 1.0, "open"),
                    ("eu", 1, 99.0, "open"), ("eu", 1, 98.0, "open")]
    df = spark.createDataFrame(rows, SCHEMA)
    row = df.agg(*snapshot_stats_exprs(KEYS), F.sum("amount").alias("total")).collect()[0]
    assert SnapshotStats.from_row(row) == SnapshotStats(rows=7, null_keys=2, duplicate_keys=2)
    assert row["total"] == pytest.approx(259.0)
    assert compute_snapshot_stats(df, ["id"]) == SnapshotStats(7, 2, 3)


def test_clean_snapshot_passes_every_check(clean):
    report = gate_snapshot(clean, keys=KEYS, previous_rows=3, cfg=QualityConfig())
    assert report.passed and report.stage == "snapshot"
    assert [c.name for c in report.checks] == [
        "keys_present", "keys_not_null", "keys_unique", "not_empty", "row_count_ratio"]
    assert all(c.passed and not c.overridden for c in report.checks)
    report.raise_if_failed("orders", "s1")  # no error


def test_keys_present_fails_on_missing_key_column(clean):
    report = gate_snapshot(clean, keys=["region", "order_no"], previous_rows=3,
                           cfg=QualityConfig())
    missing = check(report, "keys_present")
    assert not missing.passed and missing.blocks and missing.observed == ["order_no"]
    assert check(report, "keys_unique").detail.startswith("skipped")
    assert [c.name for c in report.failed_blocking] == ["keys_present"]


def test_keys_not_null_composite_key_null_in_one_column(spark):
    df = spark.createDataFrame(CLEAN + [("eu", None, 1.0, "open"), ("us", None, 2.0, "open")],
                               SCHEMA)
    report = gate_snapshot(df, keys=KEYS, previous_rows=5, cfg=QualityConfig())
    nulls = check(report, "keys_not_null")
    assert (nulls.passed, nulls.observed, nulls.threshold) == (False, 2, 0)
    assert nulls.sample_keys == [{"region": "eu", "id": None}, {"region": "us", "id": None}]
    # one NULL key column is not a duplicate of the other: ("eu", NULL) twice is two NULL keys
    assert check(report, "keys_unique").passed


def test_keys_unique_composite_duplicates_sampled_at_most_five(spark):
    dupes = [(r, i, 1.0, "open") for r in ("eu", "us") for i in range(1, 5)]
    df = spark.createDataFrame(CLEAN + dupes + [("eu", 1, 5.0, "open")], SCHEMA)
    report = gate_snapshot(df, keys=KEYS, previous_rows=12, cfg=QualityConfig())
    unique = check(report, "keys_unique")
    assert not unique.passed and unique.observed == 4  # computed here: rows beyond the first
    assert unique.sample_keys == [{"region": "eu", "id": 1}, {"region": "eu", "id": 2},
                                  {"region": "us", "id": 1}]
    many = spark.createDataFrame([("eu", i, 1.0, "x") for i in range(8)] * 2, SCHEMA)
    sample = check(gate_snapshot(many, keys=KEYS, previous_rows=16, cfg=QualityConfig()),
                   "keys_unique").sample_keys
    assert sample == [{"region": "eu", "id": i} for i in range(5)]


def test_key_names_with_dots_resolve_case_insensitively(spark):
    df = spark.createDataFrame([("a", 1), ("a", 1), (None, 2)], "`Order.No` string, Line int")
    report = gate_snapshot(df, keys=["order.no", "line"], previous_rows=3, cfg=QualityConfig())
    assert check(report, "keys_present").passed
    assert check(report, "keys_unique").sample_keys == [{"Order.No": "a", "Line": 1}]
    assert check(report, "keys_not_null").sample_keys == [{"Order.No": None, "Line": 2}]


def test_given_stats_are_used_and_samples_only_on_failure(clean):
    # The stats claim problems the DataFrame does not have: the gate trusts the stats (no
    # recount) and samples offending keys from the DataFrame only because a check failed.
    report = gate_snapshot(clean, keys=KEYS, previous_rows=3, cfg=QualityConfig(),
                           stats=SnapshotStats(rows=3, null_keys=1, duplicate_keys=0))
    assert check(report, "keys_not_null").observed == 1
    assert check(report, "keys_not_null").sample_keys == []
    ok = gate_snapshot(clean, keys=KEYS, previous_rows=3, cfg=QualityConfig(),
                       stats=SnapshotStats(rows=3, null_keys=0, duplicate_keys=0))
    assert ok.passed


@pytest.mark.parametrize(
    ("previous", "allow_empty", "passed"),
    [(10, False, False), (0, False, True), (None, False, True), (10, True, True)],
)
def test_not_empty(spark, previous, allow_empty, passed):
    empty = spark.createDataFrame([], SCHEMA)
    cfg = QualityConfig(allow_empty=allow_empty, min_row_ratio=None)
    report = gate_snapshot(empty, keys=KEYS, previous_rows=previous, cfg=cfg,
                           stats=SnapshotStats(0, 0, 0))
    assert check(report, "not_empty").passed is passed
    assert report.passed is passed


@pytest.mark.parametrize(
    ("rows", "passed"), [(50, True), (49, False), (200, True), (201, False), (100, True)]
)
def test_row_count_ratio_at_thresholds(clean, rows, passed):
    report = gate_snapshot(clean, keys=KEYS, previous_rows=100, cfg=QualityConfig(min_rows_for_ratios=0),
                           stats=SnapshotStats(rows, 0, 0))
    ratio = check(report, "row_count_ratio")
    assert (ratio.passed, ratio.observed, ratio.threshold) == (passed, rows / 100, [0.5, 2.0])


def test_row_count_ratio_skipped_without_previous_or_threshold(clean):
    first = gate_snapshot(clean, keys=KEYS, previous_rows=None, cfg=QualityConfig(),
                          stats=SnapshotStats(3, 0, 0))
    assert check(first, "row_count_ratio").passed
    off = QualityConfig(min_row_ratio=None, max_row_ratio=None)
    report = gate_snapshot(clean, keys=KEYS, previous_rows=1000, cfg=off,
                           stats=SnapshotStats(3, 0, 0))
    assert check(report, "row_count_ratio").detail.startswith("skipped")


# --- built-in change checks -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("deleted", "threshold", "passed"),
    [(20, 0.2, True), (21, 0.2, False), (30, 0.3, True), (31, 0.3, False), (0, 0.0, True)],
)
def test_delete_ratio_at_threshold(deleted, threshold, passed):
    counts = ChangeCounts(inserted=0, updated=0, deleted=deleted, rows=100 - deleted)
    report = gate_changes(counts, previous_rows=100,
                          cfg=QualityConfig(max_delete_ratio=threshold, min_rows_for_ratios=0))
    assert check(report, "delete_ratio").passed is passed
    assert report.passed is passed and report.stage == "changes"


@pytest.mark.parametrize(("updated", "passed"), [(40, True), (41, False)])
def test_change_ratio_at_threshold(updated, passed):
    counts = ChangeCounts(inserted=5, updated=updated, deleted=5, rows=100)
    cfg = QualityConfig(max_change_ratio=0.5, min_rows_for_ratios=0)
    change = check(gate_changes(counts, previous_rows=100, cfg=cfg), "change_ratio")
    assert (change.passed, change.threshold) == (passed, 0.5)
    assert change.observed == pytest.approx((updated + 10) / 100)
    # default: no maximum; and nothing to compare on a first load
    assert gate_changes(counts, previous_rows=100, cfg=QualityConfig(min_rows_for_ratios=0)).passed
    assert gate_changes(ChangeCounts(100, 0, 0, 100), previous_rows=None, cfg=cfg).passed


# --- overrides, message, report ---------------------------------------------------------------


def test_override_lets_named_check_pass_for_this_run():
    counts = ChangeCounts(inserted=0, updated=0, deleted=90, rows=10)
    report = gate_changes(counts, previous_rows=100, cfg=QualityConfig(min_rows_for_ratios=0),
                          overrides={"delete_ratio"})
    deleted = check(report, "delete_ratio")
    assert (deleted.passed, deleted.overridden, deleted.blocks) == (False, True, False)
    assert report.passed and report.overridden == [deleted]
    report.raise_if_failed("orders", "s2")
    assert "overridden: delete_ratio" in report.summary()


@pytest.mark.parametrize("name", ["delete_ratioo", "all", "*", "keys_unique", "keys_not_null"])
def test_unknown_or_key_override_is_config_error(name):
    with pytest.raises(ConfigError) as err:
        validate_overrides({name}, QualityConfig())
    assert err.value.exit_code == 2 and name in str(err.value)


def test_one_line_message_names_table_snapshot_checks_values_and_keys(spark):
    df = spark.createDataFrame(CLEAN + [("eu", 1, 1.0, "x"), ("eu", None, 1.0, "x")],
                               SCHEMA)
    report = gate_snapshot(df, keys=KEYS, previous_rows=100, cfg=QualityConfig(min_rows_for_ratios=0))
    with pytest.raises(QualityGateFailed) as err:
        report.raise_if_failed("sales.orders", "orders_20240102.parquet")
    text = str(err.value)
    assert "\n" not in text and err.value.exit_code == 3
    assert text.startswith("table sales.orders, snapshot orders_20240102.parquet: ")
    assert "keys_not_null: observed 1, threshold 0, keys ('eu', NULL)" in text
    assert "keys_unique: observed 1, threshold 0, keys ('eu', 1)" in text
    assert "row_count_ratio: observed 0.05, threshold [0.5, 2]" in text
    assert "not_empty" not in text and "keys_present" not in text


def test_report_to_dict_is_json_and_round_trips(spark):
    df = spark.createDataFrame(CLEAN + [("eu", 1, 1.0, "x")], SCHEMA)
    report = gate_snapshot(df, keys=KEYS, previous_rows=None, cfg=QualityConfig())
    data = json.loads(json.dumps(report.to_dict()))
    assert data["passed"] is False and data["stage"] == "snapshot"
    assert {c["name"]: c["blocks"] for c in data["checks"]}["keys_unique"] is True
    assert GateReport.from_dict(data) == report


# --- great-expectations -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def orders(spark):
    rows = CLEAN + [("us", 2, 5000.0, "open"), ("us", 3, 7.0, "lost")]
    return spark.createDataFrame(rows, SCHEMA)


def test_suite_file_failing_expectation_blocks(orders):
    cfg = QualityConfig(expectation_suite=str(DATA / "orders_suite.json"))
    report = gate_snapshot(orders, keys=KEYS, previous_rows=5, cfg=cfg, suite=read_suite(cfg),
                           table="orders", snapshot="s3")
    amount = check(report, "expect_column_values_to_be_between:amount")
    assert (amount.passed, amount.blocking, amount.observed) == (False, True, 1)
    assert amount.sample_keys == [{"region": "us", "id": 2}]
    assert amount.threshold == {"min_value": 0, "max_value": 1000}
    status = check(report, "expect_column_values_to_be_in_set:status")
    assert (status.passed, status.blocking) == (False, False)  # severity: warning
    assert check(report, "expect_column_values_to_not_be_null:status").passed
    assert [c.name for c in report.warnings] == [status.name]
    with pytest.raises(QualityGateFailed, match=r"to_be_between:amount: observed 1, .*\('us', 2\)"):
        report.raise_if_failed("orders", "s3")
    json.dumps(report.to_dict())


def test_suite_file_warn_only_reports_but_never_blocks(orders):
    cfg = QualityConfig(expectation_suite=str(DATA / "orders_suite.json"), suite_blocking=False)
    report = gate_snapshot(orders, keys=KEYS, previous_rows=5, cfg=cfg, suite=read_suite(cfg))
    assert report.passed
    assert {c.name for c in report.warnings} == {"expect_column_values_to_be_between:amount",
                                                 "expect_column_values_to_be_in_set:status"}


def test_config_expectations_override_and_data_docs(orders, tmp_path):
    docs = tmp_path / "docs"
    cfg = QualityConfig(
        expectations=[
            {"type": "expect_column_values_to_be_in_set", "name": "status_known",
             "kwargs": {"column": "status", "value_set": ["open", "closed"]}},
            {"type": "expect_column_max_to_be_between", "blocking": False,
             "kwargs": {"column": "amount", "max_value": 100}},
            {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
            {"type": "expect_column_to_exist", "kwargs": {"column": "no_such_column"}},
        ],
        data_docs_dir=str(docs),
    )
    assert "status_known" in check_names(cfg)
    report = gate_snapshot(orders, keys=KEYS, previous_rows=5, cfg=cfg,
                           overrides={"status_known"}, table="orders", snapshot="s/4")
    names = [c.name for c in report.checks][5:]
    assert names == ["status_known", "expect_column_max_to_be_between:amount",
                     "expect_table_row_count_to_be_between",
                     "expect_column_to_exist:no_such_column"]
    status = check(report, "status_known")
    assert (status.passed, status.overridden, status.sample_keys) == (
        False, True, [{"region": "us", "id": 3}])
    assert check(report, "expect_column_max_to_be_between:amount").observed == 5000.0
    assert check(report, "expect_table_row_count_to_be_between").passed
    assert [c.name for c in report.failed_blocking] == ["expect_column_to_exist:no_such_column"]
    assert (docs / "index.html").is_file()
    assert list(docs.glob("validations/**/*.html"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs"]


def test_bad_user_expectations_are_config_errors(orders, tmp_path):
    unknown = QualityConfig(expectations=[{"type": "expect_column_to_be_fancy"}])
    with pytest.raises(ConfigError, match="expect_column_to_be_fancy"):
        gate_snapshot(orders, keys=KEYS, previous_rows=5, cfg=unknown)
    no_column = QualityConfig(expectations=[{"type": "expect_column_values_to_be_unique"}])
    with pytest.raises(ConfigError, match="invalid expectation"):
        gate_snapshot(orders, keys=KEYS, previous_rows=5, cfg=no_column)
    with pytest.raises(ConfigError, match="cannot read expectation suite"):
        read_suite(QualityConfig(expectation_suite=str(tmp_path / "missing.json")))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_suite(QualityConfig(expectation_suite=str(tmp_path / "bad.json")))
    twice = [{"type": "expect_table_row_count_to_equal", "name": "delete_ratio"}]
    with pytest.raises(ConfigError, match="used twice or is built in"):
        check_names(QualityConfig(expectations=twice))


def test_legacy_suite_names_and_blocking():
    from diffcdc.core.quality_gx import planned_expectations

    cfg = QualityConfig(expectation_suite=str(DATA / "legacy_suite.json"))
    plans = planned_expectations(cfg, read_suite(cfg))
    assert [(p.name, p.blocking, p.config["type"]) for p in plans] == [
        ("expect_column_values_to_not_be_null:status", False,
         "expect_column_values_to_not_be_null"),
        ("has_rows", True, "expect_table_row_count_to_be_between"),
    ]
    validate_overrides({"has_rows"}, cfg, read_suite(cfg))
