"""Changed columns, snapshot time rules and the history sink's settings: logic without Spark."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from pydantic import ValidationError

from diffcdc.config import TableConfig
from diffcdc.core.column_changes import changed_columns, partners
from diffcdc.core.compare import norm_value
from diffcdc.errors import InputRefused
from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.delta.history import CLOSE, OPEN, RESTATE, Tracking, Version, merge_source
from diffcdc.sources.identity import FileIdentity
from diffcdc.sources.snapshot_time import SnapshotTimeRule, format_time, parse_id, read_time

UTC = dt.timezone.utc


def _pair(column: str, old: list, new: list, dtype: pa.DataType) -> list[list[str]]:
    return changed_columns(pa.table({column: pa.array(old, dtype)}),
                           pa.table({column: pa.array(new, dtype)}), [column])


@pytest.mark.parametrize("dtype,old,new,differs", [
    (pa.int64(), [1, None, None, 2], [1, None, 3, None], [False, False, True, True]),
    (pa.string(), ["", None, "a"], [None, None, "a"], [True, False, False]),
    (pa.float64(), [float("nan"), -0.0, 1.0, float("nan")], [float("nan"), 0.0, 1.5, None],
     [False, False, True, True]),
    (pa.decimal128(38, 0), [Decimal(10**37 + 1)], [Decimal(10**37 + 2)], [True]),
    (pa.map_(pa.string(), pa.int64()), [[("a", 1), ("b", 2)], [("a", 1)], []],
     [[("b", 2), ("a", 1)], [("a", 2)], None], [False, True, True]),
    (pa.struct([("x", pa.float64()), ("y", pa.string())]),
     [{"x": float("nan"), "y": None}, {"x": 1.0, "y": "a"}],
     [{"x": float("nan"), "y": None}, {"x": 1.0, "y": "b"}], [False, True]),
    (pa.list_(pa.int64()), [[1, None], [], [1]], [[1, None], None, [1, 2]], [False, True, True]),
])
def test_a_column_changes_exactly_when_the_fingerprint_tells_its_values_apart(dtype, old, new,
                                                                              differs):
    got = _pair("c", old, new, dtype)
    assert got == [["c"] if d else [] for d in differs]


def test_changed_columns_are_sorted_and_an_absent_column_counts_as_null():
    old = pa.table({"b": [1, 1], "a": ["x", "x"], "gone": [None, 5]})
    new = pa.table({"a": ["y", "x"], "b": [2, 1], "added": [None, "v"]})
    assert changed_columns(old, new, ["b", "a", "gone", "added"]) == [["a", "b"], ["added", "gone"]]
    # a type that changed (int to string) is compared value by value
    assert changed_columns(pa.table({"v": pa.array([1], pa.int32())}),
                           pa.table({"v": pa.array([None], pa.struct([("x", pa.int8())]))}),
                           ["v"]) == [["v"]]


def test_partners_match_composite_keys_whatever_the_string_layout():
    left = pa.table({"k1": [1, 2, 3], "k2": pa.array(["a", "b", "c"], pa.string_view())})
    right = pa.table({"k2": ["c", "a"], "k1": [3, 1]})
    assert partners(left, right, ["k1", "k2"]) == [1, None, 0]


def test_the_merge_source_closes_opens_and_restates():
    at = Version(7, dt.datetime(2026, 1, 7, tzinfo=UTC))
    current = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"], "note": ["n", "n", "n"]})
    new = pa.table({"id": [1, 2, 4], "v": ["a", "b2", "d"], "note": ["m", "n", "n"]})
    gone = pa.table({"id": [3]})
    source = merge_source(new, gone, current, ["id"], ["v", "note"], Tracking(but=("note",)), at,
                          unchanged_possible=False).to_pylist()
    actions = sorted((r["__diffcdc_action"], r["__diffcdc_mk0"], r["id"], r.get("__CHANGED_COLUMNS"))
                     for r in source)
    assert actions == sorted([
        (CLOSE, 3, 3, None), (CLOSE, 2, 2, None),  # deleted; updated in a tracked column
        (OPEN, None, 4, None), (OPEN, None, 2, ["v"]),  # inserted; the update's new row
        (RESTATE, 1, 1, None),  # only the untracked note changed
    ])
    assert {r["__START_AT"] for r in source if r["__diffcdc_action"] == OPEN} == {7}
    # a full image: a row equal to its open row does nothing
    same = merge_source(current, pa.table({"id": pa.array([], pa.int64())}), current, ["id"],
                        ["v", "note"], Tracking(), at, unchanged_possible=True)
    assert same.num_rows == 0
    with pytest.raises(ValueError, match="no changed column"):
        merge_source(current, pa.table({"id": pa.array([], pa.int64())}), current, ["id"],
                     ["v"], Tracking(), at, unchanged_possible=False)


def test_tracking_only_or_all_but():
    assert Tracking(only=("Price",)).tracked(["price", "note"])
    assert not Tracking(only=("price",)).tracked(["note"])
    assert not Tracking(but=("Note",)).tracked(["note"])
    assert Tracking(but=("note",)).tracked(["note", "v"]) and Tracking().tracked(["x"])


def test_snapshot_time_rules():
    assert parse_id("2026-11-24.csv.gz", "%Y-%m-%d") == dt.datetime(2026, 11, 24, tzinfo=UTC)
    assert parse_id("orders_20261124T0730", "orders_%Y%m%dT%H%M") == dt.datetime(
        2026, 11, 24, 7, 30, tzinfo=UTC)
    assert parse_id("2026-11-24+0200", "%Y-%m-%d%z") == dt.datetime(2026, 11, 23, 22, tzinfo=UTC)
    assert parse_id("latest.parquet", "%Y-%m-%d") is None
    rule = SnapshotTimeRule.parse("id:%Y-%m-%d")
    with pytest.raises(InputRefused, match="does not match the snapshot_time format"):
        rule.time_of("latest.parquet", (), table="T", path="/src/latest.parquet")
    files = (FileIdentity("a", 1, 1_700_000_000_000_000_000, 0, 1),
             FileIdentity("b", 1, 1_700_000_005_500_000_000, 0, 2))
    assert SnapshotTimeRule.parse("mtime").time_of("s", files, table="T", path="p") == (
        dt.datetime(2023, 11, 14, 22, 13, 25, 500000, tzinfo=UTC))
    stamp = dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert format_time(stamp) == "2026-01-02T03:04:05.000006Z" and read_time(format_time(stamp)) == stamp
    for bad in ("ctime", "id:", "id:2026", "id:%Q"):
        with pytest.raises(ValueError):
            SnapshotTimeRule.parse(bad)


def test_history_settings_are_checked_when_the_config_is_read():
    ok = DeltaSinkConfig(path="h", mode="scd2", track_history_columns=["v"])
    assert ok.mode == "scd2"
    for bad in ({"mode": "scd2", "changelog_path": "log"},
                {"track_history_columns": ["v"]},
                {"mode": "scd2", "track_history_columns": ["v"], "track_history_except_columns": ["w"]},
                {"mode": "scd2", "track_history_columns": []},
                {"mode": "history"}):
        with pytest.raises(ValidationError):
            DeltaSinkConfig(path="h", **bad)
    with pytest.raises(ValidationError, match="not a snapshot time rule"):
        TableConfig(name="T", source="src", keys=["id"], landing="l", snapshot_time="yesterday")
    with pytest.raises(ValidationError, match="rule for folder snapshots"):
        TableConfig(name="T", source={"type": "jdbc", "url": "jdbc:postgresql://h/db", "table": "t"},
                    keys=["id"], landing="l", snapshot_time="mtime")


def test_verify_compares_wide_decimals_exactly():
    assert norm_value(Decimal(10**37 + 1)) != norm_value(Decimal(10**37 + 2))
    assert norm_value(Decimal("1.50")) == norm_value(Decimal("1.5"))
