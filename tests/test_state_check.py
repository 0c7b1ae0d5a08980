"""check_state: the state the engine wrote agrees with its snapshot; tampering is found."""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import shutil
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from diffcdc.core.classify import CHANGE, DELETE, DUP
from diffcdc.core.fingerprint import FP
from diffcdc.core.fingerprint_ref import RowFingerprinter
from diffcdc.state.chain import state_chain
from diffcdc.state.check import check_state
from diffcdc.state.store import TableState
from diffcdc.state.verify import check_head, verify_head
from tests.support.workspace import Workspace

UTC = dt.timezone.utc
SCHEMA = pa.schema([
    ("id", pa.int32()), ("name", pa.string()), ("amount", pa.decimal128(12, 2)),
    ("score", pa.float64()), ("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int32())),
    ("info", pa.struct([("city", pa.string()), ("since", pa.date32())])),
    ("seen", pa.timestamp("us", tz="UTC")), ("audit", pa.string()),
])


def row(i: int, version: int = 1) -> dict:
    return {
        "id": i, "name": f"n{i}" if i % 7 else None, "amount": Decimal(i * 3) / 4 if i % 5 else None,
        "score": [0.5, -0.0, float("nan"), None][i % 4], "tags": [None, "a", ""][: i % 4] if i % 6 else None,
        "attrs": [("y", i), ("x", None)] if i % 3 else [], "info": {"city": "Zürich", "since": dt.date(2000, 1, 1 + i % 28)},
        "seen": dt.datetime(2026, 1, 1, i % 24, tzinfo=UTC), "audit": f"run {version}",
    }


@pytest.fixture(scope="module")
def table(spark, tmp_path_factory):
    """Two snapshots through the engine: 1..40, then 3 updates, 4 deletes, 2 inserts."""
    ws = Workspace(str(tmp_path_factory.mktemp("check")), keys=("ID",), exclude=["audit"])
    ws.write("1.parquet", [row(i) for i in range(1, 41)], SCHEMA)
    ws.run(spark)
    second = [row(i, 2) for i in range(1, 37)] + [row(100, 2), row(101, 2)]
    for r in second[:3]:
        r["score"] = 9.0  # ids 1, 2, 3 updated (audit changes everywhere: excluded)
    ws.write("2.parquet", second, SCHEMA)
    snap = ws.run(spark).snapshots[0]
    assert (snap.inserted, snap.updated, snap.deleted) == (2, 3, 4)
    return ws


def test_engine_state_matches_its_snapshot(table):
    head = TableState(table.state, "T").head().record
    assert (head.version, head.keys, head.exclude, head.fingerprint.bits) == (2, ["id"], ["audit"], 64)
    result = check_head(TableState(table.state, "T"))
    assert result.ok, result.summary()
    assert (result.state_rows, result.snapshot_rows, result.matched, result.tombstones) == (38, 38, 38, 4)
    assert result.summary().startswith("state OK: 38 live keys match 38 snapshot rows")


def test_other_snapshot_is_a_mismatch_with_sample_keys(table):
    result = check_head(TableState(table.state, "T"), os.path.join(table.source, "1.parquet"))
    assert not result.ok
    assert result.problems == {"fingerprint_mismatch": 3, "missing_in_state": 4, "missing_in_snapshot": 2}
    samples = {k: sorted(r["id"] for r in rows) for k, rows in result.samples.items()}
    assert samples == {
        "fingerprint_mismatch": [1, 2, 3], "missing_in_state": [37, 38, 39, 40], "missing_in_snapshot": [100, 101],
    }
    assert result.summary().startswith("state MISMATCH: 3 fingerprint mismatch (e.g. {'id': 1}); 4 missing in state")


def test_tampered_state_is_found(table, tmp_path):
    tstate = TableState(table.state, "T")
    head = tstate.head().record
    chain = [tstate.abspath(link.path) for link in state_chain(tstate.commits())]
    assert len(chain) == 2  # a base and the head's delta
    newest = {}  # the chain resolved: the newest row per key (tombstones of the head kept)
    for number, folder in enumerate(chain):
        for row in pq.read_table(folder).to_pylist():
            newest[row["id"]] = row if row[CHANGE] != DELETE or number == 1 else None
    rows = [r for r in newest.values() if r is not None]
    state = pa.Table.from_pylist(rows, pq.read_schema(glob.glob(f"{chain[0]}/*.parquet")[0])).sort_by("id")
    ids = state.column("id").to_pylist()
    fp = state.column(FP).to_pylist()
    fp[ids.index(5)] += 1  # a flipped bit
    change = state.column(CHANGE).to_pylist()
    change[ids.index(6)] = DELETE  # a live key turned into a tombstone
    dup = state.column(DUP).to_pylist()
    dup[ids.index(7)] = 2
    tampered = state.set_column(state.schema.get_field_index(FP), FP, pa.array(fp, pa.int64()))
    tampered = tampered.set_column(tampered.schema.get_field_index(CHANGE), CHANGE, pa.array(change, state.schema.field(CHANGE).type))
    tampered = tampered.set_column(tampered.schema.get_field_index(DUP), DUP, pa.array(dup, state.schema.field(DUP).type))
    extra = tampered.filter(pc.equal(tampered.column("id"), 8))
    os.makedirs(tmp_path / "state")
    pq.write_table(pa.concat_tables([tampered, extra]), tmp_path / "state" / "part-0.parquet")
    result = check_state(str(tmp_path / "state"), head.snapshot_path, keys=["id"], exclude=["AUDIT"])
    assert result.problems == {
        "fingerprint_mismatch": 1, "missing_in_state": 1, "duplicate_state_keys": 1, "bad_row_counts": 1,
    }
    assert result.samples["fingerprint_mismatch"] == [{"id": 5}]
    assert result.samples["missing_in_state"] == [{"id": 6}]
    assert result.samples["duplicate_state_keys"] == [{"id": 8}]
    # without the exclusion the audit column counts: every key differs
    loose = check_state(chain, head.snapshot_path, keys=["id"], bits=64)
    assert loose.fingerprint_mismatch == 38 and len(loose.samples["fingerprint_mismatch"]) == 10


def test_csv_and_folder_snapshots_128_bits(spark, tmp_path):
    ws = Workspace(str(tmp_path), keys=("id",), fingerprint_bits=128)
    csv_path = os.path.join(ws.source, "01.csv")
    with open(csv_path, "w", encoding="utf-8") as handle:
        handle.write('id,name,note\n1,"Smith, J",""\n2,,x\n3,"line\nbreak","say ""hi"""\n4,Ünïcødé ☃,\n')
    ws.run(spark)
    first = check_head(TableState(ws.state, "T"))
    assert first.ok and first.bits == 128 and first.matched == 4, first.summary()
    os.makedirs(os.path.join(ws.source, "02"))
    parts = [[{"id": "1", "name": "Smith, J", "note": None}], [{"id": "3", "name": "changed", "note": ""}]]
    for i, rows in enumerate(parts):
        table = pa.Table.from_pylist(rows, pa.schema([(c, pa.string()) for c in ("id", "name", "note")]))
        pq.write_table(table, os.path.join(ws.source, "02", f"part-{i}.parquet"))
    ws.run(spark)
    second = check_head(TableState(ws.state, "T"))
    assert second.ok and (second.matched, second.tombstones) == (2, 2), second.summary()
    against_csv = check_head(TableState(ws.state, "T"), csv_path)
    assert against_csv.problems == {"fingerprint_mismatch": 1, "missing_in_state": 2}
    assert against_csv.samples["missing_in_state"] == [{"id": "2"}, {"id": "4"}]


def test_duplicates_and_empty_sides_without_spark(tmp_path):
    snapshot = pa.table({"k": ["a", "b", "b", None], "v": [1, 2, 3, 4]})
    pq.write_table(snapshot, tmp_path / "snap.parquet")
    fingerprint = RowFingerprinter(snapshot.schema, ["k"], bits=64)
    os.makedirs(tmp_path / "state")
    fps = [fingerprint(r)[0] for r in snapshot.to_pylist()]
    state = pa.table({"k": ["a", "b", None], FP: [fps[0], fps[1], fps[3]], CHANGE: pa.array([0, 0, 0], pa.int32()), DUP: [1, 1, 1]})
    pq.write_table(state, tmp_path / "state" / "part-0.parquet")
    result = check_state(str(tmp_path / "state"), str(tmp_path / "snap.parquet"), keys=["K"])
    assert result.problems == {"duplicate_snapshot_keys": 1} and result.matched == 2  # NULL key is a key
    assert result.samples == {"duplicate_snapshot_keys": [{"k": "b"}]}
    os.makedirs(tmp_path / "empty")
    pq.write_table(state.slice(0, 0), tmp_path / "empty" / "part-0.parquet")
    empty = check_state(str(tmp_path / "empty"), str(tmp_path / "snap.parquet"), keys=["k"])
    assert empty.problems == {"missing_in_state": 3, "duplicate_snapshot_keys": 1} and empty.state_rows == 0


def test_composite_keys_match_across_physical_types(tmp_path):
    """A key written by Spark into the state (other widths, units and zones) is the snapshot's."""
    paris = [dt.datetime(2026, 3, 29, 1, 30, tzinfo=UTC), dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)]
    snapshot = pa.table({
        "k1": pa.array([1, 2**32 - 1], pa.uint32()),
        "k2": pa.array(paris, pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("ms", tz="Europe/Paris")),
        "k3": ["a", None], "v": [1.5, None],
    })
    pq.write_table(snapshot, tmp_path / "snap.parquet")
    fps = [RowFingerprinter(snapshot.schema, ["K3", "k1", "k2"], bits=128)(r) for r in snapshot.to_pylist()]
    naive = [m.replace(tzinfo=None) for m in paris]
    state = pa.table({
        "k1": pa.array([1, 2**32 - 1], pa.int64()), "k2": pa.array(naive, pa.timestamp("us")),
        "k3": pa.array(["a", None], pa.large_string()), FP: [f[0] for f in fps],
        "__diffcdc_fp_hi": [f[1] for f in fps], CHANGE: pa.array([0, 1], pa.int32()), DUP: [1, 1],
    })
    os.makedirs(tmp_path / "state")
    pq.write_table(state, tmp_path / "state" / "part-0.parquet")
    keys = ["K3", "k1", "k2"]
    result = check_state(str(tmp_path / "state"), str(tmp_path / "snap.parquet"), keys=keys, bits=128)
    assert result.ok and result.matched == 2, result.summary()
    moved = state.set_column(1, "k2", pa.array([naive[0] + dt.timedelta(microseconds=1), naive[1]], pa.timestamp("us")))
    pq.write_table(moved, tmp_path / "state" / "part-0.parquet")
    result = check_state(str(tmp_path / "state"), str(tmp_path / "snap.parquet"), keys=keys, bits=128)
    assert result.problems == {"missing_in_state": 1, "missing_in_snapshot": 1}
    (sample,) = result.samples["missing_in_state"]
    assert (sample["k3"], sample["k1"], sample["k2"]) == ("a", 1, paris[0])


def test_state_of_format1_verifies(tmp_path):
    """State written by diffcdc before sinks and manifests (tests/data/state_format1)."""
    root = tmp_path / "f1"
    shutil.copytree(os.path.join(os.path.dirname(__file__), "data", "state_format1"), root)
    for table in ("A", "B"):
        log = sorted(glob.glob(str(root / "state" / table / "log" / "[0-9]*[0-9].json")))[-1]
        with open(log, encoding="utf-8") as handle:
            record = json.load(handle)
        assert record["format"] == 1 and "state_manifest" not in record
        record["snapshot_path"] = str(root / "src" / table / record["snapshot_id"])  # where it is now
        with open(log, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        report = verify_head(TableState(str(root / "state"), table))
        assert report.ok and [c.status for c in report.checks] == ["ok", "ok", "ok"], report.checks
        assert report.checks[2].data["matched"] == 6
