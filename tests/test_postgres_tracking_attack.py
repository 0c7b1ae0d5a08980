"""Attacks on the PostgreSQL history's tracked columns (issue 42, part TA): the same config
and snapshots through a Delta history sink and a PostgreSQL history sink give the same rows,
and what the tracking cannot mean is refused in one line.

Each history is read back with an independent reader (delta-rs, psycopg), never with the
sink's code."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from diffcdc.config import TableConfig
from tests.support.history import canonical, history_rows
from tests.support.killed_runs import killed_at
from tests.support.sink_kinds import PG_PASSWORD_ENV, pg_history_rows, pg_schema_of
from tests.support.workspace import Workspace

SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.string()), ("b", pa.int64()),
                    ("ts", pa.string())])


def _sinks(root: str, postgres: Any, **common: Any) -> list[dict[str, Any]]:
    """A Delta history sink and a PostgreSQL history sink with the same settings."""
    return [{"type": "delta", "name": "delta", "path": f"{root}/lake/h", "mode": "scd2",
             **common},
            {"type": "postgres", "name": "pg", "url": postgres.jdbc_url, "user": postgres.user,
             "password_env": PG_PASSWORD_ENV, "schema": pg_schema_of(root), "table": "h",
             "mode": "scd2", "lock_timeout": 1, **common}]


def _table(ws: Workspace, root: str, postgres: Any, exclude: list[str], **common: Any
           ) -> TableConfig:
    return TableConfig(name="T", source=ws.source, keys=["id"], snapshot_time="id:%Y-%m-%d",
                       exclude=exclude, sinks=_sinks(root, postgres, **common))


def _write(ws: Workspace, day: int, rows: list[tuple[Any, ...]]) -> None:
    ws.write(f"2026-01-{day:02d}.parquet",
             pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], SCHEMA))


def _pg_rows(postgres: Any, root: str) -> list[dict[str, Any]]:
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=postgres.port, dbname=postgres.database,
                         user=postgres.user, password=postgres.password,
                         autocommit=True) as conn:
        return pg_history_rows(conn, (pg_schema_of(root), "h"), {})


def _open_rows(rows: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    return {r["id"]: (r["a"], r["b"], r["ts"]) for r in rows if r["__END_AT"] is None}


def test_an_update_published_for_a_new_exclude_reaches_both_histories_open_rows(
        spark, postgres, tmp_path, monkeypatch):
    """``exclude = ["ts"]`` added: the version re-fingerprints the table, and a row whose
    ``ts`` changed (a change under the rule of before, docs/normalizers.md) is published as an
    update, which no compared column tells apart from the open row. The PostgreSQL history
    wrote it into the open row (as every current-mode sink applies it); the Delta history
    dropped it, its open row kept the old ``ts`` with exit 0, so the two histories differed."""
    monkeypatch.setenv(PG_PASSWORD_ENV, postgres.password)
    root = str(tmp_path)
    ws = Workspace(root)
    ws.table = _table(ws, root, postgres, [], track_history_columns=["a"])
    _write(ws, 1, [(1, "x", 1, "t1"), (2, "y", 1, "t1")])
    ws.run(spark)
    ws.table = _table(ws, root, postgres, ["ts"], track_history_columns=["a"])
    _write(ws, 2, [(1, "x", 1, "t2"), (2, "y", 5, "t2")])  # 1: ts only; 2: b (untracked), ts
    report = ws.run(spark)
    assert report.snapshots[0].refingerprinted, report  # the exclude's first version
    delta, pg = history_rows(f"{root}/lake/h"), _pg_rows(postgres, root)
    assert canonical(pg) == canonical(delta)
    expected = {1: ("x", 1, "t2"), 2: ("y", 5, "t2")}  # the snapshot, as a current sink holds it
    assert _open_rows(delta) == expected and _open_rows(pg) == expected
    assert len(delta) == 2  # restated in place: no row opened


def test_both_history_sinks_refuse_tracking_a_column_the_table_excludes(tmp_path):
    """``track_history_columns = ["Price"]`` beside the table's ``exclude = ["price"]``: a
    change of Price alone is no update, and one beside another column's is restated in place,
    so the history never opens a row for Price — it was taken, and the history silently kept
    no past Price. Refused at accept, before anything is staged, in the same words by both
    sinks; an except-list naming an excluded column stays taken (it asks for nothing more)."""
    import datetime as dt

    from pyspark.sql import types as T

    from diffcdc.errors import ConfigError
    from diffcdc.sinks.base import ChangeSet, SinkTable
    from diffcdc.sinks.delta.config import DeltaSinkConfig
    from diffcdc.sinks.delta.sink import DeltaSink
    from diffcdc.sinks.postgres.config import PostgresSinkConfig
    from diffcdc.sinks.postgres.sink import PostgresSink

    table = SinkTable("T", ("id",), exclude=("price",))
    schema = T.StructType([T.StructField("id", T.LongType()),
                           T.StructField("Price", T.DoubleType()),
                           T.StructField("Note", T.StringType())])
    changes = ChangeSet(table, 1, "s1", schema, None, True, 0, 0, 0,  # type: ignore[arg-type]
                        snapshot_time=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))

    def sinks(**tracking: Any) -> list[Any]:
        return [DeltaSink("h", table, DeltaSinkConfig(path=str(tmp_path / "h"), mode="scd2",
                                                      **tracking)),
                PostgresSink("h", table, PostgresSinkConfig(host="h", dbname="d", mode="scd2",
                                                            **tracking))]

    messages = []
    for sink in sinks(track_history_columns=["Note", "Price"]):
        with pytest.raises(ConfigError) as refused:
            sink.accept(changes)
        messages.append(str(refused.value))
    assert messages[0] == messages[1], messages
    assert "['Price'] are excluded" in messages[0] and "sink h" in messages[0], messages
    assert "table T" in messages[0] and len(messages[0].splitlines()) == 1
    for sink in sinks(track_history_except_columns=["Price"]):
        sink.accept(changes)


def test_a_version_is_compared_without_the_columns_excluded_when_it_was_staged(
        spark, postgres, tmp_path, monkeypatch):
    """Version 2 (key 1: ``ts`` and ``b`` changed) is committed while a lock keeps the
    PostgreSQL sink from publishing it; then the table's ``exclude`` gets ``ts``. The next run
    published version 2 comparing without ``ts``: ``b`` (untracked) alone changed, restated in
    place, where the Delta history (published at once) opened a row for the change of ``ts``
    — the exclude a version is compared with is the one it was staged with, as its tracking."""

    from diffcdc.state.store import TableState

    monkeypatch.setenv(PG_PASSWORD_ENV, postgres.password)
    root = str(tmp_path)
    ws = Workspace(root)
    ws.table = _table(ws, root, postgres, [], track_history_except_columns=["b"])
    _write(ws, 1, [(1, "x", 1, "t1"), (2, "y", 1, "t1")])
    ws.run(spark)
    _write(ws, 2, [(1, "x", 2, "t2"), (2, "y", 1, "t1")])
    with postgres.locked(pg_schema_of(root), "h"), pytest.raises(Exception, match="lock"):
        ws.run(spark)
    assert TableState(ws.state, "T").head().unpublished == ["pg"]
    ws.table = _table(ws, root, postgres, ["ts"], track_history_except_columns=["b"])
    ws.run(spark)  # version 2 published as it was staged
    delta, pg = history_rows(f"{root}/lake/h"), _pg_rows(postgres, root)
    assert canonical(pg) == canonical(delta)
    key1 = sorted((r["__START_AT"], r["ts"], r["__CHANGED_COLUMNS"]) for r in pg if r["id"] == 1)
    assert key1 == [(1, "t1", None), (2, "t2", ["b", "ts"])]


@pytest.mark.parametrize("point", ["postgres_copied", "postgres_before_commit"])
def test_a_version_killed_in_its_publish_is_republished_with_its_staged_tracking(
        spark, postgres, tmp_path, monkeypatch, point):
    """Killed (``kill -9``) after the COPY into the staging table, or inside the version's
    transaction before its COMMIT; the config's tracking then switched from
    ``track_history_columns = ["a"]`` to ``track_history_except_columns = ["a"]``. The next
    run publishes the version once, as it was staged (key 1's change of ``b`` restated in
    place, key 2's of ``a`` a new row), as the Delta history did before the kill, leaves no
    staging table, and applies the next version with the new tracking."""
    monkeypatch.setenv(PG_PASSWORD_ENV, postgres.password)
    root = str(tmp_path)
    ws = Workspace(root)
    ws.table = _table(ws, root, postgres, [], track_history_columns=["a"], deletes="row")
    _write(ws, 1, [(1, "x", 1, "t1"), (2, "y", 1, "t1"), (3, "z", 1, "t1")])
    ws.run(spark)
    _write(ws, 2, [(1, "x", 2, "t1"), (2, "Y", 1, "t1"), (4, "n", 1, "t")])  # 3 deleted
    killed_at(ws.table, ws.state, root, f"{point}@pg", {"snapshot_time": "id:%Y-%m-%d"})
    ws.table = _table(ws, root, postgres, [], track_history_except_columns=["a"],
                      deletes="row")
    ws.run(spark)
    _write(ws, 3, [(1, "x", 5, "t1"), (2, "Y", 1, "t1"), (4, "m", 1, "t")])
    ws.run(spark)
    delta, pg = history_rows(f"{root}/lake/h"), _pg_rows(postgres, root)
    assert canonical(pg) == canonical(delta)
    key1 = sorted((r["__START_AT"], r["b"], r["__CHANGED_COLUMNS"]) for r in pg if r["id"] == 1)
    assert key1 == [(1, 2, None), (3, 5, ["b"])]  # b restated at 2 (staged), a row at 3
    key4 = sorted((r["__START_AT"], r["a"]) for r in pg if r["id"] == 4)
    assert key4 == [(2, "m")]  # a untracked at 3: restated
    schema = pg_schema_of(root)
    assert postgres.sql(f"SELECT count(*) FROM pg_tables WHERE schemaname = '{schema}' AND "
                        "tablename LIKE '\\_diffcdc\\_%' AND tablename <> '_diffcdc_versions'"
                        ) == "0"
