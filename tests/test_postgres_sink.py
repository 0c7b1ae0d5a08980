"""What is the PostgreSQL sink's own (issue 42; the sink contract runs it with every other sink
in tests/test_sink_contract.py): its config refused at load in one line (a URL with a password,
a name PostgreSQL would cut short, two sinks on one table), a password variable missing, a
server that is down, a lock not granted within lock_timeout (nothing committed, the next run
publishes the version once), an added column (ALTER TABLE ADD COLUMN), types read back exactly,
and the target checks' refusals (bookkeeping row missing or at another version, the table
re-created)."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main
from diffcdc.config import TableConfig
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.errors import TargetMismatch
from diffcdc.state.store import TableState
from tests.support.sink_kinds import PG_PASSWORD_ENV, pg_schema_of, postgres_once
from tests.support.workspace import PERMISSIVE

LONG = "x" * 64


def _config_file(tmp_path, sink: str) -> str:
    (tmp_path / "src").mkdir(exist_ok=True)
    path = tmp_path / "diffcdc.toml"
    path.write_text(f"[diffcdc]\nstate = 'state'\n[tables.T]\nsource = 'src'\nkeys = ['id']\n"
                    f"sinks = [{sink}]\n")
    return str(path)


@pytest.mark.parametrize("sink, fragment", [
    ("{type = 'postgres', url = 'jdbc:postgresql://h:5432/db?password=x'}", "password_env"),
    ("{type = 'postgres', url = 'jdbc:postgresql://u:p@h:5432/db'}", "user or password"),
    ("{type = 'postgres', url = 'jdbc:mysql://h/db'}", "jdbc:postgresql://host:5432/database"),
    ("{type = 'postgres', host = 'h'}", "host and dbname"),
    (f"{{type = 'postgres', host = 'h', dbname = 'd', table = '{LONG}'}}", "64 bytes"),
    (f"{{type = 'postgres', host = 'h', dbname = 'd', schema = '{LONG}'}}", "64 bytes"),
    ("{type = 'postgres', host = 'h', dbname = 'd', deletes = 'row'}", "mode = \"scd2\""),
    ("{type = 'postgres', host = 'h', dbname = 'd', password_env = 's3cr3t!'}",
     "not an environment variable name"),
    ("{type = 'postgres', host = 'h', dbname = 'd', lock_timeout = 0}", "lock_timeout"),
    ("{type = 'postgres', host = 'h', dbname = 'd', name = 'a'}, "
     "{type = 'postgres', url = 'jdbc:postgresql://H:5432/d', name = 'b', schema = 'public', "
     "table = 'T'}", "both write the database table public.T"),
])
def test_a_config_postgres_cannot_work_with_is_refused_at_load(tmp_path, capsys, cli_logging,
                                                               sink, fragment):
    path = _config_file(tmp_path, sink)
    assert main(["plan", "--config", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and fragment in err, err
    assert "s3cr3t!" not in err


def test_a_missing_password_variable_is_refused_before_anything_runs(tmp_path, capsys,
                                                                     monkeypatch, cli_logging):
    monkeypatch.delenv("DIFFCDC_TEST_NO_SUCH_PW", raising=False)
    path = _config_file(tmp_path, "{type = 'postgres', host = '127.0.0.1', dbname = 'd', "
                                  "password_env = 'DIFFCDC_TEST_NO_SUCH_PW'}")
    pq.write_table(pa.table({"id": [1]}), str(tmp_path / "src" / "1.parquet"))
    assert main(["run", "--config", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "DIFFCDC_TEST_NO_SUCH_PW (password_env) is not set" in err and "export" in err, err
    assert not os.path.exists(tmp_path / "state")


# -- against the test server ---------------------------------------------------------------

def _entry(postgres, root: str, **more) -> dict:
    os.environ[PG_PASSWORD_ENV] = postgres.password
    return {"type": "postgres", "name": "pg", "url": postgres.jdbc_url, "user": postgres.user,
            "password_env": PG_PASSWORD_ENV, "schema": pg_schema_of(root), "table": "orders",
            **more}


SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("price", pa.decimal128(12, 2)),
                    ("f", pa.float32()), ("at", pa.timestamp("us", tz="UTC")),
                    ("local", pa.timestamp("us")), ("day", pa.date32()),
                    ("blob", pa.binary()), ("tags", pa.list_(pa.int32())),
                    ("attrs", pa.struct([("a.b", pa.int32()), ("c'", pa.string())])),
                    ("m", pa.map_(pa.int64(), pa.string()))])


def _row(i: int, tag: str) -> dict:
    return {"id": i, "name": f"{tag}{i}" if i % 3 else None, "price": Decimal(f"{i}.{i % 100:02d}"),
            "f": 0.1 * i, "at": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
                microseconds=i), "local": dt.datetime(1, 1, 1) + dt.timedelta(days=i),
            "day": dt.date(9999, 12, 31) - dt.timedelta(days=i), "blob": bytes([i % 256, 0]),
            "tags": [i, None] if i % 2 else [], "attrs": {"a.b": i, "c'": tag},
            "m": [(2, "two"), (1, tag)] if i % 2 else None}


def _write(root: str, sid: str, rows: list[dict], schema: pa.Schema = SCHEMA) -> None:
    os.makedirs(os.path.join(root, "source"), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema), os.path.join(root, "source", sid))


def _table(root: str, entry: dict) -> TableConfig:
    return TableConfig(name="T", source=os.path.join(root, "source"), keys=["id"], sinks=[entry])


def _verify(spark, table: TableConfig, state: str, sid: str) -> None:
    results = verify_table(spark, table, state, os.path.join(table.source, sid))
    assert all(r.identical for r in results.values()), {k: r.to_dict() for k, r in results.items()}


def _sql(postgres, text: str) -> str:
    return postgres.sql(text)


def test_types_round_trip_an_added_column_and_the_bookkeeping(spark, postgres, tmp_path):
    """Every mapped type is read back exactly (verify); a column added by the snapshots is
    ALTER TABLE ADD COLUMN in the version's transaction, NULL in the rows before it; one
    bookkeeping row per version."""
    root = str(tmp_path)
    entry = _entry(postgres, root)
    table, state = _table(root, entry), os.path.join(root, "state")
    _write(root, "1.parquet", [_row(i, "a") for i in range(20)])
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    _verify(spark, table, state, "1.parquet")
    wider = SCHEMA.append(pa.field("note", pa.string()))
    second = [{**_row(i, "b" if i % 4 == 0 else "a"), "note": "n" if i > 15 else None}
              for i in range(5, 25)]
    _write(root, "2.parquet", second, wider)
    (result,) = run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).snapshots
    assert (result.inserted, result.deleted) == (5, 5)
    _verify(spark, table, state, "2.parquet")
    schema = pg_schema_of(root)
    kinds = _sql(postgres, "SELECT string_agg(attname || ':' || format_type(atttypid, atttypmod), "
                 "',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = "
                 f"'{schema}.orders'::regclass AND attnum > 0 AND NOT attisdropped")
    assert kinds == ("id:bigint,name:text,price:numeric(12,2),f:real,"
                     "at:timestamp with time zone,local:timestamp without time zone,day:date,"
                     "blob:bytea,tags:integer[],attrs:jsonb,m:jsonb,note:text"), kinds
    primary = _sql(postgres, f"SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE "
                   f"conrelid = '{schema}.orders'::regclass AND contype = 'p'")
    assert primary == "PRIMARY KEY (id)"
    postgres_once(TableState(state, "T"), "pg", {"postgres": postgres})
    staging = _sql(postgres, f"SELECT count(*) FROM pg_tables WHERE schemaname = '{schema}' "
                   "AND tablename LIKE '\\_diffcdc\\_%' AND tablename <> '_diffcdc_versions'")
    assert staging == "0"  # staging tables dropped


def test_a_lock_not_granted_fails_the_sink_in_one_line_and_the_next_run_publishes_it_once(
        spark, postgres, tmp_path):

    root = str(tmp_path)
    entry = _entry(postgres, root, lock_timeout=1)
    table, state = _table(root, entry), os.path.join(root, "state")
    _write(root, "1.parquet", [_row(i, "a") for i in range(10)])
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    _write(root, "2.parquet", [_row(i, "b") for i in range(3, 12)])
    schema = pg_schema_of(root)
    # readers go on (the check before the commit counts the rows), writers wait: the
    # publish's lock is not granted
    with postgres.locked(schema, "orders"), \
            pytest.raises(Exception, match="lock") as failed:
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    text = str(failed.value)
    assert len(text.splitlines()) == 1 and "sink pg" in text and "lock_timeout" in text, text
    assert TableState(state, "T").head().unpublished == ["pg"]
    assert run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    _verify(spark, table, state, "2.parquet")
    postgres_once(TableState(state, "T"), "pg", {"postgres": postgres})


def test_a_server_that_is_down_fails_in_one_line_within_connect_timeout(spark, postgres,
                                                                        tmp_path):
    from tests.support.kafka_broker import free_port

    root = str(tmp_path)
    entry = {**_entry(postgres, root), "url": f"jdbc:postgresql://127.0.0.1:{free_port()}/x",
             "connect_timeout": 2}
    table, state = _table(root, entry), os.path.join(root, "state")
    _write(root, "1.parquet", [_row(i, "a") for i in range(3)])
    with pytest.raises(Exception, match="cannot connect to PostgreSQL") as failed:
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    assert len(str(failed.value).splitlines()) == 1


@pytest.mark.parametrize("how", ["bookkeeping_row", "recreated"])
def test_a_bookkeeping_row_gone_or_a_table_recreated_is_refused_naming_reload(
        spark, postgres, tmp_path, how):
    root = str(tmp_path)
    table, state = _table(root, _entry(postgres, root)), os.path.join(root, "state")
    _write(root, "1.parquet", [_row(i, "a") for i in range(6)])
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    schema = pg_schema_of(root)
    if how == "bookkeeping_row":
        _sql(postgres, f"DELETE FROM {schema}._diffcdc_versions")
    else:  # the same rows, in a table created again (another oid)
        _sql(postgres, f"CREATE TABLE {schema}.copy AS TABLE {schema}.orders; "
             f"DROP TABLE {schema}.orders; ALTER TABLE {schema}.copy RENAME TO orders")
    _write(root, "2.parquet", [_row(i, "b") for i in range(6)])
    with pytest.raises(TargetMismatch, match="sink pg") as refused:
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    text = str(refused.value)
    assert "diffcdc reload --table T --sink pg --yes" in text and len(text.splitlines()) == 1
    assert ("bookkeeping row of version 1 is missing" if how == "bookkeeping_row"
            else "created again") in text, text


def test_a_nul_character_is_refused_by_the_sink_alone_in_one_line(spark, postgres, tmp_path):
    """PostgreSQL text cannot hold NUL: the sink refuses the version naming the column (never
    a value cut short), and the table's other sink publishes it."""
    from diffcdc.errors import DiffcdcError

    root = str(tmp_path)
    landing = {"type": "open_mirroring", "name": "landing",
               "landing": os.path.join(root, "landing")}
    table = TableConfig(name="T", source=os.path.join(root, "source"), keys=["id"],
                        sinks=[_entry(postgres, root), landing])
    state = os.path.join(root, "state")
    schema = pa.schema([("id", pa.int64()), ("note", pa.string())])
    _write(root, "1.parquet", [{"id": 1, "note": "a\x00b"}, {"id": 2, "note": "c"}], schema)
    with pytest.raises(DiffcdcError, match="sink pg") as refused:
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    text = str(refused.value)
    assert len(text.splitlines()) == 1 and "'note'" in text and "NUL" in text, text
    assert TableState(state, "T").head().unpublished == ["pg"]
    results = verify_table(spark, table, state, os.path.join(table.source, "1.parquet"),
                           only="landing")
    assert results["landing"].identical
