"""The JDBC source against a real PostgreSQL server (tests/postgres_server.py).

Types survive the read and the replay; a partitioned read sees one database snapshot while a
writer moves rows between partitions; failures (wrong password, unknown table, the server
stopped mid-read) are one-line errors with nothing published and state unchanged; the CLI puts
the driver jar on Spark's classpath.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from diffcdc.config import TableConfig
from diffcdc.core.quality_config import QualityConfig
from diffcdc.engine.run import run_table
from diffcdc.engine.verify import verify_table
from diffcdc.errors import DiffcdcError, SourceError, SourceUnavailable
from diffcdc.sources.jdbc_session import JdbcSession
from diffcdc.state.store import TableState
from tests.postgres_server import JDBC_JAR, finish

pytestmark = [pytest.mark.slow, pytest.mark.integration]
ENV = "DIFFCDC_TEST_PG_PASSWORD"
OPEN = QualityConfig(min_row_ratio=None, max_row_ratio=None, max_delete_ratio=None, allow_empty=True)

TYPED = """
DROP TABLE IF EXISTS typed;
CREATE TABLE typed (
  region text NOT NULL, id int NOT NULL,
  amount numeric(12,3), ratio double precision, big bigint,
  note text, data bytea, ts timestamp, tstz timestamptz, day date, flag boolean,
  uid uuid, doc json, docb jsonb, tags text[], nums int[],
  PRIMARY KEY (region, id)
);
INSERT INTO typed VALUES
 ('eu', 1, 1234.5, 0.25, 9007199254740993, E'Zürich ☃ 😀\\nline two\\r\\n"three", ''four''',
  '\\x00ff10'::bytea, '2026-11-23 07:35:00.123456', '2026-11-23 07:35:00.123456+02',
  '2026-11-23', true, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2]}',
  '{"b": "ü"}', ARRAY['x', 'y,z', NULL], ARRAY[1, 2]),
 ('us', 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 ('eu', 2, -0.001, -0.0, -1, '', '\\x'::bytea, '1970-01-01 00:00:00', '1969-12-31 23:59:59.999999+00',
  '0001-01-01', false, '00000000-0000-0000-0000-000000000000', 'null', '[]', ARRAY[]::text[],
  ARRAY[NULL]::int[]);
"""


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres: Any) -> Path:
    monkeypatch.setenv(ENV, postgres.password)
    return tmp_path


def _table(ws: Path, pg: Any, keys: list[str], **source: Any) -> TableConfig:
    src = {"type": "jdbc", "url": pg.jdbc_url, "user": pg.user, "password_env": ENV, **source}
    return TableConfig(name="T", source=src, keys=keys, landing=str(ws / "landing"), keep_snapshots=2)


def _run(spark: Any, ws: Path, table: TableConfig):
    return run_table(spark, table, str(ws / "state"), quality=OPEN)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()} if root.exists() else {}


def _copy(ws: Path, sid: str) -> str:
    return str(ws / "state" / "T" / "snapshots" / sid)


def test_types_round_trip_and_replay(spark, postgres, ws):
    postgres.sql(TYPED)
    table = _table(ws, postgres, ["region", "id"], table="public.typed")
    first = _run(spark, ws, table)
    (snap,) = first.snapshots
    assert re.fullmatch(r"\d{8}T\d{6}\.\d{6}Z", snap.snapshot_id)
    assert (snap.rows, snap.inserted) == (3, 3)
    rows = {(r["region"], r["id"]): r.asDict() for r in spark.read.parquet(_copy(ws, snap.snapshot_id)).collect()}
    eu1, us1, eu2 = rows[("eu", 1)], rows[("us", 1)], rows[("eu", 2)]
    assert eu1["amount"] == decimal.Decimal("1234.500") and eu1["big"] == 9007199254740993
    assert eu1["note"] == "Zürich ☃ 😀\nline two\r\n\"three\", 'four'"
    assert eu1["data"] == bytearray(b"\x00\xff\x10") and eu2["data"] == bytearray(b"")
    utc = dt.timezone.utc
    # timestamptz is an instant; timestamp (no zone) is read through the JVM's zone (UTC here).
    assert eu1["tstz"].astimezone(utc) == dt.datetime(2026, 11, 23, 5, 35, 0, 123456, tzinfo=utc)
    assert eu1["ts"].replace(tzinfo=None) == dt.datetime(2026, 11, 23, 7, 35, 0, 123456)
    assert eu1["day"] == dt.date(2026, 11, 23) and eu2["day"] == dt.date(1, 1, 1)
    assert eu1["flag"] is True and eu2["flag"] is False
    assert eu1["uid"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert json.loads(eu1["doc"]) == {"a": [1, 2]} and json.loads(eu1["docb"]) == {"b": "ü"}
    assert eu1["tags"] == ["x", "y,z", None] and eu1["nums"] == [1, 2] and eu2["nums"] == [None]
    assert eu2["note"] == "" and eu2["tags"] == []
    assert all(v is None for k, v in us1.items() if k not in ("region", "id"))
    for result in verify_table(spark, table, str(ws / "state"), _copy(ws, snap.snapshot_id)).values():
        assert result.identical, result

    postgres.sql(
        "UPDATE typed SET note = E'ändert\\n', amount = amount + 1 WHERE region = 'eu' AND id = 1;"
        "DELETE FROM typed WHERE region = 'us';"
        "UPDATE typed SET region = 'apac' WHERE region = 'eu' AND id = 2;"  # a key change
        "INSERT INTO typed (region, id, tags) VALUES ('us', 7, ARRAY['new'])"
    )
    second = _run(spark, ws, table)
    (snap2,) = second.snapshots
    assert snap2.snapshot_id > snap.snapshot_id
    assert (snap2.inserted, snap2.updated, snap2.deleted) == (2, 1, 2)
    # The landing zone replayed from nothing gives the table as it is now.
    postgres_now = spark.read.format("jdbc").options(
        url=postgres.jdbc_url, dbtable="typed", user=postgres.user, password=postgres.password,
        driver="org.postgresql.Driver",
    ).load()
    fresh = str(ws / "fresh")
    postgres_now.write.parquet(fresh)
    for result in verify_table(spark, table, str(ws / "state"), fresh).values():
        assert result.identical, result
    state = TableState(str(ws / "state"), "T")
    commits = state.commits()
    assert [c.snapshot_id for c in commits] == [snap.snapshot_id, snap2.snapshot_id]
    assert commits[-1].record.snapshot_path == f"{postgres.jdbc_url} table public.typed"
    assert sorted(os.listdir(ws / "state" / "T" / "snapshots")) == [snap.snapshot_id, snap2.snapshot_id]
    # The password is nowhere: state, reports, landing.
    for root in (ws / "state", ws / "landing"):
        assert not [n for n, body in _files(root).items() if postgres.password.encode() in body]


def test_partitioned_read_sees_one_snapshot_while_rows_move(spark, postgres, ws, monkeypatch):
    """Rows committed after the snapshot export are invisible to every partition.

    Right after the export (inside the read), a writer moves rows from the first partition's
    range to the last one's and changes the total; a continuous writer keeps moving rows during
    the whole read. An inconsistent read would see a row twice or not at all, or the new total.
    """
    n = 40_000
    postgres.sql(
        "DROP TABLE IF EXISTS moving; CREATE TABLE moving (id bigint PRIMARY KEY, v int NOT NULL);"
        f"INSERT INTO moving SELECT g, 1 FROM generate_series(1, {n}) g;"
        "DROP TABLE IF EXISTS moves; CREATE TABLE moves (at timestamptz DEFAULT clock_timestamp())"
    )
    exported = JdbcSession.export_snapshot
    writer: list[subprocess.Popen[str]] = []

    def export_then_write(self: JdbcSession) -> str:
        snapshot = exported(self)
        postgres.sql(  # committed after the export: must not be seen
            "UPDATE moving SET id = id + 1000000, v = 5 WHERE id <= 1000; INSERT INTO moves DEFAULT VALUES"
        )
        moves = "".join(
            f"BEGIN; UPDATE moving SET id = id + 2000000 WHERE id = {i}; "
            "INSERT INTO moves DEFAULT VALUES; COMMIT; SELECT pg_sleep(0.002);\n"
            for i in range(1001, 3001)
        )
        writer.append(postgres.popen_sql(moves))
        return snapshot

    monkeypatch.setattr(JdbcSession, "export_snapshot", export_then_write)
    table = _table(ws, postgres, ["id"], table="moving", partition_column="id", num_partitions=4,
                   fetch_size=500)
    started = postgres.sql("SELECT clock_timestamp()")
    try:
        report = _run(spark, ws, table)
        ended = postgres.sql("SELECT clock_timestamp()")
    finally:
        for proc in writer:
            finish(proc)
    (snap,) = report.snapshots
    copy = spark.read.parquet(_copy(ws, snap.snapshot_id))
    (row,) = copy.selectExpr("count(*) c", "count(distinct id) d", "sum(v) s", "max(id) m").collect()
    assert (row.c, row.d, row.s, row.m) == (n, n, n, n)
    during = int(postgres.sql(
        f"SELECT count(*) FROM moves WHERE at > '{started}' AND at < '{ended}'"
    ))
    assert during > 1  # the writers really committed while the run was reading
    assert int(postgres.sql("SELECT max(id) FROM moving")) > 2_000_000


def test_partitioned_query_with_bounds_from_min_max(spark, postgres, ws):
    postgres.sql(
        "DROP TABLE IF EXISTS q; CREATE TABLE q (id numeric(10,2) PRIMARY KEY, grp int);"
        "INSERT INTO q SELECT g + 0.5, g % 3 FROM generate_series(1, 999) g"
    )
    table = _table(ws, postgres, ["id"], query="SELECT id, grp FROM q WHERE grp <> 2",
                   partition_column="id", num_partitions=3)
    (snap,) = _run(spark, ws, table).snapshots
    assert snap.rows == 666
    assert spark.read.parquet(_copy(ws, snap.snapshot_id)).select("id").distinct().count() == 666


def test_snapshot_id_query_orders_and_skips_same_batch(spark, postgres, ws):
    postgres.sql(
        "DROP TABLE IF EXISTS b; CREATE TABLE b (id int PRIMARY KEY); INSERT INTO b VALUES (1), (2);"
        "DROP TABLE IF EXISTS batch; CREATE TABLE batch (n text); INSERT INTO batch VALUES ('00000007')"
    )
    table = _table(ws, postgres, ["id"], table="b", snapshot_id_query="SELECT max(n) FROM batch")
    assert [s.snapshot_id for s in _run(spark, ws, table).snapshots] == ["00000007"]
    again = _run(spark, ws, table)
    assert again.outcome == "nothing to do" and not again.snapshots
    postgres.sql("INSERT INTO b VALUES (3); UPDATE batch SET n = '00000008'")
    (snap,) = _run(spark, ws, table).snapshots
    assert (snap.snapshot_id, snap.inserted) == ("00000008", 1)
    postgres.sql("UPDATE batch SET n = '00000005'")
    with pytest.raises(DiffcdcError, match="sorts before the last committed snapshot 00000008"):
        _run(spark, ws, table)


def _assert_refused_cleanly(ws: Path, exc: DiffcdcError, password: str) -> None:
    text = str(exc)
    assert "\n" not in text and password not in text and "table T" in text
    assert exc.exit_code == 1
    assert not [n for n in _files(ws / "landing") if not n.endswith("_metadata.json")]
    # A first run that fails leaves no state folder (no ghost table in status) and so no
    # report that could hold the password; the error itself was checked above.
    assert not (ws / "state" / "T").exists()


def test_wrong_password_unknown_table_one_line_errors(spark, postgres, ws, monkeypatch):
    postgres.sql("DROP TABLE IF EXISTS w; CREATE TABLE w (id int PRIMARY KEY); INSERT INTO w VALUES (1)")
    wrong = "not-the-Password-42"
    monkeypatch.setenv(ENV, wrong)
    with pytest.raises(SourceError, match="database refused the login") as err:
        _run(spark, ws, _table(ws, postgres, ["id"], table="w"))
    _assert_refused_cleanly(ws, err.value, wrong)
    monkeypatch.setenv(ENV, postgres.password)
    with pytest.raises(SourceError, match='database refused the query.*"no_such_table"') as err:
        _run(spark, ws, _table(ws, postgres, ["id"], table="no_such_table"))
    _assert_refused_cleanly(ws, err.value, postgres.password)
    monkeypatch.delenv(ENV)
    with pytest.raises(DiffcdcError, match=f"environment variable {ENV}") as err:
        _run(spark, ws, _table(ws, postgres, ["id"], table="w"))
    assert err.value.exit_code == 2


def test_server_stopped_mid_read(spark, postgres, ws, monkeypatch):
    postgres.sql("DROP TABLE IF EXISTS s; CREATE TABLE s (id int PRIMARY KEY); "
                 "INSERT INTO s SELECT generate_series(1, 1000)")
    exported = JdbcSession.export_snapshot

    def export_then_stop(self: JdbcSession) -> str:
        snapshot = exported(self)
        postgres.stop("immediate")  # the read has begun: the partitions find no server
        return snapshot

    monkeypatch.setattr(JdbcSession, "export_snapshot", export_then_stop)
    try:
        with pytest.raises(SourceUnavailable, match="database connection failed") as err:
            _run(spark, ws, _table(ws, postgres, ["id"], table="s", partition_column="id",
                                   num_partitions=2))
    finally:
        postgres.start()
    _assert_refused_cleanly(ws, err.value, postgres.password)
    assert err.value.transient


@pytest.mark.skipif(not os.path.exists(JDBC_JAR), reason="needs Debian's libpostgresql-jdbc-java")
def test_cli_puts_the_driver_on_the_classpath_and_exits_nonzero(postgres, ws):
    postgres.sql("DROP TABLE IF EXISTS c; CREATE TABLE c (id int PRIMARY KEY, v text);"
                 "INSERT INTO c VALUES (1, 'a'), (2, 'b')")
    config = ws / "diffcdc.toml"
    config.write_text(
        '[diffcdc]\nstate = "state"\nlanding = "landing"\n[spark]\nmaster = "local[1]"\n'
        f'[tables.C.source]\ntype = "jdbc"\nurl = "{postgres.jdbc_url}"\ntable = "c"\n'
        f'user = "{postgres.user}"\npassword_env = "{ENV}"\n[tables.C]\nkeys = ["id"]\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    command = [sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--json", "--config", str(config)]
    started = time.monotonic()
    ok = subprocess.run(command, env={**env, ENV: postgres.password}, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["tables"][0]["snapshots"][0]["inserted"] == 2
    bad = subprocess.run(command, env={**env, ENV: "wrong-pw-123"}, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1
    assert "database refused the login" in bad.stdout and "wrong-pw-123" not in bad.stdout + bad.stderr
    assert time.monotonic() - started < 300


def test_partition_session_reads_the_snapshot_with_autocommit_on_or_off(spark, postgres, ws):
    """Spark's PostgreSQL dialect turns autocommit off today; the import must not depend on it."""
    from diffcdc.sources.jdbc import session_init

    postgres.sql("DROP TABLE IF EXISTS ac; CREATE TABLE ac (id int); INSERT INTO ac VALUES (1)")
    table = _table(ws, postgres, ["id"], table="ac")
    held = JdbcSession(spark, table.source, postgres.password)
    try:
        snapshot = held.export_snapshot()
        postgres.sql("INSERT INTO ac VALUES (2)")  # after the export: invisible to the import
        props = spark._jvm.java.util.Properties()
        props.setProperty("user", postgres.user)
        props.setProperty("password", postgres.password)
        for autocommit in (False, True):
            conn = spark._jvm.org.postgresql.Driver().connect(postgres.jdbc_url, props)
            try:
                conn.setAutoCommit(autocommit)
                conn.createStatement().execute(session_init(snapshot))
                rs = conn.createStatement().executeQuery("SELECT count(*) FROM ac")
                rs.next()
                assert rs.getInt(1) == 1, f"autocommit={autocommit}"
            finally:
                conn.close()
    finally:
        held.close()
