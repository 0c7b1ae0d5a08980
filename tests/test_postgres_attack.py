"""Attacks on the PostgreSQL sink (issue 42, part PA): a target a DBA changed behind the sink's
back in ways its row count and oid do not show must be refused, not published into with exit 0
(a column dropped would come back by ADD COLUMN, NULL in every row the version does not touch;
a column retyped to a narrower type would round the version's values)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main
from diffcdc.config import TableConfig
from diffcdc.engine.run import RunOptions, RunRequest, run_table
from diffcdc.errors import TargetMismatch
from tests.support.config_text import table_toml
from tests.support.killed_runs import killed_at
from tests.support.sink_kinds import PG_PASSWORD_ENV, pg_schema_of
from tests.support.workspace import PERMISSIVE

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("price", pa.decimal128(12, 2))])


def _rows(ids: range, tag: str) -> list[dict]:
    return [{"id": i, "name": f"{tag}{i}", "price": Decimal(f"{i}.25")} for i in ids]


def _write(root: str, sid: str, rows: list[dict]) -> None:
    os.makedirs(os.path.join(root, "source"), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, SCHEMA), os.path.join(root, "source", sid))


def _table(postgres, root: str, **more: str) -> TableConfig:
    os.environ[PG_PASSWORD_ENV] = postgres.password
    entry = {"type": "postgres", "name": "pg", "url": postgres.jdbc_url, "user": postgres.user,
             "password_env": PG_PASSWORD_ENV, "schema": pg_schema_of(root), "table": "orders",
             **more}
    return TableConfig(name="T", source=os.path.join(root, "source"), keys=["id"], sinks=[entry])


@pytest.mark.parametrize("change, refusal, mode", [
    ("DROP COLUMN name", "column 'name' was dropped", "current"),
    ("ALTER COLUMN price TYPE numeric(12, 0)", "column 'price' is numeric(12,0)", "current"),
    ("ALTER COLUMN name TYPE varchar(2)", "column 'name' is character varying(2)", "current"),
    ("DROP COLUMN name", "column 'name' was dropped", "scd2"),
    ("ALTER COLUMN price TYPE numeric(12, 0)", "column 'price' is numeric(12,0)", "scd2"),
])
def test_a_column_a_dba_dropped_or_retyped_is_refused_not_refilled(spark, postgres, tmp_path,
                                                                   change, refusal, mode):
    root = str(tmp_path)
    table, state = _table(postgres, root, mode=mode), os.path.join(root, "state")
    _write(root, "1.parquet", _rows(range(6), "a"))
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    schema = pg_schema_of(root)
    postgres.sql(f"ALTER TABLE {schema}.orders {change}")
    _write(root, "2.parquet", _rows(range(7), "a"))  # one row inserted: the others untouched
    with pytest.raises(TargetMismatch, match="sink pg") as refused:
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    text = str(refused.value)
    assert refusal in text and "diffcdc reload --table T --sink pg" in text, text
    assert len(text.splitlines()) == 1
    assert postgres.sql(f"SELECT count(*) FROM {schema}.orders") == "6"  # nothing applied
    reload = RunOptions(quality=PERMISSIVE, request=RunRequest(reload=True, reload_sinks=("pg",)))
    if mode == "scd2":  # a history cannot get the column's past values back: moved away
        assert "move the history table away" in text, text
        postgres.sql(f"ALTER TABLE {schema}.orders RENAME TO orders_old")
    run_table(spark, table, state, reload)
    assert postgres.sql(f"SELECT count(*) FROM {schema}.orders WHERE name IS NOT NULL") == "7"


def test_a_client_encoding_from_the_environment_does_not_garble_text(spark, postgres, tmp_path,
                                                                     monkeypatch):
    """libpq takes PGCLIENTENCODING (or a role's client_encoding) as the encoding of the bytes
    the sink sends: the COPY text is UTF-8, so LATIN1 there stored 'Ã©ð\\x9d...' with exit 0."""
    import psycopg

    monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    root = str(tmp_path)
    table, state = _table(postgres, root), os.path.join(root, "state")
    _write(root, "1.parquet", [{"id": 1, "name": "é𝄞\t\\N", "price": Decimal("1.00")}])
    assert run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    monkeypatch.delenv("PGCLIENTENCODING")
    with psycopg.connect(host="127.0.0.1", port=postgres.port, dbname=postgres.database,
                         user=postgres.user, password=postgres.password,
                         client_encoding="UTF8") as conn:
        found = conn.execute(f"SELECT name FROM {pg_schema_of(root)}.orders").fetchall()
    assert found == [("é𝄞\t\\N",)]


@pytest.mark.parametrize("name", ["_diffcdc_versions", "_DIFFCDC_stage_0123456789abcdef"])
def test_a_target_named_like_the_sinks_own_tables_is_refused_at_load(tmp_path, capsys,
                                                                     cli_logging, name):
    """The bookkeeping table as the target: a reload would drop it (every table's record)."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "diffcdc.toml"
    path.write_text("[diffcdc]\nstate = 'state'\n[tables.T]\nsource = 'src'\nkeys = ['id']\n"
                    f"sinks = [{{type = 'postgres', host = 'h', dbname = 'd', table = '{name}'}}]\n")
    assert main(["plan", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "_diffcdc_" in err and "prefix" in err, err


AWKWARD = pa.schema([
    ("id", pa.int64()), ("d", pa.float64()), ("f", pa.float32()),
    ("big", pa.decimal128(38, 10)), ("s", pa.string()), ("b", pa.binary()),
    ("strs", pa.list_(pa.string())), ("dbls", pa.list_(pa.float64())),
    ("st", pa.struct([("a b", pa.int32()), ('x"y\\', pa.string()), ("Z", pa.float64())])),
    ("m", pa.map_(pa.string(), pa.int32())), ("mi", pa.map_(pa.int32(), pa.string())),
    ("at", pa.timestamp("us", tz="UTC")), ("day", pa.date32())])

_TEXTS = ["", None, "\\N", "NULL", "a,b\n\"c\"", "\\.", "x\n\\.\ny", "\t\r\\", "𝄞é"]
_FLOATS = [float("nan"), float("inf"), float("-inf"), -0.0, 5e-324, 1.7976931348623157e308, None,
           0.1, -1.5]


def _awkward(i: int) -> dict:
    return {"id": i, "d": _FLOATS[i % 9], "f": _FLOATS[(i + 1) % 9],
            "big": Decimal("-9999999999999999999999999999.9999999999") if i % 2
            else Decimal("0.0000000001"), "s": _TEXTS[i % 9],
            "b": b"\x00\\\x00\xff" if i % 3 else b"",
            "strs": [_TEXTS[i % 9], None, ""] if i % 4 else [],
            "dbls": [_FLOATS[i % 9], None], "st": {"a b": i, 'x"y\\': _TEXTS[(i + 2) % 9],
                                                  "Z": _FLOATS[(i + 3) % 9]},
            "m": [("k", None), ("", i)] if i % 2 else None, "mi": [(i, _TEXTS[i % 9])],
            "at": dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc) if i % 2
            else dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc),
            "day": dt.date(1, 1, 1) if i % 2 else dt.date(9999, 12, 31)}


def test_awkward_values_are_read_back_as_they_were_published(spark, postgres, tmp_path):
    """NaN, ±inf, -0.0, subnormals, decimal(38,10) at its limit, '' against NULL, COPY's
    own markers (\\N, \\.) in text, arrays with NULL elements, struct fields with quotes and
    backslashes, maps with NULL values, timestamps and dates at year 1 and 9999, through a
    first image and a version of updates (verify compares them exactly)."""
    from diffcdc.engine.verify import verify_table

    root = str(tmp_path)
    table, state = _table(postgres, root), os.path.join(root, "state")
    source = os.path.join(root, "source")
    os.makedirs(source, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([_awkward(i) for i in range(18)], AWKWARD),
                   os.path.join(source, "1.parquet"))
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    second = [{**_awkward(i + 1), "id": i} for i in range(2, 20)]  # updates and inserts
    pq.write_table(pa.Table.from_pylist(second, AWKWARD), os.path.join(source, "2.parquet"))
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    results = verify_table(spark, table, state, os.path.join(source, "2.parquet"))
    assert all(r.identical for r in results.values()), {k: r.to_dict() for k, r in results.items()}
    schema = pg_schema_of(root)
    assert postgres.sql(f"SELECT count(*) FROM {schema}.orders WHERE s = ''") == "2"
    assert postgres.sql(f"SELECT count(*) FROM {schema}.orders WHERE s IS NULL") == "2"
    assert postgres.sql(f"SELECT d::text FROM {schema}.orders WHERE id = 2") == "-0"
    assert postgres.sql(f"SELECT s FROM {schema}.orders WHERE id = 4") == "\\."


def test_a_second_config_naming_the_same_table_is_refused(spark, postgres, tmp_path):
    """Two diffcdc configs (two states) whose sinks name one schema.table: the second one's
    first image is refused (a table it did not publish to), the first one's rows stay."""
    root = str(tmp_path)
    first = _table(postgres, root)
    second = TableConfig(name="T", source=os.path.join(root, "other"), keys=["id"],
                         sinks=first.sinks)
    os.makedirs(second.source)
    _write(root, "1.parquet", _rows(range(5), "a"))
    pq.write_table(pa.Table.from_pylist(_rows(range(3), "z"), SCHEMA),
                   os.path.join(second.source, "1.parquet"))
    run_table(spark, first, os.path.join(root, "s1"), RunOptions(quality=PERMISSIVE))
    with pytest.raises(TargetMismatch, match="did not publish to"):
        run_table(spark, second, os.path.join(root, "s2"), RunOptions(quality=PERMISSIVE))
    schema = pg_schema_of(root)
    assert postgres.sql(f"SELECT string_agg(name, ',' ORDER BY id) FROM {schema}.orders") == \
        "a0,a1,a2,a3,a4"


def test_a_run_killed_after_the_commit_leaves_no_staging_table(spark, postgres, tmp_path):
    """Killed between the version's COMMIT and the staging table's DROP: the next run finds
    the version applied (nothing twice) and drops the staging table the kill left (before, it
    stayed forever, holding the version's change rows)."""
    root = str(tmp_path)
    table, state = _table(postgres, root), os.path.join(root, "state")
    _write(root, "1.parquet", _rows(range(6), "a"))
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    _write(root, "2.parquet", _rows(range(2, 9), "b"))
    killed_at(table, state, root, "postgres_committed@pg")
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    schema = pg_schema_of(root)
    left = postgres.sql(f"SELECT count(*) FROM pg_tables WHERE schemaname = '{schema}' AND "
                        "tablename LIKE '\\_diffcdc\\_%' AND tablename <> '_diffcdc_versions'")
    assert left == "0"
    assert postgres.sql(f"SELECT string_agg(name, ',' ORDER BY id) FROM {schema}.orders") == \
        "b2,b3,b4,b5,b6,b7,b8"


def test_a_user_owning_only_its_schema_can_publish(spark, postgres, tmp_path, monkeypatch):
    """The least-privileged user a migration gets: its schema, no CREATE on the database.
    ``CREATE SCHEMA IF NOT EXISTS`` checks the database's CREATE privilege before it looks
    whether the schema exists, so every publish failed with 'permission denied for
    database'."""
    root = str(tmp_path)
    schema = pg_schema_of(root)
    role = f"{schema}_user"
    postgres.sql(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'; "
                 f"CREATE SCHEMA {schema} AUTHORIZATION {role}")
    table, state = _table(postgres, root, user=role), os.path.join(root, "state")
    monkeypatch.setenv(PG_PASSWORD_ENV, f"pw-{role}")
    _write(root, "1.parquet", _rows(range(4), "a"))
    assert run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    _write(root, "2.parquet", _rows(range(1, 6), "b"))
    assert run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    assert postgres.sql(f"SELECT string_agg(name, ',' ORDER BY id) FROM {schema}.orders") == \
        "b1,b2,b3,b4,b5"


@pytest.mark.parametrize("cut", ["terminate_before_commit", "crash_after_copy"])
def test_a_connection_cut_before_the_commit_fails_in_one_line_and_the_next_run_publishes_once(
        spark, postgres, tmp_path, cut):
    """pg_terminate_backend on the sink's session while its version's transaction is open (the
    rows applied, the bookkeeping row inserted, no COMMIT yet), or the server crashed and
    restarted between the COPY and the apply (crash recovery empties the UNLOGGED staging
    table): the run fails in one line, nothing of the version is in the table, and the next
    run applies it exactly once."""
    import time

    root = str(tmp_path)
    table, state = _table(postgres, root), os.path.join(root, "state")
    _write(root, "1.parquet", _rows(range(6), "a"))
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    _write(root, "2.parquet", _rows(range(2, 9), "b"))
    config = os.path.join(root, "diffcdc.toml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(table_toml(table, state))
    pause = os.path.join(root, "paused")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    point = "postgres_before_commit" if cut == "terminate_before_commit" else "postgres_copied"
    env.update(DIFFCDC_PAUSE_AT=f"{point}@pg", DIFFCDC_PAUSE_FILE=pause)
    run = subprocess.Popen([sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--config",
                            config, "--master", "local[1]"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not os.path.exists(pause) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert os.path.exists(pause), run.communicate()[1][-2000:]
        schema = pg_schema_of(root)
        if cut == "terminate_before_commit":
            assert postgres.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                "WHERE application_name = 'diffcdc' AND state = "
                                "'idle in transaction'") == "1"
        else:
            postgres.stop("immediate")
            postgres.start()
        os.unlink(pause)
        _, err = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, err[-2000:]
    assert len(err.strip().splitlines()) == 1 and "sink pg" in err, err
    assert postgres.sql(f"SELECT string_agg(name, ',' ORDER BY id) FROM {schema}.orders") == \
        "a0,a1,a2,a3,a4,a5"
    assert run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    assert postgres.sql(f"SELECT string_agg(name, ',' ORDER BY id) FROM {schema}.orders") == \
        "b2,b3,b4,b5,b6,b7,b8"
    assert postgres.sql(f"SELECT string_agg(version::text, ',' ORDER BY version) FROM "
                        f"{schema}._diffcdc_versions WHERE target_table = 'orders'") == "1,2"
