"""Issue 41's history layout attacked (deletes as rows, column names, open-end sentinels): a
hostile operator's config changes and commands, another writer's changes to the history, and
the queries a dbt snapshot user runs against it. Every outcome is checked from the table's rows
with the independent checker (tests/support/history.py), never with the sink's own reader."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main
from diffcdc.state.store import TableState
from tests.support.cli_runs import one_stderr_line
from tests.support.config_text import toml_value
from tests.support.history import (
    Names,
    as_of,
    canonical,
    check_history,
    history_rows,
    published_outputs,
)

pytestmark = pytest.mark.slow
UTC = dt.timezone.utc
MAX = 9223372036854775807
FAR = dt.datetime(9999, 12, 31, tzinfo=UTC)
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.int64())])
#: Deletes, a key back, a key deleted again, a row of NULLs but its key.
SNAPSHOTS = {"2026-01-01": [(1, "a", 1), (2, None, None), (3, "c", 3)],
             "2026-01-02": [(1, "a2", 1), (3, "c", 3)],
             "2026-01-03": [(1, "a2", 1), (2, None, None)],
             "2026-01-04": [(1, "a2", 1), (3, "c", 4)]}
#: A tombstone layout with both sentinels: the history every attack starts from.
ROWS = {"deletes": "row", "open_end": {"valid_to": "9999-12-31T00:00:00Z"}}
ROWS_NAMES = Names(deleted="__DELETED", open_valid_to=FAR)


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs(tmp_path / "src")
    return tmp_path


def _config(base, file: str = "diffcdc.toml", **history) -> str:
    sink = {"type": "delta", "name": "history", "path": "lake/h", "mode": "scd2", **history}
    body = "".join(f"{k} = {toml_value(v)}\n" for k, v in sink.items())
    path = base / file
    path.write_text(
        "[diffcdc]\nstate = 'state'\n[quality]\nmin_row_ratio = 0.0\nmax_delete_ratio = 1.0\n"
        "allow_empty = true\n"
        "[tables.T]\nsource = 'src'\nkeys = ['id']\nsnapshot_time = 'id:%Y-%m-%d'\n"
        "[[tables.T.sinks]]\ntype = 'open_mirroring'\nname = 'landing'\nlanding = 'landing'\n"
        f"[[tables.T.sinks]]\n{body}")
    return str(path)


def _write(base, day: str, rows=None) -> None:
    data = [dict(zip(SCHEMA.names, r)) for r in (rows if rows is not None else SNAPSHOTS[day])]
    pq.write_table(pa.Table.from_pylist(data, SCHEMA), str(base / "src" / f"{day}.parquet"))


def _exact(base, names: Names) -> list[dict]:
    """The history checked by the independent checker: every rule, and as of every version
    of the state the snapshot it committed."""
    rows = history_rows(str(base / "lake" / "h"))
    check_history(rows, ["id"], names=names)
    commits = TableState(str(base / "state"), "T").commits()
    for commit in commits:
        snapshot = pq.read_table(commit.record.snapshot_path).to_pylist()
        assert canonical(as_of(rows, commit.version, names)) == canonical(snapshot), (
            commit.version)
    # the times are the snapshots' as-of times, as the state recorded them (the text read
    # here by hand: "2026-01-01T00:00:00.000000Z")
    times = {c.version: dt.datetime.strptime(c.record.snapshot_time, "%Y-%m-%dT%H:%M:%S.%fZ"
                                             ).replace(tzinfo=UTC) for c in commits}
    for r in rows:
        assert r[names.valid_from] == times[r[names.start_at]], r
        if not names.is_open(r):
            assert r[names.valid_to] == times[r[names.end_at]], r
    return rows


def _run(config: str, *args: str) -> int:
    return main([*(args or ("run",)), "--config", config, "--quiet"])


def test_each_single_layout_change_is_refused_and_a_reload_rebuilds_it_exactly(
        spark, base, capsys):
    """One setting changed at a time — deletes only, one name only (by case only, too), a
    sentinel only — is refused with nothing published; the same sentinel spelled in another
    zone is no change; the reload the refusal names rebuilds the history exactly."""
    config = _config(base, **ROWS)
    for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
        _write(base, day)
        assert _run(config) == 0
    _exact(base, ROWS_NAMES)
    _write(base, "2026-01-04")
    before = published_outputs(base)
    changes = [
        {"deletes": "close", "open_end": ROWS["open_end"]},
        {**ROWS, "history_columns": {"deleted": "__deleted"}},
        {**ROWS, "history_columns": {"changed_columns": "changed"}},
        {"deletes": "row", "open_end": {"valid_to": "9999-12-30T00:00:00Z"}},
        {**ROWS, "open_end": {**ROWS["open_end"], "end_at": MAX}},
    ]
    for i, change in enumerate(changes):
        capsys.readouterr()
        assert _run(_config(base, f"c{i}.toml", **change)) == 2, change
        error = one_stderr_line(capsys)
        assert "an existing history keeps its layout" in error, error
        assert "'diffcdc reload --table T --sink history --config " in error, error
        assert published_outputs(base) == before, change
    # the same instant in another zone is the same sentinel: no change, the run goes on
    same = _config(base, "same.toml", deletes="row",
                   open_end={"valid_to": "9999-12-31T01:00:00+01:00"})
    assert _run(same) == 0
    _exact(base, ROWS_NAMES)
    # the last change through the reload its refusal names: every version kept, exact
    _write(base, "2026-01-05", [(1, "a3", 1), (4, "d", None)])
    last = _config(base, "last.toml", deletes="row",
                   history_columns={"deleted": "is_deleted", "valid_to": "valid_to"},
                   open_end={"end_at": MAX})
    capsys.readouterr()
    assert _run(last) == 2
    words = one_stderr_line(capsys).split("'")[-2].split()
    assert words[:2] == ["diffcdc", "reload"] and "--yes" in words
    assert main([*words[1:], "--quiet"]) == 0
    assert _run(last) == 0
    _exact(base, Names(valid_to="valid_to", deleted="is_deleted", open_end_at=MAX))


def test_verify_status_and_rollback_on_a_tombstone_history(spark, base, capsys):
    config = _config(base, **ROWS)
    for day in SNAPSHOTS:
        _write(base, day)
        assert _run(config) == 0
    _exact(base, ROWS_NAMES)
    snapshot = str(base / "src" / "2026-01-04.parquet")
    assert _run(config, "verify", "--table", "T", "--snapshot", snapshot) == 0
    assert _run(config, "status", "--json") == 0
    capsys.readouterr()
    # back to version 2 (keys 2 deleted, 3 there): a new version, its tombstones exact
    assert _run(config, "rollback", "--table", "T", "--to-version", "2", "--yes") == 0
    _exact(base, ROWS_NAMES)
    head = TableState(str(base / "state"), "T").head()
    assert head.version == 5 and head.published
    assert _run(config, "verify", "--table", "T", "--snapshot",
                str(base / "src" / "2026-01-02.parquet")) == 0


@pytest.mark.parametrize("sentinel", ["9999-12-31T23:00:00-05:00", "0001-01-01T00:30:00+01:00"])
def test_a_sentinel_outside_the_years_1_to_9999_in_utc_is_refused_naming_it(base, capsys,
                                                                          sentinel):
    """Both are valid ISO times, but past the year 9999 (or before the year 1) in UTC: was an
    OverflowError blamed on the Delta sink plug-in ("fix the sink plug-in")."""
    _write(base, "2026-01-01")
    assert _run(_config(base, open_end={"valid_to": sentinel})) == 2
    error = one_stderr_line(capsys)
    assert f"'{sentinel}' is outside the years 1 to 9999 in UTC" in error, error
    assert "table T" in error and "plug-in" not in error, error
    assert not os.path.exists(base / "state") and not os.path.exists(base / "lake")


def test_a_layout_and_snapshot_times_before_the_year_1000_are_recorded_readably():
    """``strftime("%Y")`` writes the year 999 as ``999``, which ``fromisoformat`` refuses: a
    history with such a sentinel, or a snapshot timed so, could never be read again."""
    from diffcdc.core.history_layout import HistoryLayout, OpenEnd
    from diffcdc.sources.snapshot_time import format_time, read_time

    for year in (1, 999, 1000, 9999):
        time = dt.datetime(year, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
        layout = HistoryLayout(open_end=OpenEnd(valid_to=time))
        assert HistoryLayout.from_record(layout.text()) == layout
        assert read_time(format_time(time)) == time
        assert format_time(time).startswith(f"{year:04d}-12-31T")
    # what the earlier code recorded is read too
    assert read_time("500-01-01T00:00:00.000000Z") == dt.datetime(500, 1, 1, tzinfo=UTC)
    record = HistoryLayout(open_end=OpenEnd(valid_to=dt.datetime(999, 1, 1, tzinfo=UTC)))
    assert HistoryLayout.from_record(record.text().replace('"0999-', '"999-')) == record


def test_snapshot_times_before_the_year_1000_make_an_exact_history(spark, base):
    """Was: the first version committed, the history's publish failed on the time it had
    recorded, and every later run of the table failed the same way (stuck, exit 1)."""
    config = _config(base, deletes="row", open_end={"valid_to": "0999-12-31T00:00:00Z"})
    for day, snapshot in zip(("0500-01-01", "0500-01-02"), SNAPSHOTS):
        _write(base, day, SNAPSHOTS[snapshot])
        assert _run(config) == 0, day
    names = Names(deleted="__DELETED", open_valid_to=dt.datetime(999, 12, 31, tzinfo=UTC))
    rows = _exact(base, names)
    assert min(r["__VALID_FROM"] for r in rows) == dt.datetime(500, 1, 1, tzinfo=UTC)


def _docs_queries() -> dict[str, str]:
    """docs/history.md's queries as written: the as-of-time SQL block, the current image's
    and the as-of-version conditions."""
    import re

    text = (Path(__file__).parent.parent / "docs" / "history.md").read_text(encoding="utf-8")
    sql = re.search(r"```sql\n(.*?)```", text, re.S)
    current = re.search(r"\*\*The current image\*\*: `([^`]*)`", text)
    version = re.search(r"\*\*As of a version\*\* \(exact whatever the times\): `([^`]*)`", text)
    assert sql and current and version, "docs/history.md's queries moved"
    return {"time": sql.group(1).replace("delta.`lake/customers_history`", "customers_history"),
            "current": f"SELECT * FROM customers_history WHERE {current.group(1)}",
            "version": "SELECT * FROM customers_history WHERE "
                       + " ".join(version.group(1).split()).replace("V", "2")}


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Tokyo"])
def test_the_docs_queries_give_the_same_rows_in_any_session_time_zone(spark, tmp_path, zone):
    """A Spark session's time zone (spark.sql.session.timeZone: the JVM's, unless set) reads
    a TIMESTAMP literal without a zone: ``TIMESTAMP'9999-12-31'`` in New York is not the
    sentinel, and the docs' current image was then empty (exit 0 and no rows)."""
    day = [dt.datetime(2026, 1, d, tzinfo=UTC) for d in (1, 2, 3)]
    rows = [(1, "Ann", "Oslo", 1, 2, day[0], day[1], None, False),
            (1, "Ann", "Bergen", 2, MAX, day[1], FAR, ["city"], False),
            (2, "Bob", "Rome", 1, 2, day[0], day[1], None, False),
            (2, "Bob", "Rome", 2, 3, day[1], day[2], None, True),
            (2, "Bob", "Paris", 3, MAX, day[2], FAR, None, False)]
    time = pa.timestamp("us", tz="UTC")
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("city", pa.string()),
                        ("dbt_version_from", pa.int64()), ("dbt_version_to", pa.int64()),
                        ("dbt_valid_from", time), ("dbt_valid_to", time),
                        ("dbt_changed_columns", pa.list_(pa.string())),
                        ("dbt_is_deleted", pa.bool_())])
    path = str(tmp_path / "history.parquet")
    pq.write_table(pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema),
                   path)
    zone_before = spark.conf.get("spark.sql.session.timeZone")
    spark.read.parquet(path).createOrReplaceTempView("customers_history")
    expected = {"time": [(1, "Ann", "Bergen")], "version": [(1, "Ann", "Bergen")],
                "current": [(1, "Ann", "Bergen"), (2, "Bob", "Paris")]}
    try:
        for name, query in _docs_queries().items():
            got = {}
            for session in ("UTC", zone):
                spark.conf.set("spark.sql.session.timeZone", session)
                got[session] = sorted(tuple(r)[:3] for r in spark.sql(query).collect())
            assert got == {"UTC": expected[name], zone: expected[name]}, (name, query)
        # a dbt user's text comparison (dbt's flag is 'True' / 'False'), as the docs say
        deleted = spark.sql("SELECT id FROM customers_history WHERE dbt_is_deleted = 'True'")
        assert [tuple(r) for r in deleted.collect()] == [(2,)]
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone_before)
        spark.catalog.dropTempView("customers_history")


@pytest.mark.parametrize("layout", ["rows", "renamed"])
def test_a_layout_record_removed_by_another_writer_is_named_as_that_writer(spark, base,
                                                                         capsys, layout):
    """Another writer rewrites the history with the same rows but a schema without diffcdc's
    layout record. Was: the run was refused as a config change ('made with deletes="close"',
    or 'not a history table') and the reload that message named failed after the other sinks
    had published; now the sink refuses that writer's commit on its own (the landing sink goes
    on), and RESTORE + the reload named bring the history back exactly."""
    from deltalake import DeltaTable, write_deltalake

    settings = ROWS if layout == "rows" else {
        "deletes": "row", "open_end": {"end_at": MAX},
        "history_columns": {"start_at": "s", "end_at": "e", "valid_from": "vf",
                            "valid_to": "vt", "deleted": "gone"}}
    names = ROWS_NAMES if layout == "rows" else Names("s", "e", "vf", "vt", deleted="gone",
                                                      open_end_at=MAX)
    config = _config(base, **settings)
    for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
        _write(base, day)
        assert _run(config) == 0
    path = str(base / "lake" / "h")
    ours = DeltaTable(path).version()
    data = DeltaTable(path).to_pyarrow_table()
    write_deltalake(path, data.cast(pa.schema([f.remove_metadata() for f in data.schema])),
                    mode="overwrite", schema_mode="overwrite")
    _write(base, "2026-01-04")
    # a sentinel the version reaches is refused still, the target refused or not: a version
    # staged with it would be published so later
    reached = _config(base, "reached.toml", **{**settings, "open_end": {"end_at": 4}})
    before = published_outputs(base)
    capsys.readouterr()
    assert _run(reached) == 2
    assert "open_end.end_at 4 is not above version 4" in one_stderr_line(capsys)
    assert published_outputs(base) == before
    assert _run(config) == 1  # the history failed on its own
    error = capsys.readouterr().err
    assert "the Delta table was changed by another writer" in error, error
    assert "RESTORE the Delta table to its version before that commit" in error, error
    assert "keeps its layout" not in error and "not a history table" not in error, error
    head = TableState(str(base / "state"), "T").head()
    assert head.version == 4 and not head.published  # the landing sink went on
    assert DeltaTable(path).version() == ours + 1  # nothing of diffcdc's on that writer's
    DeltaTable(path).restore(ours)
    words = error.split("'")[-2].split()
    assert words[:2] == ["diffcdc", "reload"], error
    assert main([*words[1:], "--quiet"]) == 0
    rows = history_rows(path)
    check_history(rows, ["id"], names=names)
    for commit in TableState(str(base / "state"), "T").commits():
        if commit.version == 4:  # the version the history missed: the reload replaced it
            continue
        snapshot = pq.read_table(commit.record.snapshot_path).to_pylist()
        assert canonical(as_of(rows, commit.version, names)) == canonical(snapshot)


def test_the_layouts_as_of_sql_quotes_names_that_are_no_plain_identifiers(spark):
    """``as_of_sql`` (for a later history sink, and for users' queries) wrote names bare:
    ``start-at <= 2`` is ``start`` minus ``at``, an error or another column's arithmetic."""
    from diffcdc.core.history_layout import HistoryLayout
    from diffcdc.core.sql import quote

    layout = HistoryLayout(start_at="start-at", end_at="end at", deleted="is`gone")
    frame = spark.createDataFrame(
        [(1, 1, 2, False), (1, 2, None, False), (2, 1, 2, False), (2, 2, None, True)],
        "id long, `start-at` long, `end at` long, `is``gone` boolean")
    for version, live in ((1, [1, 2]), (2, [1])):
        got = frame.where(layout.as_of_sql(version, quote)).select("id").collect()
        assert sorted(r.id for r in got) == live, version


ODD = {"deletes": "row",
       "history_columns": {"start_at": "Ünï start", "end_at": "e.n.d", "valid_from": "from-",
                           "valid_to": "to`x", "changed_columns": "ch ch",
                           "deleted": "is deleted?"},
       "open_end": {"valid_to": "9999-12-31T23:59:59.999999Z", "end_at": MAX}}
ODD_NAMES = Names("Ünï start", "e.n.d", "from-", "to`x", "ch ch", "is deleted?", MAX,
                  dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC))


def test_odd_names_keys_deleted_back_and_again_and_a_rebuild_that_swaps_names(tmp_path):
    """Held (kept as a guard): names with dots, spaces, a backtick, unicode, a trailing
    dash and the largest sentinels; a key deleted, back, deleted again in consecutive
    versions; a key whose values are all NULL; a full image; a rebuild into a layout whose
    start and end names are swapped and whose flag differs only in case."""
    from tests.support.history_publish import HistoryDriver, snapshot_rows

    seq = [{1: ("a", 1), 2: (None, None)}, {2: (None, None)}, {1: ("a", 1), 2: (None, None)},
           {2: (None, None)}, {1: ("b", 1)}, {1: ("b", 1), 3: ("c", None)}, {}]
    driver = HistoryDriver(str(tmp_path), ODD)
    for i, snapshot in enumerate(seq):
        driver.publish(snapshot, image=i == 5)

    def exact(names: Names, snapshots: list[dict]) -> list[dict]:
        rows = history_rows(driver.path)
        check_history(rows, ["id"], names=names)
        for version, snapshot in enumerate(snapshots, start=1):
            assert canonical(as_of(rows, version, names)) == canonical(
                snapshot_rows(snapshot)), version
        return rows

    rows = exact(ODD_NAMES, seq)
    assert sorted((r["id"], r["Ünï start"]) for r in rows if r["is deleted?"]) == [
        (1, 2), (1, 4), (1, 7), (2, 5), (3, 7)]
    swapped = {**ODD, "history_columns": {**ODD["history_columns"], "start_at": "e.n.d",
                                          "end_at": "Ünï start", "deleted": "IS DELETED?"}}
    driver.settings = swapped
    last = {1: ("b", 2)}
    driver.publish(last, image=True)
    exact(Names("e.n.d", "Ünï start", "from-", "to`x", "ch ch", "IS DELETED?", MAX,
                ODD_NAMES.open_valid_to), [*seq, last])


def test_a_current_table_whose_columns_are_named_like_a_history_goes_on(spark, base, capsys):
    """A current-mode table of an extract that holds a history's columns (__START_AT ...
    __VALID_TO: e.g. a copy of another diffcdc history). Was: its second run was refused,
    for good, as "a history table (mode = scd2)" at the sink's own path (exit 2). The mode
    its own versions made still decides: the same sink switched to scd2 is refused."""
    time = pa.timestamp("us", tz="UTC")
    schema = pa.schema([("id", pa.int64()), ("__START_AT", pa.int64()),
                        ("__END_AT", pa.int64()), ("__VALID_FROM", time), ("__VALID_TO", time)])
    config = base / "current.toml"
    entry = "[[tables.T.sinks]]\ntype = 'delta'\nname = 'lake'\npath = 'lake/h'\n"
    head = ("[diffcdc]\nstate = 'state'\n[quality]\nmin_row_ratio = 0.0\n"
            "max_delete_ratio = 1.0\n[tables.T]\nsource = 'src'\nkeys = ['id']\n"
            "snapshot_time = 'id:%Y-%m-%d'\n")
    config.write_text(head + entry)
    for day, n in (("2026-01-01", 2), ("2026-01-02", 3), ("2026-01-03", 1)):
        rows = [{"id": k, "__START_AT": k, "__END_AT": None, "__VALID_FROM": None,
                 "__VALID_TO": dt.datetime(2026, 1, 1, tzinfo=UTC)} for k in range(n)]
        path = str(base / "src" / f"{day}.parquet")
        pq.write_table(pa.Table.from_pylist(rows, schema), path)
        assert _run(str(config)) == 0, day
        assert _run(str(config), "verify", "--table", "T", "--snapshot", path) == 0, day
    pq.write_table(pa.Table.from_pylist([], schema), str(base / "src" / "2026-01-04.parquet"))
    scd2 = base / "scd2.toml"
    scd2.write_text(head + entry + "mode = 'scd2'\n")
    before = published_outputs(base)
    capsys.readouterr()
    assert _run(str(scd2)) == 3  # (its columns are the history's own)
    assert "'__START_AT' clashes with a column diffcdc adds" in one_stderr_line(capsys)
    assert published_outputs(base) == before


def test_a_sink_switched_to_the_other_mode_is_refused_by_the_mode_its_versions_made(tmp_path):
    """The check's mode test follows the sink's own versions once it published: a history
    the sink made, its config switched to mode = "current" (or back), is still refused."""
    from diffcdc.errors import ConfigError
    from diffcdc.sinks.base import SinkHistory, SinkTable
    from diffcdc.sinks.delta.config import DeltaSinkConfig
    from diffcdc.sinks.delta.sink import DeltaSink
    from tests.support.history_publish import HistoryDriver

    driver = HistoryDriver(str(tmp_path), {"deletes": "row"})
    driver.publish({1: ("a", 1)})
    driver.publish({2: ("b", 2)})
    current = DeltaSink("history", SinkTable("T", ("id",)),
                        DeltaSinkConfig(type="delta", name="history", path=driver.path))
    with pytest.raises(ConfigError, match="is a history table"):
        current.quick_check(SinkHistory(tuple(driver.manifests)))
    driver.sink().quick_check(SinkHistory(tuple(driver.manifests)))  # its own mode: fine
    as_current = [(v, {**m, "mode": "current"}) for v, m in driver.manifests]
    with pytest.raises(ConfigError, match="is not a history table|not a history table"):
        driver.sink().quick_check(SinkHistory(tuple(as_current)))


def test_an_end_at_sentinel_past_the_bigint_range_is_refused_at_load(base, capsys):
    """TOML (and the config model) take any integer: 2**63 passed the load, and the history's
    first commit then failed after the state had committed the version (exit 1)."""
    _write(base, "2026-01-01")
    assert _run(_config(base, open_end={"end_at": MAX + 1})) == 2
    error = one_stderr_line(capsys)
    assert f"open_end.end_at {MAX + 1} does not fit the bigint version column" in error, error
    assert "table T" in error, error
    assert not os.path.exists(base / "state") and not os.path.exists(base / "lake")


def test_a_full_image_removes_another_writers_copies_of_open_rows_with_odd_names(tmp_path):
    """Another writer appended exact copies of open rows (a live row and a tombstone); the
    reload's full image removes them first. Was: that removal named the columns unquoted
    (``e.n.d`` read as a table alias), so the reload failed on every history whose names or
    columns hold a dot."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable, write_deltalake

    from tests.support.history_publish import HistoryDriver, snapshot_rows

    seq = [{1: ("a", 1), 2: ("b", 2), 3: ("c", 3)}, {1: ("a2", 1), 3: ("c", 3)}]
    driver = HistoryDriver(str(tmp_path), ODD)
    for snapshot in seq:
        driver.publish(snapshot)
    data = DeltaTable(driver.path).to_pyarrow_table()
    copies = data.filter(pc.equal(data.column("e.n.d"), MAX))
    copies = copies.filter(pc.is_in(copies.column("id"), pa.array([1, 2])))
    assert copies.num_rows == 2  # 1's live row and 2's tombstone
    write_deltalake(driver.path, copies, mode="append")
    last = {1: ("a2", 1), 2: ("b", 2)}  # 2 back, 3 deleted
    driver.publish(last, image=True)
    rows = history_rows(driver.path)
    check_history(rows, ["id"], names=ODD_NAMES)
    for version, snapshot in enumerate([*seq, last], start=1):
        assert canonical(as_of(rows, version, ODD_NAMES)) == canonical(
            snapshot_rows(snapshot)), version


def _null_columns(config: str) -> str:
    """The config with ``removed_columns = "null"`` for table T."""
    path = Path(config)
    path.write_text(path.read_text(encoding="utf-8").replace(
        "snapshot_time = ", "removed_columns = 'null'\nsnapshot_time = "), encoding="utf-8")
    return config


def test_a_rebuild_onto_a_column_the_history_still_holds_is_refused_before_the_commit(
        spark, base, capsys):
    """A column the snapshots dropped stays in the history (removed_columns = "null"); a new
    layout naming its flag like it. Was: the reload committed, the other sinks published, and
    the history's rebuild failed after (exit 1, the reload's version stuck with that layout);
    now the reload is refused before anything is committed (exit 2)."""
    config = _null_columns(_config(base))
    _write(base, "2026-01-01")
    assert _run(config) == 0
    pq.write_table(pa.Table.from_pylist([{"id": 1, "v": "a"}],
                                        pa.schema([("id", pa.int64()), ("v", pa.string())])),
                   str(base / "src" / "2026-01-02.parquet"))  # n dropped: NULL from now on
    assert _run(config) == 0
    new = _null_columns(_config(base, "new.toml", deletes="row",
                                history_columns={"deleted": "N"}))
    before = published_outputs(base)
    capsys.readouterr()
    assert _run(new, "reload", "--table", "T", "--sink", "history", "--yes") == 2
    error = one_stderr_line(capsys)
    assert "the history holds column(s) ['n'] that the new layout names" in error, error
    assert published_outputs(base) == before


def test_a_reload_of_a_history_publishes_the_versions_it_left_unpublished_first(spark, base,
                                                                              capsys):
    """A run killed after its commit leaves version 4 unpublished; then the history is
    reloaded. Was: the reload superseded version 4 for the history (exit 0), whose rows as of
    version 4 were then version 3's snapshot; a history publishes it first now (a target the
    reload has to mend still lets the reload supersede it)."""
    import subprocess
    import sys

    from diffcdc.state.requests import reload_wanted

    config = _config(base, **ROWS)
    for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
        _write(base, day)
        assert _run(config) == 0
    _write(base, "2026-01-04")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    killed = subprocess.run(
        [sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--config", config,
         "--master", "local[1]"], env={**env, "DIFFCDC_CRASH_AT": "after_claim"},
        capture_output=True, text=True, timeout=300, check=False, cwd=base)
    assert killed.returncode == 137, killed.stderr[-2000:]
    state = TableState(str(base / "state"), "T")
    assert state.head().version == 4 and not state.head().published
    # the reload asked (as 'diffcdc reload' records it), and what 'diffcdc plan' says of it
    state.requests.save_reload(reload_wanted(None, "requested", ["history"]))
    capsys.readouterr()
    assert _run(config, "plan") == 0
    out = capsys.readouterr().out
    assert ("unpublished: history has not published version(s) 4 (the reload publishes it "
            "first (a history keeps every version), if it can)") in out, out
    assert "landing has not published version(s) 4 (the run publishes it first)" in out, out
    assert _run(config) == 0  # the requested reload
    assert state.head().version == 5 and state.head().published
    rows = _exact(base, ROWS_NAMES)  # as of every version, 4 included
    assert {r["__START_AT"] for r in rows} == {1, 2, 3, 4}  # (5: the reload changed nothing)
