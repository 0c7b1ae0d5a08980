"""Scoped snapshots without Spark: the config, the predicate's columns and placeholder, the
commit record's scope, the state check's kept rows and verify's kept keys (docs/scope.md)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from diffcdc.core.classify import CHANGE, DELETE, DUP, INSERT, KEPT, UNCHANGED, delta_counts
from diffcdc.core.compare import Replayed, compare, set_apart_kept
from diffcdc.core.fingerprint import FP
from diffcdc.core.scope import (
    ScopeConfig,
    fill_where,
    identifiers,
    plan_slots,
    time_literal,
)
from diffcdc.state.check_read import read_state
from diffcdc.state.commit import CommitRecord, Counts, Fingerprint, ScopeRecord


def test_a_scope_needs_columns_or_a_where_and_no_repeats():
    assert ScopeConfig(columns=["region"]).where is None
    assert ScopeConfig(where="x > 1").columns == []
    with pytest.raises(ValidationError, match="needs columns, a where"):
        ScopeConfig()
    with pytest.raises(ValidationError, match="repeat"):
        ScopeConfig(columns=["Region", "region"])
    with pytest.raises(ValidationError, match="empty"):
        ScopeConfig(where="  ")
    with pytest.raises(ValidationError, match="Extra inputs|extra"):
        ScopeConfig(columns=["a"], colums=["b"])


def test_the_predicates_columns_are_found_outside_string_literals():
    where = ("order_date >= add_months(CAST({snapshot_time} AS DATE), -3) AND `odd name` <> "
             "'region' AND \"x y\" = Kind")
    assert identifiers(where) == ["order_date", "add_months", "CAST", "AS", "DATE", "AND",
                                  "odd name", "Kind"]
    slots = plan_slots(["id", "Order_Date", "odd name", "kind", "region", "amount"], ["ID"],
                       ["region"], where)
    assert slots.read == ("Order_Date", "odd name", "kind")
    assert slots.stored == ("region", "Order_Date", "odd name", "kind")
    assert slots.slot("odd name") == "__diffcdc_scope2"


def test_key_columns_need_no_slot():
    slots = plan_slots(["region", "id", "v"], ["region", "id"], ["region"], "id > 10")
    assert slots.read == ("id",) and slots.stored == ()


def test_the_snapshot_time_placeholder_becomes_a_utc_timestamp_literal():
    at = dt.datetime(2026, 3, 31, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-2)))
    assert time_literal(at) == "TIMESTAMP '2026-04-01 01:30:00.000000+00:00'"
    assert fill_where("d >= {snapshot_time}", at) == f"d >= {time_literal(at)}"
    assert fill_where("d >= {snapshot_time}", None) is None
    assert fill_where("d >= 1", None) == "d >= 1"


def _record(**fields):
    base = dict(version=2, table="T", run_id="r", snapshot_id="s2", version_dir="v",
                state_path="v/state", keys=["id"], exclude=[], schema={}, fingerprint=Fingerprint(1, 64),
                counts=Counts(3, 1, 0, 1, 1))
    return CommitRecord(**{**base, **fields})


def test_a_record_without_scope_is_written_as_before_and_read_with_defaults():
    raw = _record().to_dict()
    assert "scope" not in raw and "kept" not in raw["counts"]
    back = CommitRecord.from_dict(raw)
    assert back.scope is None and back.counts.kept == 0 and back == _record()


def test_a_scoped_record_keeps_its_scope_and_kept_count():
    record = _record(counts=Counts(3, 1, 0, 1, 1, kept=7),
                     scope=ScopeRecord(["region"], "d > 1", ["region", "d"], unknown=2))
    raw = record.to_dict()
    assert raw["counts"]["kept"] == 7
    assert raw["scope"] == {"columns": ["region"], "where": "d > 1", "stored": ["region", "d"],
                            "unknown": 2}
    assert CommitRecord.from_dict(raw) == record


def test_delta_counts_take_the_kept_keys_of_the_delta_as_previous_keys():
    delta = {"rows": 2, "inserted": 1, "updated": 1, "deleted": 1, "unchanged": 0, "kept": 3,
             "duplicate_keys": 0, "null_keys": 0}
    # 10 previous keys: 1 updated, 1 deleted, 3 kept, so 5 unchanged left out of the delta
    assert delta_counts(delta, 10) == {**delta, "rows": 7, "unchanged": 5}
    with pytest.raises(ValueError):
        delta_counts(delta, 4)


def _state(folder, rows):
    folder.mkdir()
    pq.write_table(pa.table({
        "id": pa.array([r[0] for r in rows], pa.int64()),
        FP: pa.array([r[1] for r in rows], pa.int64()),
        CHANGE: pa.array([r[2] for r in rows], pa.int32()),
        DUP: pa.array([r[3] for r in rows], pa.int64()),
    }), folder / "part-0.parquet")
    return str(folder)


def test_the_state_check_counts_kept_rows_apart_from_the_snapshots(tmp_path):
    base = _state(tmp_path / "base", [(1, 10, INSERT, 1), (2, 20, INSERT, 1), (3, 30, INSERT, 1)])
    # the delta: 1 unchanged (left out), 2 kept (not in the snapshot), 3 deleted, 4 inserted
    delta = _state(tmp_path / "delta", [(2, 20, KEPT, 0), (3, 30, DELETE, 0), (4, 40, INSERT, 1)])
    side = read_state([base, delta], ["id"], 64)
    assert (side.side.rows, side.kept, side.tombstones, side.bad_row_counts) == (2, 1, 1, 0)
    # a key kept earlier and held by the next snapshot again is live and compared
    again = _state(tmp_path / "again", [(2, 21, UNCHANGED, 1)])
    assert read_state([base, delta, again], ["id"], 64).kept == 0


def test_verify_sets_the_kept_keys_apart_and_names_a_kept_key_the_sink_lacks():
    sink = Replayed(["id"], ["id", "v"], [{"id": 1, "v": "a"}, {"id": 2, "v": "b"},
                                         {"id": 3, "v": "c"}])
    snapshot = [{"id": 1, "v": "a"}]
    within, absent = set_apart_kept(sink, [{"id": 2}, {"id": 3}])
    assert absent == [] and compare(within, snapshot, ["id", "v"]).identical
    within, absent = set_apart_kept(sink, [{"id": 2}, {"id": 4}])
    assert absent == [4]
    assert not compare(within, snapshot, ["id", "v"]).identical  # key 3: not kept, not in it
