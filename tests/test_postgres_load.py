"""The PostgreSQL sink's loading (issue 42, part P2): the type mapping and COPY text, and
``copy_into`` against a real server — every awkward value read back with psql (an
independent reader), from this process and from the executors, a retried part loaded once,
a value PostgreSQL cannot hold refused with nothing kept, and the same load through a Spark
Connect server and on PySpark 3.5.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.parquet  # noqa: F401 - pa.parquet
import pytest
from psycopg import sql
from pyspark.sql import types as T

from diffcdc import staged_files
from diffcdc.errors import ConfigError, InputRefused
from diffcdc.sinks.postgres import copy as pgcopy
from diffcdc.sinks.postgres.connection import PgConnection, connect
from diffcdc.sinks.postgres.types import (
    PART_COLUMN,
    check_identifier,
    column_defs,
    csv_batch,
    pg_type,
)
from tests.support.connect_server import client_env
from tests.support.postgres_load import EXPECTED, SCHEMA, frame_of, read_text


def _type(dtype: T.DataType) -> str:
    return pg_type(dtype, "table t, column c").as_string(None)


def test_types_and_copy_text():
    """The mapping of the issue, refusals in one line, and the COPY text of odd values."""
    assert [_type(t) for t in (
        T.BooleanType(), T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType(),
        T.FloatType(), T.DoubleType(), T.DecimalType(38, 10), T.StringType(), T.BinaryType(),
        T.DateType(), T.TimestampType(), T.TimestampNTZType(), T.ArrayType(T.DecimalType(5, 2)),
        T.ArrayType(T.ArrayType(T.IntegerType())), T.MapType(T.StringType(), T.LongType()),
        T.StructType([T.StructField("a b", T.StringType())]))] == [
        "boolean", "smallint", "smallint", "integer", "bigint", "real", "double precision",
        "numeric(38, 10)", "text", "bytea", "date", "timestamptz", "timestamp",
        "numeric(5, 2)[]", "jsonb", "jsonb", "jsonb"]
    assert _type(T.TimeType()) == "time"  # Spark 4.1's TIME
    for refused in (T.DayTimeIntervalType(), T.YearMonthIntervalType(),
                    T.StructType([T.StructField("a", T.LongType()),
                                  T.StructField("a", T.StringType())]),
                    T.ArrayType(T.CalendarIntervalType())):
        with pytest.raises(InputRefused) as err:
            _type(refused)
        assert "table t, column c" in str(err.value) and "\n" not in str(err.value)
    schema = T.StructType([T.StructField("é" * 31 + "x", T.LongType())])  # 63 bytes: kept
    assert column_defs(schema, "table t").as_string(None) == f'"{"é" * 31}x" bigint'
    with pytest.raises(ConfigError, match="64 bytes"):
        check_identifier("é" * 32, "table t")
    batch = pa.record_batch({
        "day": pa.array([-1, -719163, 0, None], pa.int32()).cast(pa.date32()),
        "t": pa.array([1, 86399999999, None, 0], pa.time64("us")),
        "ts": pa.array([-62135596800000001, 0, None, 1], pa.timestamp("us", "UTC")),
        "f": pa.array([float("nan"), float("inf"), -0.0, None]),
        "s": pa.array(["", None, 'a"b', "x"]),
        "a": pa.array([["x,y", None], [], None, ['"']], pa.list_(pa.string())),
        "m": pa.array([[(3, 2.5), (10, 1.0)], [], None, [(2, float("-inf"))]],
                      pa.map_(pa.int64(), pa.float64())),
    })
    lines = csv_batch(batch, batch.schema.names, "table t").decode().splitlines()
    assert lines == [
        '"1969-12-31","00:00:00.000001","0001-12-31 23:59:59.999999Z BC","nan","","{""x,y"",NULL}","[[10,1.0],[3,2.5]]"',
        '"0001-12-31 BC","23:59:59.999999","1970-01-01 00:00:00.000000Z","inf",,"{}","[]"',
        '"1970-01-01",,,"-0","a""b",,',
        ',"00:00:00.000000","1970-01-01 00:00:00.000001Z",,"x","{""\\""""}","[[2,""-Infinity""]]"',
    ]
    with pytest.raises(InputRefused, match="column 's'.*NUL") as err:
        csv_batch(pa.record_batch({"s": ["a\x00b"]}), ["s"], "sink pg, table t")
    assert "sink pg, table t" in str(err.value)


def _conn(postgres) -> PgConnection:
    return PgConnection("127.0.0.1", postgres.port, postgres.database, postgres.user,
                        postgres.password, connect_timeout=5, lock_timeout=20)


def _create(postgres, name: str, *, parted: bool = True) -> None:
    part = sql.SQL(", {} integer").format(sql.Identifier(PART_COLUMN)) if parted else sql.SQL("")
    with connect(_conn(postgres), "test") as c:
        c.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier("public", name)))
        c.execute(sql.SQL("CREATE TABLE {} ({}{})").format(
            sql.Identifier("public", name), column_defs(SCHEMA, f"table {name}"), part))


def _parts(postgres, name: str) -> list[int]:
    text = postgres.sql(f'SELECT DISTINCT "{PART_COLUMN}" FROM public.{name} ORDER BY 1')
    return [int(v) for v in text.split()]


@pytest.mark.spark35_smoke
def test_copy_into_loads_every_value_exactly(spark, postgres, tmp_path, monkeypatch):
    """Staged files in this process, by the executors, into a table without the part column,
    and a DataFrame: psql reads back every awkward value as written out by hand."""
    folder = str(tmp_path / "staged")
    frame_of(spark).repartition(3).write.parquet(folder)
    conn, columns = _conn(postgres), SCHEMA.fieldNames()
    _create(postgres, "here")
    assert pgcopy.copy_into(spark, folder, conn, ("public", "here"), columns, "sink pg") == 3
    assert read_text(postgres, "public.here") == EXPECTED
    _create(postgres, "whole", parted=False)
    assert pgcopy.copy_into(spark, folder, conn, ("public", "whole"), columns, "sink pg") == 3
    assert read_text(postgres, "public.whole") == EXPECTED
    monkeypatch.setattr(staged_files, "IN_PROCESS_BYTES", 0)  # every file its own Spark task
    _create(postgres, "tasks")
    assert pgcopy.copy_into(spark, folder, conn, ("public", "tasks"), columns, "sink pg") == 3
    assert read_text(postgres, "public.tasks") == EXPECTED
    files = staged_files.StagedFolder(spark, folder, table="t").data_files()
    assert len(_parts(postgres, "tasks")) == sum(
        1 for f in files if pa.parquet.read_metadata(f.path).num_rows)  # a part per file of rows
    _create(postgres, "frame")
    assert pgcopy.copy_into(spark, frame_of(spark).repartition(2), conn, ("public", "frame"),
                            columns, "sink pg") == 3
    assert read_text(postgres, "public.frame") == EXPECTED


def _small(postgres, tmp_path, name: str, values: list[str]) -> tuple[pgcopy._Load, str]:
    """A table (k integer, v text, the part column) and a Parquet file of ``values``."""
    with connect(_conn(postgres), "test") as c:
        c.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier("public", name)))
        c.execute(sql.SQL("CREATE TABLE {} (k integer, v text, {} integer)").format(
            sql.Identifier("public", name), sql.Identifier(PART_COLUMN)))
    path = str(tmp_path / f"{name}.parquet")
    pa.parquet.write_table(pa.table({"k": pa.array(range(len(values)), pa.int32()),
                                     "v": values}), path)
    return pgcopy._Load(_conn(postgres), ("public", name), ("k", "v"), "sink pg"), path


def test_a_retried_or_speculative_part_is_loaded_once(postgres, tmp_path):
    """A part loaded again after it committed, and a second attempt started while the first
    one's transaction is open (it waits for the part's lock, then replaces its rows): the
    table holds the part's rows once, and the count check agrees."""
    load, path = _small(postgres, tmp_path, "retried", ["a", "b", "c"])
    first = list(pgcopy._load_parts(load, iter([(0, path)])))
    again = list(pgcopy._load_parts(load, iter([(0, path)])))
    assert first == again == [pgcopy.PartDone(0, 3)]
    assert pgcopy._finish(load, again) == 3
    with connect(load.conn, "test") as holder:  # an attempt whose COPY is not committed yet
        pgcopy._part_rows(holder, load, 0, pgcopy._batches(path, load.columns))
        done: list[pgcopy.PartDone] = []
        second = threading.Thread(
            target=lambda: done.extend(pgcopy._load_parts(load, iter([(0, path)]))))
        second.start()
        time.sleep(1.0)
        assert second.is_alive() and not done  # waits for the first attempt's lock
        holder.commit()
    second.join(30)
    assert done == [pgcopy.PartDone(0, 3)]
    assert pgcopy._finish(load, done) == 3
    assert postgres.sql("SELECT string_agg(v, ',' ORDER BY k) FROM public.retried") == "a,b,c"


def test_a_value_postgres_cannot_hold_is_refused_with_nothing_kept(postgres, tmp_path):
    load, path = _small(postgres, tmp_path, "refused", ["a", "b\x00c"])
    done = list(pgcopy._load_parts(load, iter([(0, path)])))
    assert [(d.part, d.rows, d.kind) for d in done] == [(0, 0, "InputRefused")]
    with pytest.raises(InputRefused) as err:
        pgcopy._finish(load, done)
    text = str(err.value)
    assert "sink pg" in text and "column 'v'" in text and "NUL" in text and "\n" not in text
    assert postgres.sql("SELECT count(*) FROM public.refused") == "0"
    postgres.sql('ALTER TABLE public.refused ADD COLUMN "not staged" text')
    broken = pgcopy._Load(load.conn, load.target, ("k", "v", "not staged"), "sink pg")
    done = list(pgcopy._load_parts(broken, iter([(0, path)])))  # a file not as staged
    assert [(d.rows, d.kind) for d in done] == [(0, "DiffcdcError")]
    assert "reading staged rows" in done[0].error and "\n" not in done[0].error


@pytest.mark.slow
@pytest.mark.connect
def test_copy_into_through_a_spark_connect_server(postgres, connect_server, tmp_path):
    """A client without Java stages the awkward rows through the server and loads them (the
    server's executors run the COPY): psql reads back every value."""
    tables = ["connected", "connected_frame"]  # staged files, and a DataFrame
    for table in tables:
        _create(postgres, table)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({
        "remote": connect_server.url, "tables": tables, "folder": str(tmp_path / "staged"),
        "conn": {"host": "127.0.0.1", "port": postgres.port, "dbname": postgres.database,
                 "user": postgres.user, "password": postgres.password}}))
    done = subprocess.run([sys.executable, "-m", "tests.support.postgres_load", str(job)],
                          env=client_env(str(tmp_path)), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["loaded"] == [3, 3]
    for table in tables:
        assert read_text(postgres, f"public.{table}") == EXPECTED
