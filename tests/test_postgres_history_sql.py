"""The PostgreSQL history mode's SQL (issue 42, part P2) against a real server, checked by the
independent history checker (tests/support/history.py): random sequences of versions with a
composite key, NULLs, NaN, arrays, keys deleted and back, full images in between, in each
layout variant (default, deletes as rows, renamed columns with both sentinels, an end sentinel):
as of every version the rows are that version's snapshot and every rule holds. Plus tracked
columns (an untracked change restated in place) and the check before a version.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pyarrow as pa
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from pyspark.sql import types as T

from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.core.history_layout import HistoryLayout, OpenEnd
from diffcdc.sinks.postgres.connection import PgConnection, connect
from diffcdc.sinks.postgres.history_sql import history_apply, history_check, history_create
from diffcdc.sinks.postgres.types import column_defs, csv_batch
from tests.support.history import Names, as_of, canonical, check_history

UTC = dt.timezone.utc
FAR = dt.datetime(9999, 12, 31, tzinfo=UTC)
MAX = 9223372036854775807
KEYS = ["id", "sub key"]
SCHEMA = T.StructType([
    T.StructField("id", T.IntegerType()), T.StructField("sub key", T.StringType()),
    T.StructField("Name", T.StringType()), T.StructField("score", T.DoubleType()),
    T.StructField("tags", T.ArrayType(T.StringType())),
])
ARROW = pa.schema([("id", pa.int32()), ("sub key", pa.string()), ("Name", pa.string()),
                   ("score", pa.float64()), ("tags", pa.list_(pa.string())), (OP, pa.int32())])

#: Each layout, and the checker's view of it (names and sentinels as a user configures them).
VARIANTS = {
    "default": (HistoryLayout(), Names()),
    "rows": (HistoryLayout(deleted="__DELETED"), Names(deleted="__DELETED")),
    "dbt": (HistoryLayout("dbt_start", "dbt_end", "dbt_valid_from", "dbt_valid_to",
                          "dbt_changed", "dbt_is_deleted", OpenEnd(MAX, FAR)),
            Names("dbt_start", "dbt_end", "dbt_valid_from", "dbt_valid_to", "dbt_changed",
                  "dbt_is_deleted", MAX, FAR)),
    "sentinel": (HistoryLayout(end_at="closed at", open_end=OpenEnd(MAX)),
                 Names(end_at="closed at", open_end_at=MAX)),
}


def _conn(postgres) -> PgConnection:
    return PgConnection("127.0.0.1", postgres.port, postgres.database, postgres.user,
                        postgres.password)


def _snapshot(rng: random.Random, before: dict[tuple, tuple]) -> dict[tuple, tuple]:
    """The next snapshot: some keys kept, changed, deleted, back or new."""
    out = {}
    for key in [(i, s) for i in range(6) for s in ("a", "b")]:
        if rng.random() < 0.25:
            continue  # absent (deleted, or not there)
        old = before.get(key)
        if old is not None and rng.random() < 0.5:
            out[key] = old
            continue
        out[key] = (rng.choice([None, "x", "y", "Ünï"]),
                    rng.choice([None, 1.5, float("nan"), -0.0, 2.0]),
                    rng.choice([None, [], ["a", None], ["b"]]))
    return out


def _changes(before: dict[tuple, tuple], after: dict[tuple, tuple]) -> list[tuple]:
    rows: list[tuple] = []
    for key, value in after.items():
        if key not in before:
            rows.append((*key, *value, OP_INSERT))
        elif canonical([_row(key, before[key])]) != canonical([_row(key, value)]):
            rows.append((*key, *value, OP_UPDATE))
    rows += [(*key, None, None, None, OP_DELETE) for key in before if key not in after]
    return rows


def _row(key: tuple, value: tuple) -> dict[str, Any]:
    return dict(zip(SCHEMA.fieldNames(), (*key, *value)))


def _stage(c, rows: list[tuple]) -> None:
    c.execute("DROP TABLE IF EXISTS public.stage")
    c.execute(sql.SQL("CREATE TABLE public.stage ({}, {} integer)").format(
        column_defs(SCHEMA, "stage"), sql.Identifier(OP)))
    batch = pa.Table.from_pylist([dict(zip(ARROW.names, r)) for r in rows], ARROW)
    with c.cursor().copy(sql.SQL("COPY public.stage FROM STDIN (FORMAT csv)")) as copy:
        copy.write(csv_batch(batch, ARROW.names, "stage"))


def _apply(c, layout: HistoryLayout, version: int, rows: list[tuple], *, initial: bool,
           **tracking: Any) -> None:
    _stage(c, rows)
    at = dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(days=version)
    if not initial:
        found = c.execute(history_check(("public", "hist"), ("public", "stage"), KEYS, layout,
                                        at)).fetchone()
        assert tuple(found) == (0, 0, 0), found
    for statement in history_apply(("public", "hist"), ("public", "stage"),
                                   SCHEMA.fieldNames(), KEYS, layout, version, at,
                                   initial=initial, **tracking):
        c.execute(statement)
    c.commit()


def _history(c) -> list[dict[str, Any]]:
    with c.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM public.hist").fetchall()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_history_sql_keeps_the_delta_history_rules(postgres, variant):
    layout, names = VARIANTS[variant]
    rng = random.Random(f"pg-history-{variant}")
    with connect(_conn(postgres), "test") as c:
        for seq in range(3):
            c.execute("DROP TABLE IF EXISTS public.hist")
            c.execute(history_create(("public", "hist"), SCHEMA, KEYS, layout))
            snapshots: list[dict[tuple, tuple]] = [{}]
            for version in range(1, 9):
                after = _snapshot(rng, snapshots[-1])
                if seq == 1 and version == 6:  # an empty full image: every key gone
                    after = {}
                full = version in (1, 3, 6)
                rows = ([(*k, *v, OP_INSERT) for k, v in after.items()] if full
                        else _changes(snapshots[-1], after))
                # the first load into the empty history by its one INSERT
                _apply(c, layout, version, rows, initial=full, target_empty=version == 1)
                snapshots.append(after)
            rows = _history(c)
            check_history(rows, KEYS, names=names)
            # a full image's unchanged key opens no row (the checker allows an empty list)
            assert all(r[names.changed] != [] for r in rows), variant
            for version, snapshot in enumerate(snapshots[1:], start=1):
                want = [_row(k, v) for k, v in snapshot.items()]
                assert canonical(as_of(rows, version, names)) == canonical(want), (
                    variant, seq, version)


def test_untracked_changes_are_restated_and_a_bad_version_is_found(postgres):
    layout = HistoryLayout(deleted="deleted")
    with connect(_conn(postgres), "test") as c:
        c.execute("DROP TABLE IF EXISTS public.hist")
        c.execute(history_create(("public", "hist"), SCHEMA, KEYS, layout))
        _apply(c, layout, 1, [(1, "a", "n", 1.0, ["t"], OP_INSERT)], initial=True)
        # only score changed, and only Name is tracked: written into the open row in place
        _apply(c, layout, 2, [(1, "a", "n", 2.0, ["t"], OP_UPDATE)], initial=False,
               track_only=["name"])
        _apply(c, layout, 3, [(1, "a", "m", 3.0, ["t"], OP_UPDATE)], initial=False,
               track_only=["name"])
        rows = sorted(_history(c), key=lambda r: r["__START_AT"])
        assert [(r["__START_AT"], r["__END_AT"], r["Name"], r["score"], r["__CHANGED_COLUMNS"])
                for r in rows] == [(1, 3, "n", 2.0, None), (3, None, "m", 3.0, ["Name", "score"])]
        # an update of a key with no open row, an insert of an open key, a time before the last
        _stage(c, [(9, "a", "n", 1.0, None, OP_UPDATE), (1, "a", "n", 1.0, None, OP_INSERT)])
        found = c.execute(history_check(("public", "hist"), ("public", "stage"), KEYS, layout,
                                        dt.datetime(2026, 1, 2, tzinfo=UTC))).fetchone()
        assert tuple(found) == (1, 1, 1)
        c.rollback()


def test_a_column_the_snapshots_no_longer_have_is_null_in_new_rows(postgres):
    """The history keeps a column the staged versions lack: an update opens a row with it NULL
    (listed as changed), a tombstone keeps its last value, a full image restates nothing else."""
    layout = HistoryLayout(deleted="deleted")
    wide = T.StructType([*SCHEMA.fields, T.StructField("old col", T.LongType())])
    compared = ["Name", "score", "tags", "old col"]
    with connect(_conn(postgres), "test") as c:
        c.execute("DROP TABLE IF EXISTS public.hist")
        c.execute(history_create(("public", "hist"), wide, KEYS, layout))
        _apply(c, layout, 1, [(1, "a", "n", 1.0, None, OP_INSERT),
                              (2, "a", "m", 1.0, None, OP_INSERT),
                              (3, "a", "k", 1.0, None, OP_INSERT)], initial=True)
        c.execute('UPDATE public.hist SET "old col" = 7')  # written when the snapshots had it
        c.commit()
        _apply(c, layout, 2, [(1, "a", "n2", 1.0, None, OP_UPDATE),
                              (2, "a", None, None, None, OP_DELETE)], initial=False,
               compared=compared)
        _apply(c, layout, 3, [(1, "a", "n2", 1.0, None, OP_INSERT),
                              (3, "a", "k", 1.0, None, OP_INSERT)], initial=True,
               compared=compared)
        rows = _history(c)
    got = sorted((r["id"], r["__START_AT"], r["__END_AT"], r["Name"], r["old col"],
                  r["__CHANGED_COLUMNS"], r["deleted"]) for r in rows)
    assert got == [
        (1, 1, 2, "n", 7, None, False), (1, 2, None, "n2", None, ["Name", "old col"], False),
        (2, 1, 2, "m", 7, None, False), (2, 2, None, "m", 7, None, True),
        (3, 1, 3, "k", 7, None, False), (3, 3, None, "k", None, ["old col"], False)]
