"""The classification of scoped snapshots (diffcdc.core.classify with a ClassifyScope), through
write_state as the engine calls it: kept vs deleted, NULL scope values, rows that move scope,
keys whose scope is not known, a key-column scope, a predicate, chains of deltas holding kept
keys, and the counts of each version against a plain-Python model."""

from __future__ import annotations

import glob
import os

import pyarrow.parquet as pq
import pytest

from diffcdc.core.classify import CHANGE, DELETE, KEPT, ClassifyScope
from diffcdc.core.scope import SCOPED, plan_slots
from diffcdc.engine.state_write import state_keys, write_state
from diffcdc.state.commit import Counts

SCHEMA = "id BIGINT, region STRING, n BIGINT, v STRING"


def _model(image: dict, snapshot: dict, in_scope) -> tuple[dict, dict]:
    """The next image and the counts: a key the snapshot lacks is deleted only when its last
    row is in the snapshot's scope (``in_scope(row)``), kept otherwise."""
    counts = dict.fromkeys(("inserted", "updated", "deleted", "unchanged", "kept"), 0)
    after = {}
    for key, row in snapshot.items():
        old = image.get(key)
        kind = "inserted" if old is None else "unchanged" if old == row else "updated"
        counts[kind] += 1
        after[key] = row
    for key, row in image.items():
        if key not in snapshot:
            if in_scope(row):
                counts["deleted"] += 1
            else:
                counts["kept"] += 1
                after[key] = row
    counts["rows"] = len(snapshot)
    return after, counts


def _by_regions(snapshot: dict):
    held = {r["region"] for r in snapshot.values()}
    return lambda row: row["region"] in held


class _Table:
    """A table's versions written with write_state, as the engine chains them."""

    def __init__(self, spark, root, columns=(), where=None, keys=("id",)):
        self.spark, self.root, self.keys = spark, root, list(keys)
        self.columns, self.where = list(columns), where
        self.links: list[str] = []
        self.counts: Counts | None = None
        self.stored: tuple[str, ...] | None = None
        self.schema = None
        self.version = 0

    def run(self, rows: dict, *, scoped: bool = True, delta: bool = True):
        df = self.spark.createDataFrame(
            [(r["id"], r["region"], r["n"], r["v"]) for r in rows.values()], SCHEMA)
        scope = None
        if scoped:
            slots = plan_slots(df.columns, self.keys, self.columns, self.where)
            types = {c: df.schema[c].dataType.simpleString() for c in slots.stored}
            scope = ClassifyScope(slots, self.stored, types)
        self.version += 1
        target = os.path.join(self.root, f"v{self.version}")
        stored = scope.slots.stored if scope is not None else None
        # as the engine: a delta on the head unless the scope's stored columns change
        previous_keys = state_keys(self.counts) if (
            self.counts and delta and self.links and stored == self.stored) else None
        written = write_state(self.spark, df, self.links, self.keys, [], 64, target, "T",
                              previous_keys=previous_keys, schema=self.schema, scope=scope)
        self.links = [*self.links, target] if previous_keys is not None else [target]
        c = written.counts
        self.counts = Counts(c["rows"], c["inserted"], c["updated"], c["deleted"],
                             c["unchanged"], c["kept"])
        self.stored = stored
        self.schema = written.schema
        return c

    def live(self) -> dict:
        """Per live key of the chain (newest link wins): (change, scoped, slot values)."""
        out: dict = {}
        for link in self.links:
            for path in sorted(glob.glob(f"{link}/*.parquet")):
                for r in pq.read_table(path).to_pylist():
                    out[r["id"]] = r
        return {k: r for k, r in out.items() if r[CHANGE] != DELETE}


def _rows(*specs):
    return {i: {"id": i, "region": region, "n": n, "v": v} for i, region, n, v in specs}


def _check(table: _Table, image: dict, snapshot: dict, in_scope) -> dict:
    expected_image, expected = _model(image, snapshot, in_scope)
    got = table.run(snapshot)
    assert {k: got[k] for k in expected} == expected
    live = table.live()
    assert set(live) == set(expected_image)
    kept = {k for k, r in live.items() if r[CHANGE] == KEPT}
    assert kept == set(expected_image) - set(snapshot)
    return expected_image


@pytest.mark.parametrize("delta", [True, False], ids=["deltas", "bases"])
def test_region_scopes_keep_other_regions_and_follow_moving_rows(spark, tmp_path, delta):
    table = _Table(spark, str(tmp_path), columns=["region"])
    image: dict = {}
    steps = [
        _rows((1, "eu", 1, "a"), (2, "eu", 2, "b"), (3, "us", 3, "c"), (4, None, 4, "d")),
        _rows((1, "eu", 1, "a")),  # eu: 2 deleted; us, NULL kept
        _rows((5, "us", 5, "e")),  # us: 3 deleted; 1 (eu) and 4 (NULL) kept
        _rows((6, None, 6, "f"), (1, "us", 1, "a")),  # NULL and us: 4, 5 deleted; 1 moves
        _rows((7, "eu", 7, "g")),  # eu: 1 moved to us, so kept
        _rows((1, "us", 1, "a"), (8, "us", 8, "h")),  # 1 held again (unchanged)
    ]
    for snapshot in steps:
        if not delta:
            table.counts = None  # every version a base
        image = _check(table, image, snapshot, _by_regions(snapshot))
    assert sorted(image) == [1, 6, 7, 8]


def test_a_predicate_judges_a_missing_key_by_its_last_values(spark, tmp_path):
    table = _Table(spark, str(tmp_path), where="n >= 10")
    image: dict = {}
    window = lambda row: row["n"] is not None and row["n"] >= 10  # noqa: E731
    for snapshot in [
        _rows((1, "x", 5, "a"), (2, "x", 10, "b"), (3, "x", None, "c"), (4, "x", 12, "d")),
        _rows((4, "x", 12, "d"), (5, "x", 11, "e")),  # 2 deleted; 1 (n 5), 3 (NULL) kept
        _rows((4, "x", 3, "d"), (5, "x", 11, "e")),  # 4 leaves the window while held
        _rows((5, "x", 11, "e")),  # 4: last seen outside the window: kept
    ]:
        image = _check(table, image, snapshot, window)
    assert sorted(image) == [1, 3, 4, 5]


def test_a_scope_over_a_key_column_needs_no_slot_and_knows_every_key(spark, tmp_path):
    table = _Table(spark, str(tmp_path), columns=["id"], keys=("id",))
    image = _check(table, {}, _rows((1, "a", 1, "a"), (2, "a", 2, "b")), lambda r: False)
    # the snapshot holds key 1 only: its scope is key 1, so key 2 is kept
    image = _check(table, image, _rows((1, "a", 1, "z")), lambda r: r["id"] == 1)
    assert set(table.live()) == {1, 2}
    assert not [c for c in pq.read_schema(glob.glob(f"{table.links[-1]}/*.parquet")[0]).names
                if c.startswith("__diffcdc_scope") and c != SCOPED]


def test_keys_of_a_state_from_before_the_scope_are_kept_until_a_snapshot_holds_them(
        spark, tmp_path):
    table = _Table(spark, str(tmp_path), columns=["region"])
    table.run(_rows((1, "eu", 1, "a"), (2, "eu", 2, "b"), (3, "us", 3, "c")), scoped=False)
    got = table.run(_rows((1, "eu", 1, "a")))  # 2 is eu, but the state does not know it
    assert (got["deleted"], got["kept"], got["unknown_scope"]) == (0, 2, 2)
    assert {k: r[SCOPED] for k, r in table.live().items()} == {1: True, 2: False, 3: False}
    got = table.run(_rows((1, "eu", 1, "a"), (2, "eu", 2, "b")))  # 2 held: its region known
    assert (got["deleted"], got["kept"], got["unknown_scope"]) == (0, 1, 1)
    got = table.run(_rows((1, "eu", 1, "a")))
    assert (got["deleted"], got["kept"], got["unknown_scope"]) == (1, 1, 1)
    assert sorted(table.live()) == [1, 3]
