"""The JDBC source against a real PostgreSQL server (tests/support/postgres_server.py).

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
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from diffcdc.config import TableConfig
from diffcdc.core.quality_config import QualityConfig
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.errors import ConfigError, DiffcdcError, InputRefused, SourceError, SourceUnavailable
from diffcdc.sources.jdbc_session import JdbcSession
from diffcdc.sources.snapshot_time import read_time
from diffcdc.state.store import TableState
from tests.support.postgres_server import JDBC_JAR, finish
from tests.support.postgres_tables import KINDS, TYPED, WIDE

pytestmark = [pytest.mark.slow, pytest.mark.integration]
ENV = "DIFFCDC_TEST_PG_PASSWORD"
OPEN = QualityConfig(min_row_ratio=None, max_row_ratio=None, max_delete_ratio=None, allow_empty=True)



@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres: Any) -> Path:
    monkeypatch.setenv(ENV, postgres.password)
    return tmp_path


def _table(ws: Path, pg: Any, keys: list[str], **source: Any) -> TableConfig:
    src = {"type": "jdbc", "url": pg.jdbc_url, "user": pg.user, "password_env": ENV, **source}
    return TableConfig(name="T", source=src, keys=keys, landing=str(ws / "landing"), keep_snapshots=2)


def _run(spark: Any, ws: Path, table: TableConfig):
    return run_table(spark, table, str(ws / "state"), RunOptions(quality=OPEN))


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
    before = dt.datetime.now(dt.timezone.utc)
    assert [s.snapshot_id for s in _run(spark, ws, table).snapshots] == ["00000007"]
    # the as-of time of a database read is the read's start, whatever its snapshot id
    (commit,) = TableState(str(ws / "state"), "T").commits()
    assert before <= read_time(commit.record.snapshot_time) <= dt.datetime.now(dt.timezone.utc)
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


# --- Lossless types: every value arrives as the database's own text of it, or is refused ---



def _texts(pg: Any, table: str, columns: list[str], key: str = "id") -> dict[Any, dict[str, str | None]]:
    """The database's own text of every value (NULL: None), by key."""
    out: dict[Any, dict[str, str | None]] = {}
    select = ", ".join(f"coalesce({c}::text, '<NULL>')" for c in [key, *columns])
    for line in pg.sql(f"SELECT {select} FROM {table}").splitlines():
        values = [None if v == "<NULL>" else v for v in line.split("|")]
        out[values[0]] = dict(zip(columns, values[1:]))
    return out


def _refused_first_run(ws: Path, exc: DiffcdcError) -> str:
    text = str(exc)
    assert "\n" not in text and exc.exit_code == 3 and "table T" in text
    assert not (ws / "state" / "T").exists() and not (ws / "landing").exists()
    return text


def test_wide_numeric_refused_by_default_naming_column_type_and_setting(spark, postgres, ws):
    postgres.sql(WIDE)
    with pytest.raises(InputRefused) as err:
        _run(spark, ws, _table(ws, postgres, ["id"], table="wide"))
    text = _refused_first_run(ws, err.value)
    assert "column n50 has database type numeric(50,10)" in text
    assert 'wide_numeric = "string" or "decimal"' in text and 'n50 = "string"' in text


def test_wide_numeric_as_string_is_the_databases_text(spark, postgres, ws):
    postgres.sql(WIDE)
    table = _table(ws, postgres, ["id"], table="wide", wide_numeric="string")
    (snap,) = _run(spark, ws, table).snapshots
    copy = spark.read.parquet(_copy(ws, snap.snapshot_id))
    types = dict(copy.dtypes)
    assert (types["n50"], types["nu"], types["arr"]) == ("string", "string", "string")
    # numeric(p,s) with p <= 38 is decimal(p,s) exactly; a negative scale or s > p too
    assert (types["n12"], types["neg"], types["tiny"]) == ("decimal(12,3)", "decimal(7,0)", "decimal(5,5)")
    columns = ["n50", "nu", "arr", "n12", "neg", "tiny"]
    expected = _texts(postgres, "wide", columns)
    got = {str(r["id"]): {c: None if r[c] is None else (r[c] if isinstance(r[c], str) else format(r[c], "f"))
                          for c in columns} for r in copy.collect()}
    assert got == expected
    assert got["4"]["n50"] == "123456789012345678901234567890123456789.0123456789"
    assert got["3"]["nu"] == "NaN" and got["1"]["nu"] == "0.000000000000000000000001"
    for result in verify_table(spark, table, str(ws / "state"), _copy(ws, snap.snapshot_id)).values():
        assert result.identical, result


def test_wide_numeric_as_decimal_only_when_every_value_fits(spark, postgres, ws):
    postgres.sql(WIDE)
    # Rows 3 (NaN) and 4 (39 integer digits) cannot be decimal(38,s): the read fails at the
    # first such value, in one line naming the column and the value; nothing is committed.
    table = _table(ws, postgres, ["id"], table="wide", wide_numeric="decimal",
                   column_types={"arr": "string"})
    with pytest.raises(InputRefused) as err:
        _run(spark, ws, table)
    text = _refused_first_run(ws, err.value)
    assert re.search(r"column (n50|nu) \(numeric(\(50,10\))?\) holds a value decimal\(38,(10|18)\) "
                     r"cannot hold exactly: (NaN|0\.0{23}1|123456789012345678901234567890123456789\.0123456789);",
                     text), text
    assert 'column_types = { n50 = "string" }' in text or 'column_types = { nu = "string" }' in text
    # 1e-24 has more decimals than decimal(38,18) holds: refused too, never rounded to 0.
    postgres.sql("DELETE FROM wide WHERE id IN (3, 4)")
    with pytest.raises(InputRefused, match=r"column nu \(numeric\) holds a value decimal\(38,18\) "
                       r"cannot hold exactly: 0\.000000000000000000000001;"):
        _run(spark, ws, table)
    postgres.sql("UPDATE wide SET nu = 1e-18 WHERE id = 1")
    (snap,) = _run(spark, ws, table).snapshots
    copy = spark.read.parquet(_copy(ws, snap.snapshot_id))
    assert dict(copy.dtypes)["n50"] == "decimal(38,10)" and dict(copy.dtypes)["nu"] == "decimal(38,18)"
    got = {str(r["id"]): {c: None if r[c] is None else format(r[c].normalize(), "f") for c in ("n50", "nu")}
           for r in copy.collect()}
    expected = _texts(postgres, "wide", ["n50", "nu"])
    assert got == {k: {c: v and format(decimal.Decimal(v).normalize(), "f") for c, v in row.items()}
                   for k, row in expected.items()}
    assert got["2"]["n50"] == "12345.6789012345" and got["1"]["nu"] == "0.000000000000000001"


def test_column_types_decimal_checked_value_by_value(spark, postgres, ws):
    postgres.sql(WIDE)
    table = _table(ws, postgres, ["id"], query="SELECT id, nu FROM wide WHERE id IN (1, 2, 5)",
                   column_types={"nu": "decimal(38,24)"})
    (snap,) = _run(spark, ws, table).snapshots
    copy = spark.read.parquet(_copy(ws, snap.snapshot_id))
    assert dict(copy.dtypes)["nu"] == "decimal(38,24)"
    got = {str(r["id"]): {"nu": None if r["nu"] is None else format(r["nu"].normalize(), "f")}
           for r in copy.collect()}
    assert got == {k: v for k, v in _texts(postgres, "wide", ["nu"]).items() if k in got}
    postgres.sql("UPDATE wide SET nu = 1e-25 WHERE id = 5")  # 25 decimals: does not fit
    with pytest.raises(InputRefused, match=r"column nu \(numeric\) holds a value decimal\(38,24\) "
                       r"cannot hold exactly: 0\.0000000000000000000000001;") as err:
        _run(spark, ws, table)
    assert "\n" not in str(err.value)
    assert [c.snapshot_id for c in TableState(str(ws / "state"), "T").commits()] == [snap.snapshot_id]
    bad = _table(ws, postgres, ["id"], table="wide", column_types={"nope": "string"})
    with pytest.raises(ConfigError, match="column_types names column nope, which the source does not have"):
        _run(spark, ws, bad)




def _pg_text(value: Any) -> str | None:
    """A value Spark keeps native (the types of KINDS) as PostgreSQL prints it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, list):
        return "{" + ",".join(_pg_element(v) for v in value) + "}"
    if isinstance(value, (bytes, bytearray)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return str(value)


def _pg_element(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str) and (value == "" or any(ch in value for ch in ',{}" \\')):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(_pg_text(value))


def _spark_day(pg_day: str, era: str) -> str:
    """PostgreSQL's 'YYYY-MM-DD' + era as Spark prints a date (year 0 = 1 BC, +YYYYY)."""
    year, rest = pg_day[: pg_day.index("-", 1)], pg_day[pg_day.index("-", 1):]
    number = int(year) if era == "AD" else 1 - int(year)
    text = ("-" if number < 0 else "") + str(abs(number)).zfill(4)
    return ("+" + text if number > 9999 else text) + rest


def test_postgres_types_arrive_as_the_databases_text(spark, postgres, ws):
    """Each column of KINDS, read and committed, against the database's own text of each value."""
    postgres.sql(KINDS)
    table = _table(ws, postgres, ["id"], table="kinds")
    (snap,) = _run(spark, ws, table).snapshots
    path = _copy(ws, snap.snapshot_id)
    copy = spark.read.parquet(path)
    types = dict(copy.dtypes)
    as_text = ("m", "t", "tz", "iv", "bits")  # Spark's own mapping changes these: their text
    assert {c: types[c] for c in as_text} == dict.fromkeys(as_text, "string")
    assert (types["ts"], types["tstz"], types["d"], types["na"], types["i2"]) == (
        "timestamp", "timestamp", "date", "array<decimal(10,2)>", "array<array<int>>")
    # Dates and timestamps as text in Spark (UTC session) and in PostgreSQL (in UTC): the
    # calendar too (a BC date, year 12000, the first day after the Julian-Gregorian switch).
    us = "yyyy-MM-dd HH:mm:ss.SSSSSS"
    moments = {str(r["id"]): tuple(r)[1:] for r in copy.selectExpr(
        "id", f"date_format(ts, '{us}')", f"date_format(tstz, '{us}')", "cast(d as string)",
        f"array_join(transform(tsa, x -> date_format(x, '{us}')), ',')",
    ).collect()}
    pg_us = "'YYYY-MM-DD HH24:MI:SS.US'"
    for key, want in _texts(postgres, "kinds", [
        f"to_char(ts, {pg_us})", f"to_char(tstz AT TIME ZONE 'UTC', {pg_us})", "to_char(d, 'YYYY-MM-DD')",
        "to_char(d, 'BC')",
        f"CASE WHEN tsa IS NOT NULL THEN array_to_string(array(SELECT to_char(x, {pg_us}) FROM unnest(tsa) x), ',') END",
    ]).items():
        ts, tstz, day, era, tsa = want.values()
        spark_ts, spark_tstz, spark_day, spark_tsa = moments[key]
        spark_tstz = spark_tstz and spark_tstz.lstrip("+")  # Spark writes year 12000 as +12000
        assert (spark_ts, spark_tstz, spark_day, spark_tsa) == (
            ts, tstz, day and _spark_day(day, str(era)), tsa), key
    columns = ["m", "t", "tz", "iv", "ia", "i2", "ta", "na", "ea", "j", "jb", "b", "u", "e", "bits"]
    rows = copy.select("id", "c", *columns).collect()  # Python has no BC dates: not collected
    got = {str(r["id"]): {c: r[c] if isinstance(r[c], str) else _pg_text(r[c]) for c in columns}
           for r in rows}
    assert got == _texts(postgres, "kinds", columns)
    assert {r["id"]: r["c"] for r in rows} == {1: "ab  ", 2: "    ", 3: None}  # char(4) keeps its padding
    # The landing zone replays what was committed. `diffcdc verify` compares in Python, whose
    # datetime ends at year 9999 and cannot take 0001-01-01 00:00: the dates and timestamps of
    # year 1, 44 BC and 12000 stay out of this check (test_types_round_trip_and_replay replays
    # ordinary ones).
    other = ws / "replay"
    rest = ", ".join(c for c in ["id", *columns, "c", "tsa"])
    replayed = _table(other, postgres, ["id"], query=f"SELECT {rest} FROM kinds")
    (snap2,) = _run(spark, other, replayed).snapshots
    for result in verify_table(spark, replayed, str(other / "state"), _copy(other, snap2.snapshot_id)).values():
        assert result.identical, result


@pytest.mark.parametrize(("column", "value", "shown"), [
    ("timestamp", "'infinity'", "infinity"),
    ("timestamptz", "'-infinity'", "-infinity"),
    ("date", "'infinity'", "infinity"),
    ("date", "'1582-10-10'", "1582-10-10"),  # in the Julian-Gregorian gap: read as 10-20
    ("timestamptz", "'294270-01-01 00:00+00'", "294270-01-01 00:00:00+00"),  # past Spark's range
    ("timestamp[]", "ARRAY['2020-01-01', 'infinity']::timestamp[]", "infinity"),
    ("numeric(10,2)", "'NaN'", "NaN"),
    ("stamp", "'infinity'", "infinity"),  # a domain over timestamp
])
def test_values_spark_would_change_are_refused_or_read_as_text(spark, postgres, ws, column, value, shown):
    """Spark reads 'infinity' as 9999-12-31 23:59:59.999, a gap day ten days later: refused,
    one line naming the column and the value; ``column_types = {v = "string"}`` reads the text."""
    postgres.sql("DROP TABLE IF EXISTS inf; DROP DOMAIN IF EXISTS stamp; CREATE DOMAIN stamp AS timestamp;"
                 f"CREATE TABLE inf (id int PRIMARY KEY, v {column});"
                 f"INSERT INTO inf VALUES (1, NULL), (2, {value})")
    with pytest.raises(InputRefused) as err:
        _run(spark, ws, _table(ws, postgres, ["id"], table="inf"))
    text = _refused_first_run(ws, err.value)
    named = "timestamp" if column == "stamp" else column  # the driver names a domain's base type
    assert f"column v ({named}) holds a value" in text and f"cannot hold exactly: {shown};" in text
    table = _table(ws, postgres, ["id"], table="inf", column_types={"v": "string"})
    (snap,) = _run(spark, ws, table).snapshots
    rows = {r["id"]: r["v"] for r in spark.read.parquet(_copy(ws, snap.snapshot_id)).collect()}
    assert rows == {1: None, 2: postgres.sql("SELECT v::text FROM inf WHERE id = 2")}


def test_drop_table_during_partitioned_read_fails_in_bounded_time(spark, postgres, ws, monkeypatch):
    """A DROP TABLE queued behind the read's held snapshot blocks every partition's query (they
    queue behind the DROP): without a lock time-out the run and the DROP wait for ever. With
    one, the run fails in one line, nothing is committed, and the DROP proceeds."""
    from diffcdc.sources.jdbc import JdbcSource

    postgres.sql("DROP TABLE IF EXISTS dropped; CREATE TABLE dropped (id int PRIMARY KEY, v text);"
                 "INSERT INTO dropped SELECT g, 'x' FROM generate_series(1, 5000) g")
    planned = JdbcSource._plan
    dropping: list[subprocess.Popen[str]] = []

    def plan_then_drop(self: JdbcSource, session: JdbcSession):
        plan = planned(self, session)  # the held transaction has read the table: it holds a lock
        dropping.append(postgres.popen_sql("DROP TABLE dropped;"))
        deadline = time.monotonic() + 30
        while postgres.sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND query LIKE 'DROP TABLE dropped%'") != "1":
            assert time.monotonic() < deadline, "the DROP never waited for the read's lock"
            time.sleep(0.1)
        return plan

    monkeypatch.setattr(JdbcSource, "_plan", plan_then_drop)
    table = _table(ws, postgres, ["id"], table="dropped", partition_column="id", num_partitions=3,
                   lock_timeout=2)
    started = time.monotonic()
    # Should the read wait for ever again, the DROP is cancelled after 120 s: the test fails
    # (the read succeeds, the DROP fails) instead of hanging the suite.
    guard = threading.Timer(120, postgres.sql, [
        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE 'DROP TABLE dropped%'"])
    guard.start()
    try:
        with pytest.raises(SourceUnavailable, match=r"not granted within lock_timeout = 2 s") as err:
            _run(spark, ws, table)
        failed_after = time.monotonic() - started
    finally:
        guard.cancel()
        errors = [finish(proc, timeout=60) for proc in dropping]
    assert failed_after < 60 and errors == [""]
    _assert_refused_cleanly(ws, err.value, postgres.password)
    assert postgres.sql("SELECT to_regclass('dropped') IS NULL") == "t"  # the DROP went through


def test_statement_timeout_fails_a_long_query_in_one_line(spark, postgres, ws):
    postgres.sql("DROP TABLE IF EXISTS slow; CREATE TABLE slow (id int PRIMARY KEY); INSERT INTO slow VALUES (1)")
    table = _table(ws, postgres, ["id"], query="SELECT id FROM slow, pg_sleep(5)", statement_timeout=1)
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"ran longer than statement_timeout = 1 s") as err:
        _run(spark, ws, table)
    assert time.monotonic() - started < 5
    _assert_refused_cleanly(ws, err.value, postgres.password)


def test_cli_missing_password_variable_is_found_before_spark_starts(postgres, ws):
    config = ws / "diffcdc.toml"
    config.write_text(
        '[diffcdc]\nstate = "state"\nlanding = "landing"\n'
        f'[tables.C.source]\ntype = "jdbc"\nurl = "{postgres.jdbc_url}"\ntable = "c"\n'
        f'user = "{postgres.user}"\npassword_env = "DIFFCDC_TEST_NOT_SET"\n[tables.C]\nkeys = ["id"]\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST") and k != "DIFFCDC_TEST_NOT_SET"}
    done = subprocess.run([sys.executable, "-m", "diffcdc.cli", "run", "--config", str(config)],
                          env=env, capture_output=True, text=True, timeout=120, cwd=ws)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [x for x in (done.stdout + done.stderr).splitlines() if "DIFFCDC_TEST_NOT_SET" in x]
    assert lines, done.stdout + done.stderr
    for line in lines:  # the table's failure (its log line and its summary line)
        assert "table C" in line and "environment variable DIFFCDC_TEST_NOT_SET (password_env) is not set" in line
    assert not (ws / "state" / "_logs").exists()  # no run log: Spark never started


def test_numeric_array_as_checked_decimal(spark, postgres, ws):
    postgres.sql("DROP TABLE IF EXISTS na; CREATE TABLE na (id int PRIMARY KEY, v numeric[]);"
                 "INSERT INTO na VALUES (1, ARRAY[1.5, 1e-24, NULL]), (2, '{}'), (3, NULL), (4, ARRAY[-4.25])")
    table = _table(ws, postgres, ["id"], table="na", wide_numeric="decimal",
                   column_types={"v": "decimal(30,24)"})
    (snap,) = _run(spark, ws, table).snapshots
    copy = spark.read.parquet(_copy(ws, snap.snapshot_id))
    assert dict(copy.dtypes)["v"] == "array<decimal(30,24)>"
    got = {str(r["id"]): {"v": _pg_text(None if r["v"] is None else [
        None if x is None else decimal.Decimal(x).normalize() for x in r["v"]])} for r in copy.collect()}
    assert {k: {"v": v["v"] and v["v"].replace("1E-24", "0.000000000000000000000001")}
            for k, v in got.items()} == _texts(postgres, "na", ["v"])
    postgres.sql("UPDATE na SET v = ARRAY[2, 1e-25] WHERE id = 2")
    with pytest.raises(InputRefused, match=r"column v \(numeric\[\]\) holds a value decimal\(30,24\) "
                       r"cannot hold exactly: 0\.0{24}1;"):
        _run(spark, ws, table)


def test_checks_respect_the_querys_own_conditions_and_partitions(spark, postgres, ws):
    """A check runs on the rows the query returns (not on rows its WHERE drops), also on the
    partition column, whose check sits in the WHERE clause so Spark's ranges use its index."""
    postgres.sql("DROP TABLE IF EXISTS pt; CREATE TABLE pt (id int PRIMARY KEY, at timestamp, n numeric(8,2));"
                 "INSERT INTO pt SELECT g, '2026-01-01'::timestamp + g * interval '1 hour', g FROM "
                 "generate_series(1, 300) g; INSERT INTO pt VALUES (0, 'infinity', 'NaN')")
    query = _table(ws, postgres, ["id"], query="SELECT * FROM pt WHERE at <> 'infinity' AND n <> 'NaN'",
                   partition_column="at", num_partitions=3)
    (snap,) = _run(spark, ws, query).snapshots
    assert snap.rows == 300
    table = _table(ws / "t", postgres, ["id"], table="pt", partition_column="at", num_partitions=3)
    with pytest.raises(InputRefused, match=r"column (at|n) \((timestamp|numeric\(8,2\))\) holds a value"):
        _run(spark, ws / "t", table)
    from diffcdc.sources.jdbc import JdbcSource

    held = JdbcSession(spark, table.source, postgres.password)
    try:
        relation = JdbcSource(table.source, "T")._plan(held).relation
    finally:
        held.close()
    # A partition's query: Spark's range on the partition column, which has an index.
    plan = postgres.sql(
        "CREATE INDEX IF NOT EXISTS pt_at ON pt (at); SET enable_seqscan = off; "
        f"EXPLAIN SELECT * FROM {relation} WHERE at >= '2026-01-02' AND at < '2026-01-03'")
    assert re.search(r"Index Cond: \(\(?at >= ", plan), plan


# --- The type plan alone (no database): other databases, config values ---


def _col(name: str, jdbc_type: int, type_name: str, precision: int, scale: int):
    from diffcdc.sources.jdbc_types import Column

    return Column(name, jdbc_type, type_name, precision, scale)


def test_other_databases_wide_decimal_refused_or_read_as_string():
    from diffcdc.sources.jdbc_types import plan_read

    columns = [_col("id", 4, "INT", 10, 0), _col("amount", 3, "DECIMAL", 65, 30),
               _col("fine", 3, "DECIMAL", 12, 2), _col("odd `name`", 3, "DECIMAL", 40, 0)]
    plan = dict(relation="erp.orders", postgres=False, table="Orders")
    with pytest.raises(InputRefused, match=r"table Orders: column amount has database type DECIMAL\(65,30\), wider "
                       r"than Spark's decimal \(38 digits\); nothing was read — choose column_types = "
                       r'\{ amount = "string" \} or wide_numeric = "string"'):
        plan_read(columns, wide_numeric="refuse", column_types={}, **plan)
    read = plan_read(columns, wide_numeric="string", column_types={}, **plan)
    assert (read.relation, read.custom_schema) == ("erp.orders", "`amount` STRING, `odd ``name``` STRING")
    read = plan_read(columns, wide_numeric="refuse",
                     column_types={"amount": "string", "odd `name`": "string", "fine": "String"}, **plan)
    assert read.custom_schema == "`amount` STRING, `fine` STRING, `odd ``name``` STRING"
    with pytest.raises(ConfigError, match="column amount: a decimal checked value by value needs PostgreSQL"):
        plan_read(columns, wide_numeric="decimal", column_types={}, **plan)
    with pytest.raises(ConfigError, match="column_types names column Amount, which the source does not have"):
        plan_read(columns, wide_numeric="string", column_types={"Amount": "string"}, **plan)
    assert plan_read(columns[:3][::2], wide_numeric="refuse", column_types={}, **plan).custom_schema is None


@pytest.mark.parametrize(("value", "error"), [
    ({"a": "text"}, "'text' is not a type diffcdc reads a column as"),
    ({"a": "decimal(39,2)"}, r"decimal\(39,2\) is not a Spark decimal"),
    ({"a": "decimal(10,11)"}, r"decimal\(10,11\) is not a Spark decimal"),
    ({"a": "decimal(0,0)"}, r"decimal\(0,0\) is not a Spark decimal"),
])
def test_column_types_values_checked_when_the_config_is_read(value, error):
    from pydantic import ValidationError

    from diffcdc.sources.config import JdbcSourceConfig

    with pytest.raises(ValidationError, match=error):
        JdbcSourceConfig(type="jdbc", url="jdbc:postgresql://db/erp", table="t", column_types=value)
    with pytest.raises(ValidationError, match="wide_numeric"):
        JdbcSourceConfig(type="jdbc", url="jdbc:postgresql://db/erp", table="t", wide_numeric="round")
    ok = JdbcSourceConfig(type="jdbc", url="jdbc:postgresql://db/erp", table="t",
                          column_types={"a": "decimal(38, 10)", "b": "STRING"}, lock_timeout=0.5)
    assert ok.lock_timeout == 0.5 and ok.statement_timeout == 86_400


# --- MariaDB 10.11 (a legacy source users bring), through the CLI (it adds the driver jar) ---

LEGACY = """
SET SESSION sql_mode = '';
DROP TABLE IF EXISTS legacy;
CREATE TABLE legacy (id int PRIMARY KEY, d65 DECIMAL(65,30), ub BIGINT UNSIGNED, t1 TINYINT(1),
  dt DATETIME(6), ts TIMESTAMP(6) NULL, d DATE, b1 BIT(1), b8 BIT(8), b64 BIT(64),
  e ENUM('a', 'bb', 'ccc'), st SET('x', 'y', 'z'), j JSON, l1 VARCHAR(20) CHARACTER SET latin1,
  u8 VARCHAR(20) CHARACTER SET utf8mb4, tm TIME(6), yr YEAR, c CHAR(4), d10 DECIMAL(10,2));
INSERT INTO legacy VALUES
 (1, 12345678901234567890123456789012345.123456789012345678901234567891, 18446744073709551615, 2,
  '2026-03-29 02:30:00.123456', '2026-11-23 07:35:00.000001', '1000-01-01', b'1', b'10000001',
  b'1111111111111111111111111111111111111111111111111111111111111111', 'a', 'x,z',
  '{"a": 1.50,  "b": [1, 2]}', 'Zürich ÿ', 'Zürich ☃ 😀', '-838:59:59.000000', 2026, 'ab', -0.01),
 (2, -0.000000000000000000000000000001, 0, -128, '1000-01-01 00:00:00', '1970-01-01 00:00:01',
  '9999-12-31', b'0', b'0', b'0', 'ccc', '', '[]', '', '', '00:00:00.5', 1901, '', 99999999.99),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL);
"""
#: Each column as MariaDB prints it, and the same from Spark's copy (UTC on both sides).
LEGACY_TEXT = {
    "d65": ("CAST(d65 AS CHAR)", "d65"), "ub": ("CAST(ub AS CHAR)", "cast(ub as string)"),
    "t1": ("CAST(t1 AS CHAR)", "cast(t1 as string)"),
    "dt": ("CAST(dt AS CHAR)", "date_format(dt, 'yyyy-MM-dd HH:mm:ss.SSSSSS')"),
    "ts": ("CAST(ts AS CHAR)", "date_format(ts, 'yyyy-MM-dd HH:mm:ss.SSSSSS')"),
    "d": ("CAST(d AS CHAR)", "cast(d as string)"),
    "b1": ("CAST(b1 + 0 AS CHAR)", "cast(cast(b1 as int) as string)"),
    "b8": ("CAST(b8 + 0 AS CHAR)", "cast(b8 as string)"), "b64": ("CAST(b64 + 0 AS CHAR)", "cast(b64 as string)"),
    **{c: (f"CAST({c} AS CHAR)", c) for c in ("e", "st", "j", "l1", "u8", "tm", "c")},
    "yr": ("CAST(yr AS CHAR)", "cast(yr as string)"), "d10": ("CAST(d10 AS CHAR)", "cast(d10 as string)"),
}


@pytest.fixture(scope="module")
def mariadb():
    from tests.support.mariadb_server import MariaDbServer, mariadb_missing

    missing = mariadb_missing()
    if missing:
        raise RuntimeError(f"the MariaDB tests {missing}")
    server = MariaDbServer()
    server.start()
    yield server
    server.remove()


def _mariadb_cli(ws: Path, db: Any, extra: str = "") -> subprocess.CompletedProcess[str]:
    config = ws / "diffcdc.toml"
    config.write_text(
        '[diffcdc]\nstate = "state"\nlanding = "landing"\n[spark]\nmaster = "local[1]"\n'
        f'[tables.L]\nkeys = ["id"]\nkeep_snapshots = 3\n[tables.L.source]\ntype = "jdbc"\n'
        f'url = "jdbc:mysql://127.0.0.1:{db.port}/{db.database}"\ntable = "legacy"\n'
        f'user = "{db.user}"\npassword_env = "{ENV}"\n{extra}'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return subprocess.run(
        [sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--json", "--config", str(config)],
        env={**env, ENV: db.password}, capture_output=True, text=True, timeout=300, cwd=ws,
    )


def test_mariadb_types_arrive_as_the_databases_text(spark, mariadb, tmp_path):
    mariadb.sql(LEGACY)
    refused = _mariadb_cli(tmp_path, mariadb)
    assert refused.returncode == 3, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["tables"][0]["error"]
    assert "column d65 has database type DECIMAL(65,30), wider than Spark's decimal" in error["message"]
    assert 'd65 = "string"' in error["hint"] and not (tmp_path / "state" / "L" / "snapshots").exists()

    done = _mariadb_cli(tmp_path, mariadb, 'column_types = { d65 = "string" }\n')
    assert done.returncode == 0, done.stdout + done.stderr
    (copy_dir,) = (tmp_path / "state" / "L" / "snapshots").iterdir()
    copy = spark.read.parquet(str(copy_dir))
    types = dict(copy.dtypes)
    assert (types["t1"], types["ub"], types["b8"], types["b64"], types["yr"], types["tm"], types["e"]) == (
        "tinyint", "decimal(20,0)", "bigint", "decimal(20,0)", "int", "string", "string")
    assert (types["dt"], types["ts"], types["d"], types["d10"]) == ("timestamp", "timestamp", "date", "decimal(10,2)")
    got = {str(r[0]): list(r)[1:] for r in copy.selectExpr("id", *(s for _, s in LEGACY_TEXT.values())).collect()}
    lines = mariadb.sql("SET time_zone = '+00:00'; SELECT id, "
                        + ", ".join(f"IFNULL({m}, '<NULL>')" for m, _ in LEGACY_TEXT.values()) + " FROM legacy")
    want = {}
    for line in lines.splitlines():
        key, *values = line.split("\t")
        want[key] = [None if v == "<NULL>" else v for v in values]
    assert got == want
    assert got["1"][list(LEGACY_TEXT).index("u8")] == "Zürich ☃ 😀" and got["1"][list(LEGACY_TEXT).index("t1")] == "2"


@pytest.mark.parametrize(("column", "value"), [("d", "'0000-00-00'"), ("dt", "'2026-02-00 10:00:00'")])
def test_mariadb_zero_dates_refused_in_one_line(mariadb, tmp_path, column, value):
    mariadb.sql(f"SET SESSION sql_mode = ''; DROP TABLE IF EXISTS legacy; "
                f"CREATE TABLE legacy (id int PRIMARY KEY, d DATE, dt DATETIME); "
                f"INSERT INTO legacy (id, {column}) VALUES (1, {value}), (2, NULL)")
    done = _mariadb_cli(tmp_path, mariadb)
    assert done.returncode == 3, done.stdout + done.stderr
    error = json.loads(done.stdout)["tables"][0]["error"]
    kind = "date" if column == "d" else "timestamp"
    assert f"column {column} (" in error["message"] and f"holds a value Spark's {kind} cannot hold exactly: " \
        f"{value.strip(chr(39))}" in error["message"], error
    assert "\n" not in error["message"] and error["hint"].startswith(f"read the column as text with column_types = {{ {column} = ")
    snapshots = tmp_path / "state" / "L" / "snapshots"
    assert not snapshots.exists() or not list(snapshots.iterdir())  # nothing kept, nothing committed
    assert not (tmp_path / "landing" / "L").exists() or not list((tmp_path / "landing" / "L").glob("*.parquet"))


def test_mariadb_url_scheme_refused_at_load():
    from pydantic import ValidationError

    from diffcdc.sources.config import JdbcSourceConfig

    with pytest.raises(ValidationError, match="write jdbc:mysql://"):
        JdbcSourceConfig(type="jdbc", url="jdbc:mariadb://db/erp", table="t")
    assert JdbcSourceConfig(type="jdbc", url="jdbc:mysql://db/erp", table="t").driver_class == "org.mariadb.jdbc.Driver"


def test_mariadb_read_behind_ddl_fails_after_lock_timeout(mariadb, tmp_path):
    """An ALTER TABLE waits for a long transaction; every later reader of the table queues
    behind the ALTER (MariaDB's own default wait is a year). The read gives up after
    lock_timeout in one line, and the ALTER proceeds once the transaction ends."""
    mariadb.sql("DROP TABLE IF EXISTS legacy; CREATE TABLE legacy (id int PRIMARY KEY); INSERT INTO legacy VALUES (1)")

    def client(sql: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["mariadb", "--no-defaults", "-S", mariadb.socket, "-u", "root", "-D", mariadb.database,
             "-e", sql], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    holder = client("BEGIN; SELECT id FROM legacy; SELECT SLEEP(60)")
    alter = None
    try:
        deadline = time.monotonic() + 30
        while mariadb.sql("SELECT count(*) FROM information_schema.processlist WHERE info = 'SELECT SLEEP(60)'") != "1":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        alter = client("ALTER TABLE legacy ADD COLUMN x int")
        while mariadb.sql("SELECT count(*) FROM information_schema.processlist "
                          "WHERE state = 'Waiting for table metadata lock'") != "1":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        done = _mariadb_cli(tmp_path, mariadb, "lock_timeout = 2\n")
    finally:
        holder.terminate()
        holder.communicate(timeout=60)
        altered = alter.communicate(timeout=60) if alter is not None else None
    assert done.returncode == 1, done.stdout + done.stderr
    error = json.loads(done.stdout)["tables"][0]["error"]
    assert "a lock on the source was not granted within lock_timeout = 2 s" in error["message"], error
    assert "\n" not in error["message"] and not (tmp_path / "state" / "L").exists()
    assert alter is not None and alter.returncode == 0, altered
    assert mariadb.sql("SELECT count(*) FROM information_schema.columns WHERE table_name = 'legacy' "
                       "AND column_name = 'x'") == "1"  # the ALTER went through


def test_timestamp_without_zone_refused_when_spark_jvm_is_not_in_utc(spark, postgres, ws):
    """PostgreSQL's driver hands a timestamp without time zone over as a wall clock in the
    JVM's zone: Spark would store 07:35 in Berlin, 06:35 UTC. Refused, naming the fix."""
    postgres.sql("DROP TABLE IF EXISTS wall; CREATE TABLE wall (id int PRIMARY KEY, ts timestamp, tstz timestamptz);"
                 "INSERT INTO wall VALUES (1, '2026-11-23 07:35:00', '2026-11-23 07:35:00+00')")
    zones = spark._jvm.java.util.TimeZone
    before = zones.getDefault()
    zones.setDefault(zones.getTimeZone("Europe/Berlin"))
    try:
        raw = spark.read.format("jdbc").options(
            url=postgres.jdbc_url, dbtable="wall", user=postgres.user, password=postgres.password,
            driver="org.postgresql.Driver").load()
        (shown,) = raw.selectExpr("cast(ts as string)").collect()
        assert shown[0] == "2026-11-23 06:35:00"  # what Spark alone would store
        with pytest.raises(InputRefused) as err:
            _run(spark, ws, _table(ws, postgres, ["id"], table="wall"))
        text = _refused_first_run(ws, err.value)
        assert "column ts has database type timestamp, a wall clock Spark's JVM would read in its time " \
               "zone Europe/Berlin" in text and "-Duser.timezone=UTC" in text
        (snap,) = _run(spark, ws, _table(ws, postgres, ["id"], table="wall", column_types={"ts": "string"})).snapshots
        (row,) = spark.read.parquet(_copy(ws, snap.snapshot_id)).selectExpr("ts", "cast(tstz as string)").collect()
        assert tuple(row) == ("2026-11-23 07:35:00", "2026-11-23 07:35:00")  # the instant is unaffected
    finally:
        zones.setDefault(before)
