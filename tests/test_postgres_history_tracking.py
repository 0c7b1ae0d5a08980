"""The PostgreSQL history's tracked columns (issue 42, part T): ``track_history_columns`` /
``track_history_except_columns`` mean what they mean for the Delta history.

One seeded random sequence of snapshots (a composite key, NULLs, NaN and -0.0, key changes,
updates of only untracked columns, only tracked ones, both; a column added, a column removed
under ``removed_columns = "null"``; a reload, a rollback) runs through one table with a Delta
history sink and a PostgreSQL history sink for each tracking setting and each ``deletes``
setting; a second table re-creates itself (``schema_policy = "recreate"``: a column removed,
then an empty snapshot), full images applied as what differs from the open rows. Each
PostgreSQL history holds exactly the Delta history's rows (every column, the metadata columns
too; read back by delta-rs and psycopg, compared order-insensitively) and keeps the rules a
tracked history keeps. The config's refusals are the Delta sink's (unit tests, no Spark).
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from diffcdc.config import TableConfig
from diffcdc.core.compare import norm_value
from diffcdc.errors import ConfigError
from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.history_settings import Tracking, refuse_tracked_columns
from diffcdc.sinks.postgres.config import PostgresSinkConfig
from diffcdc.state.store import TableState
from tests.support.history import Names, as_of, canonical, history_rows
from tests.support.sink_kinds import PG_PASSWORD_ENV, pg_history_rows, pg_schema_of
from tests.support.workspace import Workspace

UTC = dt.timezone.utc
KEYS = ["k1", "Sub Key"]

# -- the settings: the Delta sink's refusals, word for word --------------------------------

REFUSED = [
    ({"track_history_columns": ["v"]}, "need mode = \"scd2\""),
    ({"mode": "current", "track_history_except_columns": ["v"]}, "need mode = \"scd2\""),
    ({"mode": "scd2", "track_history_columns": ["v"], "track_history_except_columns": ["w"]},
     "not both"),
    ({"mode": "scd2", "track_history_columns": []}, "track_history_columns is empty"),
    ({"mode": "scd2", "track_history_columns": "v"}, "valid list"),
]


def _refusal(model: type, base: dict[str, Any], settings: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as refused:
        model(**base, **settings)
    return str(refused.value.errors()[0]["msg"])


@pytest.mark.parametrize("settings, fragment", REFUSED)
def test_the_postgres_sink_refuses_the_tracking_settings_the_delta_sink_refuses(settings,
                                                                                fragment):
    delta = _refusal(DeltaSinkConfig, {"path": "h"}, settings)
    postgres = _refusal(PostgresSinkConfig, {"host": "h", "dbname": "d"}, settings)
    assert delta == postgres and fragment in postgres, (delta, postgres)


def test_the_tracking_settings_are_taken_and_an_empty_except_list_tracks_every_column():
    config = PostgresSinkConfig(host="h", dbname="d", mode="scd2",
                                track_history_columns=["Price"])
    assert config.tracking() == Tracking(("Price",), ())
    assert config.tracking().record() == {"track": ["Price"], "track_except": []}
    untracked = PostgresSinkConfig(host="h", dbname="d", track_history_except_columns=[])
    assert untracked.tracking() == Tracking() == Tracking.from_manifest({})  # an older manifest
    assert Tracking.from_manifest({"track": None, "track_except": ["n"]}) == Tracking(None, ("n",))


@pytest.mark.parametrize("tracking, fragment", [
    (Tracking(("price", "gone")), "['gone'] are not columns of the snapshot"),
    (Tracking(None, ("ID",)), "['ID'] are key columns"),
])
def test_tracked_columns_must_be_non_key_columns_of_the_snapshot(tracking, fragment):
    with pytest.raises(ConfigError) as refused:
        refuse_tracked_columns("pg", tracking, ["id", "Price"], ["id"], table="T",
                               snapshot="s1")
    message = str(refused.value)
    assert fragment in message and "sink pg" in message and "track_history_columns" in message
    assert len(message.splitlines()) == 1
    refuse_tracked_columns("pg", Tracking(("PRICE",)), ["id", "Price"], ["id"], table="T",
                           snapshot="s1")  # names compare case-insensitively


# -- the same sequence through both histories ----------------------------------------------

#: Each tracking: the settings, and the columns (lower case) whose change opens a row.
TRACKINGS = {
    "only": ({"track_history_columns": ["A"]}, {"a"}),
    "except": ({"track_history_except_columns": ["B"]}, {"a", "c", "d"}),
}
DELETES = ("close", "row")
SETTINGS = [(t, d) for t in sorted(TRACKINGS) for d in DELETES]
KEY_POOL = [(i, s) for i in range(5) for s in ("a", "b ", "Ü")]
TYPES = {"k1": pa.int64(), "Sub Key": pa.string(), "a": pa.string(), "b": pa.int64(),
         "c": pa.float64(), "d": pa.string()}


def _value(rng: random.Random, column: str) -> Any:
    return rng.choice({"a": [None, "x", "y", "Ünï"], "b": [None, 1, 2, 3],
                       "c": [None, 1.5, float("nan"), -0.0, 0.0],
                       "d": [None, "p", "q"]}[column])


def _next(rng: random.Random, before: dict[tuple, dict[str, Any]], columns: list[str]
          ) -> dict[tuple, dict[str, Any]]:
    """The next snapshot: each key kept, deleted, changed in only ``b`` (untracked by both
    settings), only ``a`` (tracked by both), both, or any column; new keys, keys back, key
    changes (a key gone and a new one with its values)."""
    data = [c for c in columns if c not in KEYS]
    out: dict[tuple, dict[str, Any]] = {}
    for key, old in before.items():
        old = {c: old.get(c) for c in data}
        kind = rng.choice(["keep", "keep", "delete", "b", "a", "ab", "any", "rekey"])
        if kind == "delete":
            continue
        new = dict(old)
        for column in {"b": ["b"], "a": ["a"], "ab": ["a", "b"], "any": data}.get(kind, []):
            new[column] = _value(rng, column)
        if kind == "rekey":
            free = [k for k in KEY_POOL if k not in before and k not in out]
            if free:
                key = rng.choice(free)
        out[key] = new
    for key in KEY_POOL:
        if key not in before and key not in out and rng.random() < 0.2:
            out[key] = {c: _value(rng, c) for c in data}
    return out


def _table(rows: dict[tuple, dict[str, Any]], columns: list[str]) -> pa.Table:
    records = [{"k1": k[0], "Sub Key": k[1], **{c: v.get(c) for c in columns if c not in KEYS}}
               for k, v in rows.items()]
    return pa.Table.from_pylist(records, pa.schema([(c, TYPES[c]) for c in columns]))


def _entries(root: str, postgres: Any) -> list[dict[str, Any]]:
    entries = []
    for tracking, deletes in SETTINGS:
        common = {"mode": "scd2", "deletes": deletes, **TRACKINGS[tracking][0]}
        entries.append({"type": "delta", "name": f"delta_{tracking}_{deletes}",
                        "path": f"{root}/lake/{tracking}_{deletes}", **common})
        entries.append({"type": "postgres", "name": f"pg_{tracking}_{deletes}",
                        "url": postgres.jdbc_url, "user": postgres.user,
                        "password_env": PG_PASSWORD_ENV, "schema": pg_schema_of(root),
                        "table": f"h_{tracking}_{deletes}", **common})
    return entries


def _pg_rows(postgres: Any, schema: str, table: str) -> list[dict[str, Any]]:
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=postgres.port, dbname=postgres.database,
                         user=postgres.user, password=postgres.password,
                         autocommit=True) as conn:
        return pg_history_rows(conn, (schema, table), {})


def _check_tracked_changes(rows: list[dict[str, Any]], names: Names, tracked: set[str]) -> None:
    """The rules a history with tracked columns keeps (tests/support/history.py's
    check_history assumes every column tracked: a restated row keeps the changed columns it
    was opened with): a key has at most one open row, its rows follow one another; a row that
    continues its key's previous row (an update) lists a tracked column among its changes, and
    its tracked changes are exactly the tracked columns that differ from that row (tracked
    values are never restated)."""
    by_key: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        by_key.setdefault(tuple(norm_value(r[k]) for k in KEYS), []).append(r)
    for key, versions in by_key.items():
        versions.sort(key=lambda r: r[names.start_at])
        assert sum(names.is_open(r) for r in versions) <= 1, ("two open rows", key)
        for before, after in zip(versions, versions[1:]):
            assert before[names.end_at] <= after[names.start_at], ("overlap", key)
            tomb = names.deleted is not None and (before[names.deleted]
                                                  or after[names.deleted])
            if before[names.end_at] != after[names.start_at] or tomb:
                continue  # a key opened anew, or a tombstone's
            changed = {c.lower() for c in after[names.changed]}
            differ = {c.lower() for c in after if c.lower() in tracked
                      and norm_value(before.get(c)) != norm_value(after.get(c))}
            assert changed & tracked == differ and differ, ("tracked changes", key, before,
                                                            after)


def test_the_postgres_history_tracks_columns_as_the_delta_history_does(spark, postgres,
                                                                       tmp_path, monkeypatch):
    monkeypatch.setenv(PG_PASSWORD_ENV, postgres.password)
    root = str(tmp_path)
    ws = Workspace(root)
    ws.table = TableConfig(name="T", source=ws.source, keys=KEYS, sinks=_entries(root, postgres),
                           snapshot_time="id:%Y-%m-%d", removed_columns="null")
    rng = random.Random("postgres-history-tracking")
    columns = ["k1", "Sub Key", "a", "b", "c"]
    rows = {k: {c: _value(rng, c) for c in "abc"} for k in rng.sample(KEY_POOL, 9)}
    snapshots: dict[int, pa.Table] = {}

    def write(day: int) -> None:
        snapshots[day] = _table(rows, columns)
        ws.write(f"2026-01-{day:02d}.parquet", snapshots[day])
        ws.run(spark)

    write(1)  # the first load: every row opened
    for day in (2, 3):
        rows = _next(rng, rows, columns)
        write(day)
    columns.append("d")  # a column added (NULL in the rows before), then changed
    rows = _next(rng, rows, columns)
    write(4)
    ws.run(spark, reload=True)  # a full image onto the history: nothing differs
    rows = _next(rng, rows, columns)
    write(6)
    columns.remove("c")  # removed: NULL from here on (a change under "except", a restate under
    rows = _next(rng, rows, columns)  # "only")
    write(7)
    rows = _next(rng, rows, columns)
    write(8)
    head = TableState(ws.state, "T").head().version
    ws.run(spark, rollback_to=head - 1)  # back to version 7's rows: updates of every kind
    rows = _next(rng, rows, columns)
    write(9)
    commits = TableState(ws.state, "T").commits()
    assert [c.version for c in commits if c.record.sinks["pg_only_row"].manifest.get(
        "initial")] == [1, 5]  # the first load, the reload
    _compare_histories(root, postgres, ws.state, snapshots, columns)


def _compare_histories(root: str, postgres: Any, state: str, snapshots: dict[int, pa.Table],
                       last: list[str]) -> None:
    """Each PostgreSQL history holds the Delta history's rows exactly and keeps the tracked
    history's rules; as of every version each is that version's snapshot in its tracked
    columns (the last version in every column of ``last``), and some untracked change was
    restated in place."""
    commits = TableState(state, "T").commits()
    schema = pg_schema_of(root)
    for tracking, deletes in SETTINGS:
        names = Names(deleted="__DELETED" if deletes == "row" else None)
        tracked = TRACKINGS[tracking][1]
        delta = history_rows(f"{root}/lake/{tracking}_{deletes}")
        pg = _pg_rows(postgres, schema, f"h_{tracking}_{deletes}")
        assert canonical(pg) == canonical(delta), (tracking, deletes)
        _check_tracked_changes(pg, names, tracked)
        assert canonical(as_of(pg, commits[-1].version, names), last) == canonical(
            snapshots[max(snapshots)].to_pylist(), last)
        restated = False
        for commit in commits:
            if not commit.record.snapshot_path:
                continue
            data = pq.read_table(commit.record.snapshot_path)
            seen = [c for c in data.column_names if c in KEYS or c.lower() in tracked]
            then = as_of(pg, commit.version, names)
            assert canonical(then, seen) == canonical(data.to_pylist(), seen), commit.version
            restated |= canonical(then, data.column_names) != canonical(data.to_pylist())
        assert restated, (tracking, deletes)


def test_a_recreated_table_and_an_empty_image_keep_the_tracking_as_the_delta_history_does(
        spark, postgres, tmp_path, monkeypatch):
    """``schema_policy = "recreate"``: a removed column re-creates the table, a full image
    applied to each history as what differs from its open rows (the column NULL from there
    on); then an empty snapshot that re-creates it again closes every open row."""
    monkeypatch.setenv(PG_PASSWORD_ENV, postgres.password)
    root = str(tmp_path)
    ws = Workspace(root)
    ws.table = TableConfig(name="T", source=ws.source, keys=KEYS, sinks=_entries(root, postgres),
                           snapshot_time="id:%Y-%m-%d", schema_policy="recreate")
    rng = random.Random("postgres-history-tracking-recreate")
    columns = ["k1", "Sub Key", "a", "b", "c", "d"]
    rows = {k: {c: _value(rng, c) for c in "abcd"} for k in rng.sample(KEY_POOL, 10)}
    snapshots: dict[int, pa.Table] = {}
    for day in (1, 2, 3, 4):
        if day == 3:
            columns.remove("c")  # the table re-created: a full image
        if day > 1:
            rows = _next(rng, rows, columns)
        snapshots[day] = _table(rows, columns)
        ws.write(f"2026-01-{day:02d}.parquet", snapshots[day])
        ws.run(spark)
    _compare_histories(root, postgres, ws.state, snapshots, columns)
    columns.remove("d")  # re-created by an empty snapshot: every open row closed
    ws.write("2026-01-05.parquet", _table({}, columns))
    ws.run(spark)
    snapshots[5] = _table({}, columns)
    manifests = [c.record.sinks["pg_except_row"].manifest
                 for c in TableState(ws.state, "T").commits()]
    assert [(m.get("initial"), m["recreate"], m["track_except"]) for m in manifests][2:] == [
        (True, True, ["B"]), (False, False, ["B"]), (True, True, ["B"])]
    _compare_histories(root, postgres, ws.state, snapshots, columns)


def test_both_sinks_refuse_a_tracked_column_the_snapshot_lacks_in_the_same_words(tmp_path):
    """The check runs in each history sink's ``accept``, before anything is staged."""
    from pyspark.sql import types as T

    from diffcdc.sinks.base import ChangeSet, SinkTable
    from diffcdc.sinks.delta.sink import DeltaSink
    from diffcdc.sinks.postgres.sink import PostgresSink

    table = SinkTable("T", ("id",))
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("Price",
                                                                           T.DoubleType())])
    changes = ChangeSet(table, 1, "s1", schema, None, True, 0, 0, 0,  # type: ignore[arg-type]
                        snapshot_time=dt.datetime(2026, 1, 1, tzinfo=UTC))
    sinks = [
        DeltaSink("h", table, DeltaSinkConfig(path=str(tmp_path / "h"), mode="scd2",
                                              track_history_columns=["price", "gone"])),
        PostgresSink("h", table, PostgresSinkConfig(host="h", dbname="d", mode="scd2",
                                                    track_history_columns=["price", "gone"])),
    ]
    messages = []
    for sink in sinks:
        with pytest.raises(ConfigError) as refused:
            sink.accept(changes)
        messages.append(str(refused.value))
    assert messages[0] == messages[1] and "['gone'] are not columns" in messages[0], messages


def test_a_version_is_published_with_the_tracking_it_was_staged_with(spark, postgres, tmp_path,
                                                                      monkeypatch):
    """Version 2 (a change of the untracked ``b`` only, and one of ``a``) is committed while
    a lock keeps the PostgreSQL sink from publishing it; the tracking is then taken out of the
    config. The next run publishes version 2 as it was staged (``b`` restated in place), as the
    Delta history did at once; version 3 follows the new config (every column tracked)."""

    monkeypatch.setenv(PG_PASSWORD_ENV, postgres.password)
    root = str(tmp_path)
    schema = pg_schema_of(root)

    def table(**tracking: Any) -> TableConfig:
        common = {"mode": "scd2", **tracking}
        return TableConfig(name="T", source=ws.source, keys=KEYS, snapshot_time="id:%Y-%m-%d",
                           sinks=[{"type": "delta", "name": "delta", "path": f"{root}/lake/h",
                                   **common},
                                  {"type": "postgres", "name": "pg", "url": postgres.jdbc_url,
                                   "user": postgres.user, "password_env": PG_PASSWORD_ENV,
                                   "schema": schema, "table": "h", "lock_timeout": 1,
                                   **common}])

    ws = Workspace(root)
    ws.table = table(track_history_columns=["a"])
    columns = ["k1", "Sub Key", "a", "b"]

    def write(day: int, values: list[tuple[Any, Any]]) -> None:
        rows = {(i, "s"): {"a": a, "b": b} for i, (a, b) in enumerate(values)}
        ws.write(f"2026-01-{day:02d}.parquet", _table(rows, columns))

    write(1, [("x", 1), ("y", 1)])
    ws.run(spark)
    write(2, [("x", 2), ("z", 1)])  # key 0: only b (untracked); key 1: a (tracked)
    with postgres.locked(schema, "h"), pytest.raises(Exception, match="lock"):
        ws.run(spark)
    assert TableState(ws.state, "T").head().unpublished == ["pg"]
    ws.table = table()  # every column tracked from now on
    ws.run(spark)  # version 2 published with the tracking it was staged with
    write(3, [("x", 3), ("z", 1)])
    ws.run(spark)
    delta, pg = history_rows(f"{root}/lake/h"), _pg_rows(postgres, schema, "h")
    assert canonical(pg) == canonical(delta)
    key0 = sorted((r["__START_AT"], r["b"], r["__CHANGED_COLUMNS"]) for r in pg if r["k1"] == 0)
    assert key0 == [(1, 2, None), (3, 3, ["b"])]  # b restated at 2, a new row at 3
