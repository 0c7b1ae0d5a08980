"""Issue 38, names users have: dots in names, renames only in case, keys configured in another
case, and types Spark cannot hold, in every sink (both Delta modes): exact, or refused in one
line before anything is published."""

from __future__ import annotations

import os
from dataclasses import replace

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from diffcdc.engine.run import RunOptions, run_table
from tests.support.name_steps import check_exact, names_table, run_step
from tests.support.sink_kinds import KINDS, pg_move_away
from tests.support.workspace import PERMISSIVE

pytestmark = pytest.mark.slow


def test_dotted_names_merge_in_every_sink(spark, servers, tmp_path):
    """``order.id`` (the key) and ``the.value``: the Delta MERGE quotes its target columns
    (every sink kind on one table: each step exact in each)."""
    root = str(tmp_path)
    table = names_table(root, KINDS, servers, ["order.id"])
    schema = pa.schema([("order.id", pa.int64()), ("the.value", pa.string()),
                        ("select", pa.int32())])
    snapshots = [
        [{"order.id": 1, "the.value": "a", "select": 1}, {"order.id": 2, "the.value": "b",
                                                          "select": 2}],
        [{"order.id": 1, "the.value": "a2", "select": 1}, {"order.id": 3, "the.value": None,
                                                           "select": 3}],
        [{"order.id": 1, "the.value": "a2", "select": 9}, {"order.id": 3, "the.value": "c",
                                                           "select": 3}],
    ]
    steps = [run_step(spark, servers, KINDS, table, root, f"{i:08d}.parquet",
                      pa.Table.from_pylist(rows, schema))
             for i, rows in enumerate(snapshots, start=1)]
    assert [s.refused for s in steps] == [None, None, None], [str(s.refused) for s in steps]
    assert [s.counts for s in steps] == [(2, 0, 0), (1, 1, 1), (0, 2, 0)]


def _rows(names: tuple[str, str], values: list[tuple[int, str | None]]) -> pa.Table:
    key, value = names
    return pa.Table.from_pylist([{key: k, value: v} for k, v in values],
                                pa.schema([(key, pa.int64()), (value, pa.string())]))


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_a_rename_only_in_case_is_a_schema_change_in_every_sink(spark, servers, kind, tmp_path):
    """``id, value`` → ``ID, VaLuE``: refused under the default schema policy (nothing
    published, the table goes on with the old spelling); re-created under ``recreate``, every
    sink then writes the new spelling (keyColumns ``["ID"]``)."""
    root = str(tmp_path)
    table = names_table(root, kind, servers, ["id"])
    first = run_step(spark, servers, kind, table, root, "1.parquet",
                     _rows(("id", "value"), [(1, "a"), (2, "b")]))
    assert first.refused is None
    renamed = run_step(spark, servers, kind, table, root, "2.parquet",
                       _rows(("ID", "VaLuE"), [(1, "a"), (2, "b")]))
    assert renamed.refused is not None and renamed.refused.exit_code == 3
    assert "renamed in case 'id'→'ID', 'value'→'VaLuE'" in str(renamed.refused)
    same = run_step(spark, servers, kind, table, root, "3.parquet",
                    _rows(("id", "value"), [(1, "a"), (2, "c")]))
    assert same.refused is None and same.counts == (0, 1, 0)
    table = table.model_copy(update={"schema_policy": "recreate"})
    recreated = run_step(spark, servers, kind, table, root, "4.parquet",
                         _rows(("ID", "VaLuE"), [(1, "a"), (3, "d")]))
    if kind.type == "delta":  # its changelog, a history: they keep every row, and Delta's
        # names are case-blind: they cannot hold both spellings
        kept = "changelog" if kind.name == "delta" else "history"
        assert recreated.committed, str(recreated.refused)
        assert f"the {kept} at" in str(recreated.refused), str(recreated.refused)
        assert "'id' long → 'ID' long" in str(recreated.refused)
        moved = table.sinks[0].changelog_path if kept == "changelog" else table.sinks[0].path
        os.rename(moved, moved + ".old")  # the way out the message gives
        assert run_table(spark, table, os.path.join(root, "state"),
                         RunOptions(quality=PERMISSIVE)).outcome == "ok"  # the backlog
        assert DeltaTable(moved).schema().fields[0].name == "ID"  # a new one
        assert DeltaTable(moved + ".old").schema().fields[0].name == "id"
        if kept == "changelog":
            kind = replace(kind, assert_once=lambda *args: None)  # it starts at version 3
    elif kind.name == "postgres_history":  # PostgreSQL's names are case-sensitive: the
        # history would hold the key twice, its old rows open under the old spelling
        assert recreated.committed, str(recreated.refused)
        assert "the history cannot hold ('id' → 'ID', 'value' → 'VaLuE')" in \
            str(recreated.refused), str(recreated.refused)
        sink = table.sinks[0]
        pg_move_away(servers, sink.db_schema, sink.table_name(table.name))  # the way out
        assert run_table(spark, table, os.path.join(root, "state"),
                         RunOptions(quality=PERMISSIVE)).outcome == "ok"  # the backlog
    else:
        assert recreated.refused is None and recreated.counts == (2, 0, 0)
    check_exact(spark, servers, kind, table, root, os.path.join(table.source, "4.parquet"))
    after = run_step(spark, servers, kind, table, root, "5.parquet",
                     _rows(("ID", "VaLuE"), [(1, "a"), (3, "e")]))
    assert after.refused is None and after.counts == (0, 1, 0)


def test_keys_configured_in_another_case_are_written_as_the_snapshot_spells_them(
        spark, servers, tmp_path):
    """``keys = ["id", "REGION"]`` over columns ``Id`` and ``Region``: landing keyColumns, the
    Delta MERGE, the history and the Kafka key all use ``Id``, ``Region`` (every sink kind on
    one table)."""
    root = str(tmp_path)
    table = names_table(root, KINDS, servers, ["id", "REGION"])
    schema = pa.schema([("Id", pa.int64()), ("Region", pa.string()), ("v", pa.string())])
    snapshots = [[(1, "eu", "a"), (2, "eu", "b"), (1, "us", "c")],
                 [(1, "eu", "a2"), (1, "us", "c"), (3, "eu", None)]]
    counts = []
    for i, rows in enumerate(snapshots, start=1):
        data = pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema)
        step = run_step(spark, servers, KINDS, table, root, f"{i}.parquet", data)
        assert step.refused is None, str(step.refused)
        counts.append(step.counts)
    assert counts == [(3, 0, 0), (1, 1, 1)]


@pytest.mark.parametrize("select, column, label", [
    ("parse_json('{\"a\": 1}') AS v", "v", "VARIANT"),
    ("named_struct('in.ner', parse_json('[1]')) AS s", "s.in.ner", "VARIANT"),
    ("array(time'12:00:00') AS t", "t[]", "TIME"),
])
def test_a_type_no_sink_can_take_in_a_dataframe_is_refused_in_one_line(
        spark, tmp_path, select, column, label):
    """VARIANT (Spark cannot hash it) and TIME (Spark cannot write it), at any depth: exit 3
    naming the column and the type, before anything is written."""
    import diffcdc
    from diffcdc.errors import InputRefused

    df = spark.sql(f"SELECT 1 AS id, {select}")
    landing, state = tmp_path / "landing", tmp_path / "state"
    with pytest.raises(InputRefused) as refused:
        diffcdc.run_dataframe(df, table="T", keys=["ID"], landing=str(landing), state=str(state))
    text = str(refused.value)
    assert refused.value.exit_code == 3
    assert text.startswith("table T") and f"column {column!r} has type {label}" in text, text
    assert "cast it" in text, text
    assert not landing.exists() or not any(landing.rglob("*.parquet"))
    assert not any(state.rglob("*.state.json"))


@pytest.mark.parametrize("arrow_type, column", [
    (pa.time64("us"), "t"), (pa.time32("ms"), "t"),
    (pa.struct([("at", pa.time64("ns"))]), "t.at"),
])
def test_a_parquet_time_column_is_refused_naming_it(spark, servers, tmp_path, arrow_type,
                                                     column):
    """A Parquet TIME (Spark does not read it): one line naming the column, the type and
    the cast to make in the extract, exit 3; nothing published."""
    import datetime as dt

    kind = next(k for k in KINDS if k.name == "landing_local")
    root = str(tmp_path)
    table = names_table(root, kind, servers, ["id"])
    value = {"at": dt.time(13, 45)} if pa.types.is_struct(arrow_type) else dt.time(13, 45)
    data = pa.Table.from_pylist([{"id": 1, "t": value}],
                                pa.schema([("id", pa.int64()), ("t", arrow_type)]))
    step = run_step(spark, servers, kind, table, root, "1.parquet", data)
    text = str(step.refused)
    assert step.refused is not None and step.refused.exit_code == 3 and not step.committed
    assert f"column {column!r} is a Parquet TIME" in text and "cast it to a string" in text, text
    assert "1.parquet" in text
