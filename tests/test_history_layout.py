"""The history's layout (issue 41 items 2 and 3) without Spark: deletes as tombstone rows,
column names and open-end sentinels, the layout recorded with the history and a rebuild into
another one, published through the Delta sink's own ``publish`` (tests/support/history_publish)
and checked by the independent checker as of every version."""

from __future__ import annotations

import datetime as dt

import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffcdc.core.history_layout import HistoryLayout, OpenEnd
from diffcdc.errors import ConfigError
from diffcdc.sinks.delta import history as scd2
from diffcdc.sinks.delta.config import DeltaSinkConfig
from tests.support.history import Names, as_of, canonical, check_history, history_rows
from tests.support.history_publish import HistoryDriver, snapshot_rows
from tests.support.hypothesis_profiles import examples

UTC = dt.timezone.utc
FAR = dt.datetime(9999, 12, 31, tzinfo=UTC)
MAX = 9223372036854775807

#: The sink settings of each layout variant, and the checker's view of it.
VARIANTS = {
    "default": ({}, Names()),
    "rows": ({"deletes": "row"}, Names(deleted="__DELETED")),
    "dbt": ({"deletes": "row",
             "history_columns": {"valid_from": "dbt_valid_from", "valid_to": "dbt_valid_to",
                                 "start_at": "dbt_start", "end_at": "dbt_end",
                                 "changed_columns": "dbt_changed", "deleted": "dbt_is_deleted"},
             "open_end": {"valid_to": "9999-12-31T00:00:00Z", "end_at": MAX}},
            Names("dbt_start", "dbt_end", "dbt_valid_from", "dbt_valid_to", "dbt_changed",
                  "dbt_is_deleted", MAX, FAR)),
    "sentinels": ({"open_end": {"end_at": MAX}, "history_columns": {"end_at": "closed_at"}},
                  Names(end_at="closed_at", open_end_at=MAX)),
}

#: Deletes, keys that come back, a key change (1 -> 5: a delete and an insert), NULLs.
SEQUENCE = [
    {1: ("a", 1), 2: ("b", None), 3: ("c", 3)},
    {1: ("a2", 1), 3: ("c", 3), 4: (None, None)},  # 2 deleted
    {1: ("a2", 1), 2: ("b", None), 3: ("c", 30)},  # 2 back, 4 deleted
    {5: ("a2", 1), 2: ("b", None), 3: ("c", 30)},  # key change 1 -> 5
    {5: ("a2", 1), 2: ("b", None), 3: ("c", 30)},  # nothing changes
    {},  # every key deleted
    {1: ("a3", None), 4: ("d", 4)},  # back after the delete, both
]


def _check(driver: HistoryDriver, names: Names, snapshots: list[dict]) -> list[dict]:
    import os

    rows = history_rows(driver.path) if os.path.isdir(driver.path) else []
    check_history(rows, ["id"], names=names)
    for version, snapshot in enumerate(snapshots, start=1):
        assert canonical(as_of(rows, version, names)) == canonical(snapshot_rows(snapshot)), (
            version)
    return rows


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_layout_is_each_snapshot_as_of_every_version(tmp_path, variant):
    sink_settings, names = VARIANTS[variant]
    driver = HistoryDriver(str(tmp_path), sink_settings)
    for snapshot in SEQUENCE:
        driver.publish(snapshot)
    rows = _check(driver, names, SEQUENCE)
    assert {c for r in rows for c in r} == {"id", "v", "n", *names.columns}
    if names.deleted:  # a delete is a row with the key's last values, never NULLs
        tombs = sorted((r["id"], r[names.start_at], r["v"]) for r in rows if r[names.deleted])
        assert tombs == [(1, 4, "a2"), (2, 2, "b"), (2, 6, "b"), (3, 6, "c"),
                         (4, 3, None), (5, 6, "a2")]
        (tomb,) = [r for r in rows if r[names.deleted] and r["id"] == 2
                   and r[names.start_at] == 2]
        assert tomb[names.valid_from] == driver.time(2) and tomb[names.end_at] == 3
        assert tomb[names.valid_to] == driver.time(3) and tomb[names.changed] is None
    else:
        assert sum(names.is_open(r) for r in rows) == 2
    # the sink's own replay (verify) reads the image: open rows, no tombstones
    replayed = driver.sink().replay(None)  # type: ignore[arg-type]  # no Spark needed
    assert canonical(replayed.rows) == canonical(snapshot_rows(SEQUENCE[-1]))


def test_a_full_image_closes_tombstones_of_keys_back_and_leaves_deleted_keys_deleted(tmp_path):
    sink_settings, names = VARIANTS["dbt"]
    driver = HistoryDriver(str(tmp_path), sink_settings)
    snapshots = [{1: ("a", 1), 2: ("b", 2), 3: ("c", 3)}, {1: ("a", 1)},
                 {1: ("a", 1), 2: ("b", 2), 4: ("d", 4)}]
    driver.publish(snapshots[0])
    driver.publish(snapshots[1])
    driver.publish(snapshots[2], image=True)  # a reload: 2 back, 3 stays deleted, 4 new
    rows = _check(driver, names, snapshots)
    assert sorted((r["id"], r[names.start_at]) for r in rows if names.is_open(r)) == [
        (1, 1), (2, 3), (3, 2), (4, 3)]  # 3's tombstone stays open


_values = st.tuples(st.sampled_from(["x", "y", None]), st.sampled_from([1, 2, None]))
_snapshots = st.lists(st.dictionaries(st.integers(0, 6), _values, max_size=6),
                      min_size=1, max_size=6)


@pytest.mark.parametrize("variant", ["rows", "dbt"])
def test_random_sequences_with_tombstones_are_exact_as_of_every_version(tmp_path_factory,
                                                                        variant):
    sink_settings, names = VARIANTS[variant]

    @settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
    @given(snapshots=_snapshots, images=st.lists(st.booleans(), min_size=6, max_size=6))
    def body(snapshots, images):
        driver = HistoryDriver(str(tmp_path_factory.mktemp("h")), sink_settings)
        for snapshot, image in zip(snapshots, images):
            # (a full image of an empty snapshot publishes nothing to a Delta table, in
            # either mode: the engine's gate refuses an empty snapshot by default)
            driver.publish(snapshot, image=image and bool(driver.previous) and bool(snapshot))
        _check(driver, names, snapshots)

    body()


@pytest.mark.parametrize(("before", "after"), [("default", "rows"), ("rows", "default"),
                                               ("default", "dbt"), ("dbt", "sentinels")])
def test_a_full_image_rebuilds_the_history_in_the_new_layout(tmp_path, before, after):
    """A reload with changed settings: the same history, every version as before, now in the
    new layout (tombstones derived from the gaps, or dropped); the sink then goes on."""
    driver = HistoryDriver(str(tmp_path), VARIANTS[before][0])
    for snapshot in SEQUENCE[:4]:
        driver.publish(snapshot)
    driver.settings = VARIANTS[after][0]
    driver.publish(SEQUENCE[4], image=True)
    driver.publish(SEQUENCE[5])
    driver.publish(SEQUENCE[6])
    _check(driver, VARIANTS[after][1], SEQUENCE)
    assert scd2.table_layout(DeltaTable(driver.path)) == driver.sink().layout


def test_a_history_made_before_layouts_is_the_default_layout(tmp_path):
    """A history whose schema records no layout (as main's 487cccd wrote it) reads as the
    default one; another layout is refused unless a full image rebuilds it."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from diffcdc.sinks.base import ChangeSet, SinkTable

    path = str(tmp_path / "history")
    plain = [f.remove_metadata() for f in scd2.history_fields()]
    data = pa.table({"id": [1], "v": ["a"], "n": [None]},
                    pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.int64())]))
    version = scd2.Version(1, dt.datetime(2026, 1, 2, tzinfo=UTC))
    rows = scd2.image_rows(data, version)
    write_deltalake(path, rows.cast(pa.schema([*data.schema, *plain])))
    table = DeltaTable(path)
    assert scd2.table_layout(table) == HistoryLayout()
    sink = HistoryDriver(str(tmp_path), {"deletes": "row"}).sink()
    changes = ChangeSet(SinkTable("T", ("id",)), 2, "2", None, None, False, 0, 0, 1,  # type: ignore[arg-type]
                        snapshot_time=dt.datetime(2026, 1, 3, tzinfo=UTC))
    with pytest.raises(ConfigError, match="an existing history keeps its layout") as refused:
        sink._accept_layout(changes, table)
    assert "diffcdc reload --table T --sink history --yes" in str(refused.value)
    assert "\n" not in str(refused.value) and refused.value.exit_code == 2


def test_a_layout_is_recorded_and_read_back():
    layout = HistoryLayout(start_at="s", deleted="gone", open_end=OpenEnd(MAX, FAR))
    assert HistoryLayout.from_record(layout.text()) == layout
    assert HistoryLayout.from_record(None) == HistoryLayout()
    assert layout.as_of_sql(3) == "s <= 3 AND (__END_AT IS NULL OR __END_AT > 3) AND NOT gone"
    assert layout.open_sql("t.") == f"t.__END_AT = {MAX}"
    assert not layout.as_of({"s": 1, "__END_AT": MAX, "gone": True}, 2)
    assert layout.as_of({"s": 1, "__END_AT": MAX, "gone": False}, 2)


@pytest.mark.parametrize(("settings_", "message"), [
    ({"deletes": "row"}, "need mode = \"scd2\""),
    ({"open_end": {"end_at": MAX}}, "need mode = \"scd2\""),
    ({"mode": "scd2", "open_end": {"valid_to": "someday"}}, "is not a timestamp"),
    ({"mode": "scd2", "open_end": {"valid_to": "9999-12-31"}}, "has no time zone"),
    ({"mode": "scd2", "open_end": {"end_at": 0}}, "no version sentinel"),
    ({"mode": "scd2", "history_columns": {"start_at": "x", "valid_from": "X"}}, "given twice"),
    ({"mode": "scd2", "history_columns": {"end_at": "__diffcdc_end"}}, "reserved"),
    ({"mode": "scd2", "history_columns": {"deleted": "gone"}}, "set deletes = \"row\""),
])
def test_settings_that_cannot_work_are_refused_by_the_config(settings_, message):
    with pytest.raises(ValueError, match=message):
        DeltaSinkConfig(path="lake/h", **settings_)


def test_tracked_columns_with_tombstones_restate_in_place_and_keep_the_last_values(tmp_path):
    """A change only in the untracked ``n`` is written into the open row; a delete's tombstone
    then carries the restated values (the key's last ones)."""
    sink_settings, names = VARIANTS["dbt"]
    driver = HistoryDriver(str(tmp_path), {**sink_settings, "track_history_except_columns": ["n"]})
    snapshots = [{1: ("a", 1), 2: ("b", 1)}, {1: ("a", 2), 2: ("b2", 2)}, {2: ("b2", 2)},
                 {1: ("a", 3), 2: ("b2", 2)}]
    for snapshot in snapshots:
        driver.publish(snapshot)
    rows = history_rows(driver.path)
    check_history(rows, ["id"], names=names)
    for version, snapshot in enumerate(snapshots, start=1):  # exact in the tracked column
        assert canonical(as_of(rows, version, names), ["id", "v"]) == canonical(
            snapshot_rows(snapshot), ["id", "v"]), version
    got = sorted((r["id"], r["v"], r["n"], r[names.start_at], r[names.deleted]) for r in rows)
    assert got == [(1, "a", 2, 1, False), (1, "a", 2, 3, True), (1, "a", 3, 4, False),
                   (2, "b", 1, 1, False), (2, "b2", 2, 2, False)]
