"""Source settings (folder string or a `{type = "jdbc"}` table) and diffcdc.run_dataframe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import diffcdc
from diffcdc.config import TableConfig
from diffcdc.config_file import load_config
from diffcdc.engine.verify import verify_table
from diffcdc.errors import ConfigError, LateSnapshotError, QualityGateFailed, SourceError
from diffcdc.sources.config import JdbcSourceConfig
from diffcdc.state.root import StateRoot
from diffcdc.state.store import TableState

PG = "jdbc:postgresql://db:5432/erp"


def _config(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "diffcdc.toml"
    path.write_text(f'[diffcdc]\nlanding = "landing"\n{source}\n[tables.Orders]\nkeys = ["id"]\n')
    return path


def test_string_source_stays_a_folder(tmp_path):
    path = tmp_path / "d.toml"
    path.write_text('[tables.Orders]\nsource = "snaps"\nkeys = ["id"]\nlanding = "l"\n')
    cfg = load_config(str(path))
    assert cfg.tables[0].source == str(tmp_path / "snaps") and cfg.jars() == []


def test_jdbc_source_from_toml(tmp_path):
    path = _config(tmp_path, f'[tables.Orders.source]\ntype = "jdbc"\nurl = "{PG}"\n'
                   'table = "public.orders"\nuser = "reader"\npassword_env = "ERP_PASSWORD"\n'
                   'partition_column = "id"\nnum_partitions = 4\n')
    (table,) = load_config(str(path)).tables
    assert isinstance(table.source, JdbcSourceConfig)
    assert (table.source.num_partitions, table.source.fetch_size, table.keep_snapshots) == (4, 10_000, 0)
    assert table.source.driver_class == "org.postgresql.Driver"
    assert table.source.describe() == f"{PG} table public.orders"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (f'url = "{PG}?user=a&password=x"\ntable = "t"', "must not carry a password"),
        (f'url = "{PG}"\ntable = "t"\nquery = "SELECT 1"', "exactly one of `table` or `query`"),
        (f'url = "{PG}"\ntable = "t"\nnum_partitions = 2', "needs partition_column"),
        ('url = "jdbc:oracle:thin:@db:1521/x"\ntable = "t"\npartition_column = "id"\nnum_partitions = 4',
         "partitioned reads of oracle cannot be made to see one database snapshot"),
        (f'url = "{PG}"\ntable = "t"\npassword_env = "hunter2!"', "is not an environment variable name"),
        (f'url = "{PG}"\ntable = "t"\npassword = "hunter2"', "unknown field"),
        ('url = "postgresql://db/x"\ntable = "t"', "must be a JDBC URL"),
    ],
)
def test_jdbc_source_refusals(tmp_path, body, message):
    path = _config(tmp_path, f'[tables.Orders.source]\ntype = "jdbc"\n{body}\n')
    with pytest.raises(ConfigError, match="table Orders, field source") as err:
        load_config(str(path))
    assert message in str(err.value) and "hunter2" not in str(err.value)


def test_dataframe_source_is_not_for_files(tmp_path):
    path = _config(tmp_path, '[tables.Orders.source]\ntype = "dataframe"\n')
    with pytest.raises(ConfigError, match="handed over in Python"):
        load_config(str(path))


def test_jars_for_jdbc_tables(tmp_path):
    jar = tmp_path / "driver.jar"
    jar.write_bytes(b"")
    table = TableConfig(name="T", keys=["id"], landing="l", source={
        "type": "jdbc", "url": "jdbc:sqlserver://db;databaseName=x", "table": "t",
        "driver": "com.microsoft.sqlserver.jdbc.SQLServerDriver", "driver_jar": str(jar)})
    from diffcdc.config import RunConfig

    assert RunConfig(tables=[table]).jars() == [str(jar)]


def _run(df, tmp_path: Path, sid: str | None, **kwargs):
    return diffcdc.run_dataframe(
        df, table="Orders", keys=["id"], landing=str(tmp_path / "landing"),
        state=str(tmp_path / "state"), snapshot_id=sid, **kwargs,
    )


def test_run_dataframe_reads_once_orders_and_keeps_copies(spark, tmp_path):
    # rand(): every evaluation differs, so only a read-once copy keeps state and sinks in step.
    first = spark.range(0, 20).selectExpr("id", "rand() AS v", "'a' AS s")
    report = _run(first, tmp_path, "001", keep_snapshots=1)
    assert [(s.snapshot_id, s.inserted) for s in report.snapshots] == [("001", 20)]
    second = spark.range(1, 22).selectExpr("id", "CASE WHEN id < 5 THEN rand() ELSE id END AS v", "'a' AS s")
    report = _run(second, tmp_path, "002", keep_snapshots=1)
    (snap,) = report.snapshots
    assert (snap.inserted, snap.deleted, snap.updated + snap.unchanged) == (2, 1, 19)
    copies = tmp_path / "state" / "Orders" / "snapshots"
    assert os.listdir(copies) == ["002"]
    table = TableConfig(name="Orders", source=".", keys=["id"], landing=str(tmp_path / "landing"))
    for result in verify_table(spark, table, str(tmp_path / "state"), str(copies / "002")).values():
        assert result.identical, result
    assert _run(second, tmp_path, "002").outcome == "nothing to do"
    with pytest.raises(LateSnapshotError, match="sorts before the last committed snapshot 002"):
        _run(second, tmp_path, "001")
    assert TableState(str(tmp_path / "state"), "Orders").head().record.snapshot_path == "a Spark DataFrame"


def test_run_dataframe_validates_gates_and_fails_cleanly(spark, tmp_path, monkeypatch):
    ok = spark.range(0, 2000).selectExpr("id", "id * 2 AS v")  # above min_rows_for_ratios
    report = _run(ok, tmp_path, None)
    (snap,) = report.snapshots
    state = TableState(str(tmp_path / "state"), "Orders")
    assert snap.snapshot_id.endswith("Z") and not os.listdir(tmp_path / "state" / "Orders" / "snapshots")
    before = [c.version for c in state.commits()]
    closed = []
    real_close = StateRoot.close
    monkeypatch.setattr(StateRoot, "close", lambda root: closed.append(root) or real_close(root))
    with pytest.raises(QualityGateFailed):  # default gate: at most 20 % of the rows deleted
        _run(ok.where("id < 1000"), tmp_path, None)
    assert len(closed) == 1  # the root's clients are closed when a run fails, too
    with pytest.raises(QualityGateFailed, match="keys_unique"):
        _run(ok.selectExpr("id % 2 AS id", "v"), tmp_path, None)
    with pytest.raises(SourceError, match="the DataFrame could not be evaluated: .*boom"):
        _run(ok.selectExpr("id", "CASE WHEN id = 3 THEN raise_error('boom') ELSE v END AS v"), tmp_path, None)
    with pytest.raises(ConfigError, match="keys"):
        diffcdc.run_dataframe(ok, table="Orders", keys=[], landing="l", state=str(tmp_path / "state"))
    assert [c.version for c in state.commits()] == before
    assert not os.listdir(tmp_path / "state" / "Orders" / "snapshots")


def test_run_dataframe_names_what_it_was_given_and_a_failing_udfs_cause(spark, tmp_path):
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from diffcdc.errors import UsageError

    for given, kind in ((pd.DataFrame({"id": [1]}), "a pandas DataFrame"),
                        (pa.table({"id": [1]}), "a pyarrow Table")):
        with pytest.raises(UsageError) as refused:
            _run(given, tmp_path, "001")
        assert str(refused.value) == (
            f"table Orders: run_dataframe needs a pyspark DataFrame, not {kind} — convert it with "
            "spark.createDataFrame(...), or write it to Parquet and use a folder source")
        assert refused.value.exit_code == 2
    assert not (tmp_path / "state").exists()

    @F.udf(T.StringType())
    def region(customer):  # no type hints: pyspark would read them as a pandas UDF's
        if customer == 3:
            raise ValueError("customer 3 has no region")
        return "north"

    df = spark.range(0, 5).select("id", region("id").alias("region"))
    with pytest.raises(SourceError) as failed:
        _run(df, tmp_path, "001")
    assert "the DataFrame could not be evaluated: a Python function (UDF) raised ValueError: " \
        "customer 3 has no region" in str(failed.value)
    assert "\n" not in str(failed.value)
    assert not TableState(str(tmp_path / "state"), "Orders").commits()


def test_a_calendar_interval_column_is_refused_as_input(spark, tmp_path):
    from diffcdc.errors import InputRefused

    for column in ("make_interval(1, id) AS d", "array(named_struct('i', make_interval(0, 1))) AS d"):
        df = spark.range(0, 3).selectExpr("id", column)
        with pytest.raises(InputRefused) as refused:
            _run(df, tmp_path, "001")
        assert refused.value.exit_code == 3 and "column d has type" in str(refused.value)
        assert "cast d in the DataFrame" in str(refused.value)
    assert not TableState(str(tmp_path / "state"), "Orders").commits()
    # day-time and year-month intervals are stored and diffed like any other column
    report = _run(spark.range(0, 3).selectExpr("id", "make_dt_interval(id) AS d"), tmp_path, "001")
    assert report.snapshots[0].inserted == 3


@pytest.mark.parametrize("text, kind, fragment", [
    ("[NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION] 1E+40 cannot be represented as Decimal(38, 0)."
     " If necessary set \"spark.sql.ansi.enabled\" to \"false\" to bypass this error.",
     "InputRefused", "a value is out of range of the type it is read as: [NUMERIC_VALUE_OUT_OF_RANGE"),
    ("[DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION] Decimal precision 50 exceeds max precision 38.",
     "InputRefused", "a value is out of range of the type it is read as"),
    ("java.lang.IllegalStateException: something in Spark", "SourceError",
     "database read failed: java.lang.IllegalStateException"),
])
def test_a_value_out_of_range_says_so_and_never_points_at_the_database_log(text, kind, fragment):
    from diffcdc.sources.jdbc_session import jdbc_error

    cfg = JdbcSourceConfig(type="jdbc", url=PG, table="public.orders", password_env="PW")
    error = jdbc_error(RuntimeError(text), cfg, password=None)
    assert type(error).__name__ == kind and fragment in str(error), str(error)
    assert "database's log" not in str(error) and "\n" not in str(error)
    if kind == "InputRefused":
        assert error.exit_code == 3 and "column_types" in str(error) and "nothing was committed" in str(error)
