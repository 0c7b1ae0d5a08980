"""Property: replaying the landing files reproduces every snapshot exactly, with minimal changes.

Random snapshot sequences over a composite key with NULLs everywhere else, awkward types
(decimal, -0.0/NaN/inf doubles, binary, dates, UTC timestamps, nested struct/array/map),
NULL swaps, key changes, deletes and re-inserts of the same key, and a different column order
in every snapshot file.
"""

from __future__ import annotations

import datetime as dt
import random
import tempfile
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import UTC, Workspace, expected_counts

SCHEMA = pa.schema([
    ("k1", pa.int64()),
    ("k2", pa.string()),
    ("s1", pa.string()),
    ("s2", pa.string()),
    ("n", pa.int32()),
    ("d", pa.float64()),
    ("dec", pa.decimal128(10, 3)),
    ("day", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")),
    ("flag", pa.bool_()),
    ("blob", pa.binary()),
    ("arr", pa.list_(pa.int32())),
    ("st", pa.struct([("a", pa.int32()), ("b", pa.string())])),
    ("m", pa.map_(pa.string(), pa.int32())),
])

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=4)
small_int = st.integers(-3, 3)


def maybe(s):
    return st.none() | s


ROW = st.fixed_dictionaries({
    "s1": maybe(st.sampled_from(["", "a", "NULL", "ü"]) | text),
    "s2": maybe(st.sampled_from(["", "a"]) | text),
    "n": maybe(small_int),
    "d": maybe(st.sampled_from([0.0, -0.0, float("nan"), float("inf"), 1.5])),
    "dec": maybe(st.sampled_from([Decimal("1.500"), Decimal("-0.001"), Decimal("0.000")])),
    "day": maybe(st.dates(dt.date(1970, 1, 1), dt.date(2100, 1, 1))),
    "ts": maybe(st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2100, 1, 1)).map(lambda t: t.replace(tzinfo=UTC))),
    "flag": maybe(st.booleans()),
    "blob": maybe(st.binary(max_size=3)),
    "arr": maybe(st.lists(maybe(small_int), max_size=3)),
    "st": maybe(st.fixed_dictionaries({"a": maybe(small_int), "b": maybe(st.sampled_from(["", "x"]))})),
    "m": maybe(st.dictionaries(st.sampled_from(["a", "b", "c"]), maybe(small_int), max_size=3).map(lambda d: list(d.items()))),
})
KEY = st.tuples(st.integers(0, 12), st.sampled_from(["a", "b", "", "é"]))


@st.composite
def snapshot_sequences(draw):
    first = draw(st.dictionaries(KEY, ROW, min_size=1, max_size=10))
    snapshots = [first]
    for _ in range(draw(st.integers(1, 3))):
        previous = snapshots[-1]
        current = {}
        for key, row in previous.items():
            action = draw(st.sampled_from(["keep", "keep", "update", "swap", "delete", "rekey"]))
            if action == "keep":
                current[key] = row
            elif action == "update":
                current[key] = draw(ROW)
            elif action == "swap":  # NULL swap between two string columns
                current[key] = {**row, "s1": row["s2"], "s2": row["s1"]}
            elif action == "rekey":
                new_key = draw(KEY)
                if new_key not in previous:
                    current[new_key] = row
        for key, row in draw(st.dictionaries(KEY, ROW, max_size=4)).items():
            current.setdefault(key, row)  # new keys, and re-inserts of deleted ones
        if not current:
            current = {draw(KEY): draw(ROW)}
        snapshots.append(current)
    return snapshots


def _table(rows: dict, seed: int) -> pa.Table:
    records = [{"k1": k[0], "k2": k[1], **row} for k, row in sorted(rows.items())]
    table = pa.Table.from_pylist(records, schema=SCHEMA)
    names = list(SCHEMA.names)
    random.Random(seed).shuffle(names)  # a different column order in every file
    return table.select(names)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)
@given(snapshots=snapshot_sequences())
def test_replaying_landing_files_reproduces_every_snapshot(spark, snapshots):
    with tempfile.TemporaryDirectory() as root:
        check_replay_property(spark, Workspace(root, keys=("k1", "k2"), max_rows_per_file=4), snapshots)


def check_replay_property(spark, ws: Workspace, snapshots: list[dict]) -> None:
    """The property's body, for any workspace (local or remote landing root).

    ``ws`` has keys (k1, k2) and at most 4 rows per landing file.
    """
    ids = [f"{i:08d}.parquet" for i in range(1, len(snapshots) + 1)]
    for i, (sid, rows) in enumerate(zip(ids, snapshots)):
        ws.write(sid, _table(rows, seed=i))
    report = ws.run(spark)
    assert [s.snapshot_id for s in report.snapshots] == ids
    previous: dict = {}
    last_seq = 0
    for sid, rows, result in zip(ids, snapshots, report.snapshots):
        expected = expected_counts(previous, rows)
        got = {k: getattr(result, k) for k in ("inserted", "updated", "deleted")}
        assert got == expected, sid  # minimal: exactly the rows that changed
        last_seq += len(result.files)
        ws.assert_mirror_equals(spark, sid, upto=last_seq)
        previous = rows
    ws.assert_mirror_equals(spark, ids[-1])
    # every file is non-empty, at most max_rows_per_file rows, numbered consecutively
    files = ws.data_files()
    assert files == [f"{n:020d}.parquet" for n in range(1, len(files) + 1)]
    initial = set(report.snapshots[0].files)
    for name in files:
        rows = ws.landing_rows(name)
        assert 0 < len(rows) <= 4
        assert (list(rows[0])[-1] == "__rowMarker__") == (name not in initial)
    # rerunning a finished run is a no-op
    assert ws.run(spark).outcome == "nothing to do"
    assert ws.data_files() == files
