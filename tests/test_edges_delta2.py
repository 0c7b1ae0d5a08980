"""Issue 38 for the Delta sinks (second part): a Delta table this state never wrote at a sink's
path (another tool's, another diffcdc state's) is refused, also when it appears between the
check and the publish; two states on one Delta path; verify of dates before year 1 and after
9999."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from diffcdc.config import TableConfig
from diffcdc.engine.verify import verify_table
from diffcdc.errors import TargetMismatch
from diffcdc.sinks.delta.feed import plain_types
from diffcdc.state.store import TableState
from tests.support.workspace import Workspace

pytestmark = pytest.mark.slow


def _ws(root: str, sinks: list[dict]) -> Workspace:
    ws = Workspace(root, keys=("id",))
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=sinks)
    return ws


def _far_dates(shift_days: int = 0, tag: str = "a") -> pa.Table:
    return pa.table({
        "id": pa.array([1, 2, 3], pa.int64()),
        "d": pa.array([0, 3_000_000 + shift_days, -800_000], pa.date32()),
        "v": [f"{tag}1", f"{tag}2", f"{tag}3"],
    })


def test_verify_of_delta_sinks_holding_dates_before_year_1_and_after_9999(spark, tmp_path):
    lake = tmp_path / "lake"
    ws = _ws(str(tmp_path), [
        {"type": "delta", "name": "delta", "path": str(lake / "t"),
         "changelog_path": str(lake / "log")},
        {"type": "delta", "name": "history", "path": str(lake / "h"), "mode": "scd2"},
    ])
    ws.write("1.parquet", _far_dates())
    assert ws.run(spark).outcome == "ok"
    ws.write("2.parquet", _far_dates(tag="b"))  # the history reads its open rows back
    assert ws.run(spark).outcome == "ok"
    snapshot = os.path.join(ws.source, "2.parquet")
    results = verify_table(spark, ws.table, ws.state, snapshot)
    assert all(r.identical for r in results.values()), {k: r.to_dict() for k, r in results.items()}
    other = ws.write("other.parquet", _far_dates(shift_days=1, tag="b"))
    os.replace(other, str(tmp_path / "other.parquet"))
    results = verify_table(spark, ws.table, ws.state, str(tmp_path / "other.parquet"))
    for sink_id, result in results.items():
        assert not result.identical and result.missing == [2] and result.unexpected == [2], (
            sink_id, result.to_dict())


# -- a Delta table this state never wrote ------------------------------------------------------


def _sinks(root: str, lake: str, mode: str) -> list[dict]:
    """A Delta sink (its mode) at ``lake`` beside a landing of the state's own."""
    delta = {"type": "delta", "name": "delta", "path": os.path.join(lake, "t")}
    if mode == "scd2":
        delta["mode"] = "scd2"
    else:
        delta["changelog_path"] = os.path.join(root, "changelog")
    landing = {"type": "open_mirroring", "name": "landing", "landing": os.path.join(root, "landing")}
    return [delta, landing]


def _rows(n: int, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(range(1, n + 1), pa.int64()),
                     "v": [f"{tag}{i}" for i in range(1, n + 1)]})


def _refused(spark, ws: Workspace, path: str) -> str:
    with pytest.raises(TargetMismatch) as refused:
        ws.run(spark)
    text = str(refused.value)
    assert "\n" not in text and "sink delta" in text and path in text, text
    assert "did not publish to" in text, text
    assert "diffcdc reload --table T --sink delta --yes" in text, text
    assert TableState(ws.state, "T").head().unpublished == ["delta"]
    return text


def _identical(spark, ws: Workspace, snapshot: str) -> None:
    results = verify_table(spark, ws.table, ws.state, os.path.join(ws.source, snapshot))
    assert all(r.identical for r in results.values()), {k: r.to_dict() for k, r in results.items()}


@pytest.mark.parametrize("mode", ["current", "scd2"])
def test_two_states_on_one_delta_path_the_second_is_refused_the_first_goes_on(
        spark, tmp_path, mode):
    lake = str(tmp_path / "lake")
    first, second = (_ws(str(tmp_path / n), _sinks(str(tmp_path / n), lake, mode))
                     for n in ("a", "b"))
    path = os.path.join(lake, "t")
    first.write("1.parquet", _rows(4, "a"))
    assert first.run(spark).outcome == "ok"
    second.write("1.parquet", _rows(3, "b"))
    text = _refused(spark, second, path)  # refused at the check: its landing publishes
    assert "diffcdc table T's (version 1) written by another state" in text, text
    for n, rows in ((2, 5), (3, 6)):
        first.write(f"{n}.parquet", _rows(rows, f"a{n}-"))
        assert first.run(spark).outcome == "ok"
        _identical(spark, first, f"{n}.parquet")
        second.write(f"{n}.parquet", _rows(rows - 1, f"b{n}-"))
        _refused(spark, second, path)  # its first image waits: never written over the first's
        _identical(spark, first, f"{n}.parquet")
    # the way out: the second state's sink at a path of its own
    sinks = _sinks(str(tmp_path / "b"), lake, mode)
    sinks[0]["path"] = str(tmp_path / "b" / "own")
    second.table = TableConfig(name="T", source=second.source, keys=["id"], sinks=sinks)
    assert second.run(spark, reload=True, reload_sinks=("delta",)).outcome == "ok"
    _identical(spark, second, "3.parquet")


def test_a_first_image_onto_another_tools_table_waits_and_leaves_it_untouched(spark, tmp_path):
    root = str(tmp_path)
    ws = _ws(root, _sinks(root, str(tmp_path / "lake"), "current"))
    path = str(tmp_path / "lake" / "t")
    foreign = pa.table({"id": pa.array([7], pa.int64()), "v": ["theirs"]})
    write_deltalake(path, foreign)
    for n in (1, 2):
        ws.write(f"{n}.parquet", _rows(3, f"a{n}-"))
        assert "another writer's table" in _refused(spark, ws, path)
        assert DeltaTable(path).version() == 0
        assert plain_types(DeltaTable(path).to_pyarrow_table()).to_pylist() == foreign.to_pylist()
    # a deliberate full image (reload --sink) replaces it
    assert ws.run(spark, reload=True, reload_sinks=("delta",)).outcome == "ok"
    _identical(spark, ws, "2.parquet")


def test_a_state_that_takes_the_path_on_purpose_is_another_writer_to_the_first(spark, tmp_path):
    """Two states of a table of one name (the same application id before incarnations): the
    second's deliberate full image (reload --sink) is never taken for the first's commits."""
    lake = str(tmp_path / "lake")
    first, second = (_ws(str(tmp_path / n), _sinks(str(tmp_path / n), lake, "current"))
                     for n in ("a", "b"))
    first.write("1.parquet", _rows(4, "a"))
    assert first.run(spark).outcome == "ok"
    second.write("1.parquet", _rows(3, "b"))
    assert second.run(spark, reload=True, reload_sinks=("delta",)).outcome == "ok"
    _identical(spark, second, "1.parquet")
    apps = {TableState(ws.state, "T").head().record.sinks["delta"].manifest["incarnation"]
            for ws in (first, second)}
    assert len(apps) == 2
    first.write("2.parquet", _rows(5, "a2-"))
    with pytest.raises(TargetMismatch, match="changed by another writer") as refused:
        first.run(spark)
    assert "\n" not in str(refused.value)
    _identical(spark, second, "1.parquet")  # the second's table is left as it wrote it


def test_a_first_image_is_not_appended_to_another_states_changelog(spark, tmp_path):
    """Two configs whose Delta sinks have paths of their own but one changelog_path: the
    second's rows are never mixed into the first's changelog."""
    lake = str(tmp_path / "lake")
    first, second = (_ws(str(tmp_path / n), _sinks(str(tmp_path / n), lake, "current"))
                     for n in ("a", "b"))
    sinks = _sinks(str(tmp_path / "b"), lake, "current")
    sinks[0]["path"] = str(tmp_path / "b" / "t")
    sinks[0]["changelog_path"] = first.table.sinks[0].changelog_path
    second.table = TableConfig(name="T", source=second.source, keys=["id"], sinks=sinks)
    first.write("1.parquet", _rows(4, "a"))
    assert first.run(spark).outcome == "ok"
    log = first.table.sinks[0].changelog_path
    before = DeltaTable(log).version()
    for n in (1, 2):
        second.write(f"{n}.parquet", _rows(3, f"b{n}-"))
        with pytest.raises(TargetMismatch, match="did not publish to is at the changelog_path") \
                as refused:
            second.run(spark)
        text = str(refused.value)
        assert "\n" not in text and log in text and "sink delta" in text, text
        assert "diffcdc reload --table T --sink delta --yes" in text, text
        assert DeltaTable(log).version() == before
        assert not os.path.exists(sinks[0]["path"])  # nothing of the version was written


def test_state_of_the_previous_format_goes_on_and_records_the_table_id(spark, tmp_path):
    """Manifests written before the Delta table id was recorded: the sink goes on (its
    application id is the recorded one), its next version records the id, and from then on a
    table deleted and made again by a writer reproducing it is refused."""
    import json

    from tests.support.lookalikes import delta_lookalike

    root = str(tmp_path)
    ws = _ws(root, _sinks(root, str(tmp_path / "lake"), "current"))
    for n in (1, 2):
        ws.write(f"{n}.parquet", _rows(3 + n, f"a{n}-"))
        assert ws.run(spark).outcome == "ok"
    log = os.path.join(ws.state, "T", "log")
    for name in (f"{v:020d}.json" for v in (1, 2)):  # as the previous format wrote them
        with open(os.path.join(log, name)) as handle:
            record = json.load(handle)
        manifest = record["sinks"]["delta"]["manifest"]
        assert manifest.pop("table_id") == (None if name.endswith("1.json") else
                                            DeltaTable(str(tmp_path / "lake" / "t")).metadata().id)
        with open(os.path.join(log, name), "w") as handle:
            json.dump(record, handle)
    ws.write("3.parquet", _rows(6, "a3-"))
    assert ws.run(spark).outcome == "ok"
    _identical(spark, ws, "3.parquet")
    state = TableState(ws.state, "T")
    path = str(tmp_path / "lake" / "t")
    assert state.head().record.sinks["delta"].manifest["table_id"] == DeltaTable(path).metadata().id
    delta_lookalike(state, "delta", {})
    ws.write("4.parquet", _rows(6, "a4-"))
    with pytest.raises(TargetMismatch, match="deleted and created again by another writer"):
        ws.run(spark)


def test_a_column_added_by_the_sinks_own_merge_is_not_taken_for_a_recreated_table(spark, tmp_path):
    """delta-rs gives a table a new metaData.id when a MERGE adds a column: the sink's own
    commit, so the versions after it go on (both modes) — the table id recorded when the
    version was staged is not the table's any more, and the sink's commit says why."""
    lake = tmp_path / "lake"
    ws = _ws(str(tmp_path), [
        {"type": "delta", "name": "delta", "path": str(lake / "t")},
        {"type": "delta", "name": "history", "path": str(lake / "h"), "mode": "scd2"},
    ])
    rows = [{"id": i, "v": f"a{i}"} for i in range(4)]
    ws.write("1.parquet", rows)
    ws.run(spark)
    ws.write("2.parquet", [{**r, "extra": f"x{r['id']}"} for r in rows])  # an added column
    ws.run(spark)
    ids = {name: DeltaTable(str(lake / name)).metadata().id for name in ("t", "h")}
    for n in (3, 4):
        ws.write(f"{n}.parquet", [{**r, "v": f"{n}-{r['id']}", "extra": f"x{r['id']}"}
                                  for r in rows])
        assert ws.run(spark).outcome == "ok"
        results = verify_table(spark, ws.table, ws.state, os.path.join(ws.source, f"{n}.parquet"))
        assert all(r.identical for r in results.values()), {k: r.to_dict() for k, r in results.items()}
    assert TableState(ws.state, "T").head().version == 4
    assert ids == {name: DeltaTable(str(lake / name)).metadata().id for name in ("t", "h")}
