"""Scoped snapshots attacked (issue 41, item 1; docs/scope.md): predicates that would judge
keys differently each time they are evaluated, scope columns whose normalizers make two raw
values one, map columns, key columns as the scope, comments and placeholders inside literals.
Each case fails on the code before its fix; a sink is read back with deltalake (independent of
the code under test)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from diffcdc.cli.main import main
from diffcdc.config import TableConfig
from diffcdc.core.scope import ScopeConfig, enclosed, identifiers, where_problem
from diffcdc.state.store import TableState


@pytest.mark.parametrize("where, word", [
    ("n > 0 AND rand() < 0.5", "rand()"),
    ("n > 0 AND RANDN (7) < 0", "RANDN()"),
    ("uuid() > 'a'", "uuid()"),
    ("d >= current_date() - 90", "current_date()"),
    ("d >= current_date - 90", "current_date()"),  # Spark takes it without parentheses too
    ("ts > now()", "now()"),
    ("n < unix_timestamp()", "unix_timestamp()"),
    ("region = current_user()", "current_user()"),
    ("n > 0 /* keep */ AND java_method('java.lang.Math', 'random') < 0.5", "java_method()"),
])
def test_a_where_whose_value_is_not_a_function_of_the_row_is_refused(where, word):
    """A random predicate deleted a random half of the keys outside the scope with exit 0; a
    clock or session predicate judges keys differently when a version is diffed again."""
    problem = where_problem(where)
    assert problem is not None and f"calls {word}" in problem, problem
    with pytest.raises(ValidationError, match="calls"):
        ScopeConfig(where=where)


@pytest.mark.parametrize("where", [
    "n < unix_timestamp(ts)",  # of a column: a function of the row
    "`rand` < 0.5 AND `current_date` > DATE '2020-01-01'",  # columns so named, backquoted
    "label = 'rand()' AND note <> \"now()\"",  # inside literals
    "n > 0 -- rand() once was here",
    "n > 0 /* current_date */",
    "operand > 0 AND my_user_id = 1 AND brand = 'x'",  # words that only contain the names
    "d >= add_months(CAST({snapshot_time} AS DATE), -3)",
    "d > CAST({snapshot_time} AS DATE) - 90 AND ts <= {snapshot_time}",  # twice
])
def test_a_where_over_the_rows_values_is_accepted(where):
    assert where_problem(where) is None
    assert ScopeConfig(where=where).where == where


@pytest.mark.parametrize("where, words", [
    ("n > (SELECT 5)", "has a subquery"),
    ("n > 0 AND EXISTS (select 1)", "has a subquery"),
    ("label <> '{snapshot_time}'", "inside a string literal"),
    ('note = "as of {snapshot_time}" AND n > 0', "inside a string literal"),
])
def test_a_subquery_and_a_quoted_placeholder_are_refused_at_load(where, words):
    with pytest.raises(ValidationError, match=words):
        ScopeConfig(where=where)


def test_scope_columns_holding_every_key_column_are_refused():
    """columns = the key: a snapshot covers exactly the keys it holds, so a deleted key was
    kept forever with exit 0."""
    base = {"name": "T", "source": "src", "landing": "out", "keys": ["id"]}
    with pytest.raises(ValidationError, match="hold every key column .*no key could ever be"):
        TableConfig(**base, scope={"columns": ["ID"]})
    with pytest.raises(ValidationError, match="hold every key column"):
        TableConfig(**{**base, "keys": ["tenant", "id"]},
                     scope={"columns": ["id", "tenant", "region"], "where": "n > 0"})
    # a part of a composite key groups keys: it can delete
    assert TableConfig(**{**base, "keys": ["tenant", "id"]}, scope={"columns": ["tenant"]})


def test_identifiers_leave_out_comments_and_a_where_ends_its_last_line():
    assert identifiers("n > 0 -- not region\nAND /* nor country */ v = 'x'") == ["n", "AND", "v"]
    assert enclosed("n > 0 -- all") == "(n > 0 -- all\n)"


# ----------------------------------------------------------------------------- through the CLI


def _config(base, scope: str, normalize: str = "", keys: tuple[str, ...] = ("id",)) -> str:
    path = str(base / "diffcdc.toml")
    lake = json.dumps(str(base / "lake"))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(
            f"[diffcdc]\nstate = {json.dumps(str(base / 'state'))}\n\n"
            "[quality]\nmin_row_ratio = 0.0\nmax_delete_ratio = 1.0\n\n"
            f"[tables.T]\nsource = {json.dumps(str(base / 'src'))}\nkeys = {json.dumps(keys)}\n\n"
            f"[[tables.T.sinks]]\ntype = \"delta\"\nname = \"lake\"\npath = {lake}\n\n"
            f"[tables.T.scope]\n{scope}\n{normalize}")
    return path


def _snapshot(base, name: str, rows: list[tuple], m=None) -> None:
    os.makedirs(base / "src", exist_ok=True)
    ids, regions, ns = zip(*rows)
    columns = {"id": pa.array(ids, pa.int64()), "region": pa.array(regions, pa.string()),
               "n": pa.array(ns, pa.int64())}
    if m is not None:
        columns["m"] = m
    pq.write_table(pa.table(columns), base / "src" / name)


def _lake(base) -> list[tuple]:
    from deltalake import DeltaTable

    table = DeltaTable(str(base / "lake")).to_pyarrow_table(columns=["id", "region"])
    return sorted(zip(table.column("id").to_pylist(), table.column("region").to_pylist()))


def _head(base) -> int | None:
    state = TableState(str(base / "state"), "T")
    head = state.head() if os.path.isdir(base / "state" / "T") else None
    return head.version if head else None


def _refused(base, capsys, path: str, code: int, *words: str) -> None:
    before = _head(base), (_lake(base) if os.path.isdir(base / "lake") else None)
    capsys.readouterr()
    assert main(["run", "--config", path, "--quiet"]) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "table T" in err and all(w in err for w in words), err
    assert (_head(base), (_lake(base) if os.path.isdir(base / "lake") else None)) == before


def test_a_normalized_scope_column_covers_what_its_normalizers_make_one(spark, tmp_path):
    """region has trim and casefold: the first extract wrote 'EU ', today's writes 'eu'. The
    keys of 'EU ' today's extract lacks are inside its scope and deleted (they were kept with
    exit 0: the tuples were compared raw), the keys of 'US' kept."""
    path = _config(tmp_path, 'columns = ["region"]',
                   '[tables.T.normalize]\nregion = ["trim", "casefold"]\n')
    _snapshot(tmp_path, "1.parquet", [(i, "EU ", i) for i in range(6)]
              + [(100 + i, "US", i) for i in range(3)])
    assert main(["run", "--config", path, "--quiet"]) == 0
    _snapshot(tmp_path, "2.parquet", [(i, "eu", i) for i in range(3)])
    assert main(["run", "--config", path, "--quiet"]) == 0
    counts = TableState(str(tmp_path / "state"), "T").head().record.counts
    assert (counts.deleted, counts.kept, counts.unchanged) == (3, 3, 3)
    # the published values stay as the source had them
    assert _lake(tmp_path) == [(0, "EU "), (1, "EU "), (2, "EU "), (100, "US"), (101, "US"),
                               (102, "US")]


def test_refusals_of_an_attacked_scope_publish_nothing(spark, tmp_path, capsys):
    """A random where, a map scope column (a Spark error with exit 1 before), a where over a
    map column: each refused in one line with exit 2, a where failing on a value with exit 3,
    the head and the Delta table unchanged; a where ending in a comment (refused as not
    parsing before) works."""
    path = _config(tmp_path, 'columns = ["region"]')
    tags = pa.array([{"region": "eu"}] * 3, pa.map_(pa.string(), pa.string()))
    _snapshot(tmp_path, "1.parquet", [(1, "eu", 1), (2, "eu", 2), (3, "us", 3)], tags)
    assert main(["run", "--config", path, "--quiet"]) == 0
    _snapshot(tmp_path, "2.parquet", [(1, "eu", 1)], tags.slice(0, 1))
    _refused(tmp_path, capsys, _config(tmp_path, 'where = "n > 0 AND rand() < 0.5"'), 2,
             "calls rand()", "diffcdc.toml")
    _refused(tmp_path, capsys, _config(tmp_path, 'columns = ["m"]'), 2,
             "the scope reads column(s) m, which hold a map", "2.parquet")
    _refused(tmp_path, capsys, _config(tmp_path, "where = \"m['region'] = 'eu'\""), 2,
             "the scope reads column(s) m, which hold a map")
    # a where failing on a snapshot's value (ANSI casts): exit 1 with Spark's error before
    _refused(tmp_path, capsys, _config(tmp_path, 'where = "CAST(region AS INT) > 0"'), 3,
             "fails on a value of the snapshot", "CAST_INVALID_INPUT", "try_cast", "2.parquet")
    assert main(["run", "--config", _config(tmp_path, "where = \"region = 'eu' -- eu only\""),
                 "--quiet"]) == 0
    assert _lake(tmp_path) == [(1, "eu"), (3, "us")]


def test_a_rollback_of_a_window_scope_deletes_what_either_window_says_came_later(
        spark, tmp_path, capsys):
    """A {snapshot_time} window rolled back: version 1 (as of 01-20, window from 01-10) held
    keys 1-3; version 2 (01-25, window from 01-15) added key 4, dated 01-12 (a late insert),
    and key 5. Rolled back to version 1, the rollback is as of the head's time: judged by the
    head's window alone, key 4 (outside it) was kept with exit 0 though version 1 never had it."""
    import datetime as dt

    path = str(tmp_path / "diffcdc.toml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(
            f"[diffcdc]\nstate = {json.dumps(str(tmp_path / 'state'))}\n\n"
            "[quality]\nmin_row_ratio = 0.0\nmax_delete_ratio = 1.0\n\n"
            f"[tables.T]\nsource = {json.dumps(str(tmp_path / 'src'))}\nkeys = [\"id\"]\n"
            "snapshot_time = \"id:%Y-%m-%d\"\n\n"
            f"[[tables.T.sinks]]\ntype = \"delta\"\nname = \"lake\"\n"
            f"path = {json.dumps(str(tmp_path / 'lake'))}\n\n"
            "[tables.T.scope]\nwhere = \"d >= date_sub(CAST({snapshot_time} AS DATE), 10)\"\n")
    os.makedirs(tmp_path / "src")

    def snapshot(name: str, rows: list[tuple[int, str]]) -> None:
        pq.write_table(pa.table({"id": [i for i, _ in rows],
                                 "d": [dt.date.fromisoformat(d) for _, d in rows]}),
                       tmp_path / "src" / name)

    def lake() -> list[int]:
        from deltalake import DeltaTable

        return sorted(DeltaTable(str(tmp_path / "lake")).to_pyarrow_table().column("id")
                      .to_pylist())

    snapshot("2026-01-20.parquet", [(1, "2026-01-12"), (2, "2026-01-15"), (3, "2026-01-19")])
    assert main(["run", "--config", path, "--quiet"]) == 0
    snapshot("2026-01-25.parquet", [(2, "2026-01-15"), (3, "2026-01-19"), (4, "2026-01-12"),
                                    (5, "2026-01-24")])
    assert main(["run", "--config", path, "--quiet"]) == 0
    assert lake() == [1, 2, 3, 4, 5]  # key 1 slid out of the window: kept
    assert main(["rollback", "--config", path, "--table", "T", "--to-version", "1", "--yes",
                 "--quiet"]) == 0
    assert lake() == [1, 2, 3]
    head = TableState(str(tmp_path / "state"), "T").head().record
    assert (head.counts.deleted, head.counts.kept) == (2, 0)
    # the version records both windows: a repair diffs its snapshot again with them
    assert "2026-01-20" in head.scope.where and "2026-01-25" in head.scope.where


def test_dlt_scd2_merge_key_partition_as_a_scope(spark, tmp_path):
    """Another tool's test as the oracle: dlt's scd2 with ``merge_key="date"``
    (tests/load/pipeline/test_scd2.py::test_merge_key_partition). dlt without a primary key
    identifies a record by its whole row: keys (date, name); its merge key is the scope's
    column. A load retires only the records of the dates it holds: load 2 (date 01-02) leaves
    01-01 alone; load 3 (01-01 again) retires b, adds bb, leaves 01-02 alone."""
    from deltalake import DeltaTable

    path = _config(tmp_path, 'columns = ["date"]', keys=("date", "name"))

    def load(name: str, rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
        os.makedirs(tmp_path / "src", exist_ok=True)
        pq.write_table(pa.table({"date": [d for d, _ in rows], "name": [n for _, n in rows]}),
                       tmp_path / "src" / name)
        assert main(["run", "--config", path, "--quiet"]) == 0
        table = DeltaTable(str(tmp_path / "lake")).to_pyarrow_table()
        return sorted(zip(table.column("date").to_pylist(), table.column("name").to_pylist()))

    assert load("1.parquet", [("2024-01-01", "a"), ("2024-01-01", "b")]) == [
        ("2024-01-01", "a"), ("2024-01-01", "b")]
    assert load("2.parquet", [("2024-01-02", "c"), ("2024-01-02", "d")]) == [
        ("2024-01-01", "a"), ("2024-01-01", "b"), ("2024-01-02", "c"), ("2024-01-02", "d")]
    assert load("3.parquet", [("2024-01-01", "a"), ("2024-01-01", "bb")]) == [
        ("2024-01-01", "a"), ("2024-01-01", "bb"), ("2024-01-02", "c"), ("2024-01-02", "d")]
    counts = TableState(str(tmp_path / "state"), "T").head().record.counts
    assert (counts.inserted, counts.deleted, counts.unchanged, counts.kept) == (1, 1, 1, 2)
