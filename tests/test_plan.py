"""The plan of a table's run, made without Spark: what ``diffcdc plan`` prints is what the run
executes (one decision, :func:`diffcdc.engine.plan.plan_table`)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.config import TableConfig
from diffcdc.core.fingerprint import FINGERPRINT_VERSION
from diffcdc.engine.plan import RunRequest, plan_table
from diffcdc.errors import InputRefused, StateError, StateOwnerError, UsageError
from diffcdc.state.commit import CommitRecord, Counts, Fingerprint, SinkEntry
from diffcdc.state.requests import ReloadRequest, reload_wanted
from diffcdc.state.store import TableState


def _table(root, name: str = "T") -> TableConfig:
    return TableConfig(name=name, source=str(root / "src"), keys=["id"], sinks=[
        {"type": "open_mirroring", "name": "a", "landing": str(root / "la")},
        {"type": "open_mirroring", "name": "b", "landing": str(root / "lb")},
    ])


def _snapshot(root, name: str) -> None:
    os.makedirs(root / "src", exist_ok=True)
    pq.write_table(pa.table({"id": [1]}), root / "src" / name)


def _commit(state: TableState, version: int, snapshot: str, published: tuple[str, ...],
            table: str = "T", initial: bool = False) -> None:
    record = CommitRecord(
        version=version, table=table, run_id=f"r{version}", snapshot_id=snapshot,
        version_dir=f"v{version}", state_path=f"v{version}/state", keys=["id"], exclude=[],
        schema={"type": "struct", "fields": []}, fingerprint=Fingerprint(FINGERPRINT_VERSION, 64),
        counts=Counts(1, 1, 0, 0, 0),
        sinks={s: SinkEntry("open_mirroring", {"initial": initial or version == 1})
               for s in ("a", "b")},
    )
    with state.lock(f"r{version}", 60):
        state.claim(record)
        for sink in published:
            state.mark_published(version, sink, {})


def test_reload_wanted_widens_a_pending_request_and_never_narrows_it():
    whole = reload_wanted(None, "why")
    assert whole.sinks == () and whole.reason == "why" and whole.id
    assert reload_wanted(whole, "again", ("a",)) is whole  # the table stays reloaded whole
    some = reload_wanted(None, "why", ("b",))
    assert some.sinks == ("b",)
    assert reload_wanted(some, "x", ("b",)) is some  # covered already: nothing to record
    both = reload_wanted(some, "x", ("a",))
    assert both.sinks == ("a", "b") and both.id != some.id
    widened = reload_wanted(some, "x")
    assert widened.sinks == () and widened.id == some.id
    assert ReloadRequest.from_dict(both.to_dict()) == both
    assert "sinks" not in whole.to_dict()  # the document as earlier versions wrote it


def test_each_sink_publishes_its_backlog_first_unless_the_reload_supersedes_it(tmp_path):
    table = _table(tmp_path)
    state = TableState(str(tmp_path / "state"), "T")
    _snapshot(tmp_path, "1.parquet")
    _snapshot(tmp_path, "2.parquet")
    _commit(state, 1, "1.parquet", ("a", "b"))
    _commit(state, 2, "2.parquet", ("a",))
    _snapshot(tmp_path, "3.parquet")
    plan = plan_table(table, state)
    assert plan.problem is None
    assert dict(plan.backlog) == {"b": (2,)} and plan.publishes_first == ("b",)
    assert [e.snapshot_id for e in plan.snapshots] == ["3.parquet"] and plan.has_work
    assert plan.reload is None and not plan.record_reload

    asked = plan_table(table, state, request=RunRequest(reload=True, reload_sinks=("b",)))
    assert asked.record_reload and asked.reload is not None and asked.reload.sinks == ("b",)
    assert asked.superseded == ("b",) and asked.publishes_first == ()
    assert asked.reloading == {"b"}
    assert not state.requests.has_reload_request()  # a plan writes nothing

    state.requests.save_reload(asked.reload)
    again = plan_table(table, state)  # the next plan carries the recorded request
    assert again.reload == asked.reload and not again.record_reload


def test_a_reload_with_nothing_new_takes_the_last_snapshot_again(tmp_path):
    table = _table(tmp_path)
    state = TableState(str(tmp_path / "state"), "T")
    _snapshot(tmp_path, "1.parquet")
    _commit(state, 1, "1.parquet", ("a", "b"))
    assert not plan_table(table, state).has_work
    plan = plan_table(table, state, request=RunRequest(reload=True))
    assert [e.snapshot_id for e in plan.snapshots] == ["1.parquet"]
    assert plan.reloading == {"a", "b"} and plan.has_work
    os.remove(tmp_path / "src" / "1.parquet")
    gone = plan_table(table, state, request=RunRequest(reload=True))
    assert isinstance(gone.error, InputRefused) and gone.refusal is None
    assert "nothing to reload from" in str(gone.error) and gone.error.table == "T"


def test_refusals_come_before_anything_errors_after_the_backlog(tmp_path):
    table = _table(tmp_path)
    state = TableState(str(tmp_path / "state"), "T")
    _snapshot(tmp_path, "2.parquet")
    _commit(state, 1, "2.parquet", ("a",))
    _snapshot(tmp_path, "1.parquet")  # late: older than the last commit
    late = plan_table(table, state)
    assert late.refusal is None and late.error is not None and late.publishes_first == ("b",)
    assert late.problem is late.error

    state.requests.request_drop("somewhere")
    dropping = plan_table(table, state)
    assert isinstance(dropping.refusal, StateError) and dropping.drop and dropping.has_work
    assert "drop" in str(dropping.refusal) and dropping.backlog == {}

    other = _table(tmp_path, "U")
    owned = plan_table(other, state)
    assert isinstance(owned.refusal, StateOwnerError)


def test_a_rollback_is_planned_with_the_kept_versions_snapshot(tmp_path):
    table = _table(tmp_path)
    state = TableState(str(tmp_path / "state"), "T")
    _snapshot(tmp_path, "1.parquet")
    _commit(state, 1, "1.parquet", ("a", "b"))
    _snapshot(tmp_path, "2.parquet")
    _commit(state, 2, "2.parquet", ("a", "b"))
    to_head = plan_table(table, state, request=RunRequest(rollback_to=2))
    assert isinstance(to_head.error, UsageError) and "head already" in str(to_head.error)
    unknown = plan_table(table, state, request=RunRequest(rollback_to=7))
    assert isinstance(unknown.error, UsageError) and "not a committed version" in str(unknown.error)
    # version 1 predates snapshot identities here: refused, never rolled back to another file
    old = plan_table(table, state, request=RunRequest(rollback_to=1))
    assert isinstance(old.error, InputRefused) and old.rollback_to == 1


@pytest.mark.parametrize("damage", [b"{", b"[1]"])
def test_a_damaged_reload_request_refuses_the_table(tmp_path, damage):
    table = _table(tmp_path)
    state = TableState(str(tmp_path / "state"), "T")
    _snapshot(tmp_path, "1.parquet")
    _commit(state, 1, "1.parquet", ("a", "b"))
    state.storage.put(state.requests.RELOAD, damage)
    plan = plan_table(table, state)
    assert isinstance(plan.refusal, StateError) and "reload.json" in str(plan.refusal)


def test_a_wrong_state_root_refuses_the_plan_as_a_whole(tmp_path):
    from diffcdc.engine.plan import refuse_state_roots
    from diffcdc.sinks.openmirroring.contract import table_folder
    from diffcdc.sinks.openmirroring.metadata import METADATA_FILE

    table = _table(tmp_path)
    _snapshot(tmp_path, "1.parquet")
    published = tmp_path / "lb" / table_folder("T", None)
    published.mkdir(parents=True)
    (published / METADATA_FILE).write_text("{}")  # output published from another state root
    elsewhere = TableState(str(tmp_path / "other-state"), "T")
    plan = plan_table(table, elsewhere, state_given=False)
    assert isinstance(plan.refusal, UsageError) and plan.state_root_refused
    assert "no state for this table under the default state root ./state" in str(plan.refusal)
    assert str(published / METADATA_FILE) in str(plan.refusal.path)
    assert plan_table(table, elsewhere).refusal is None  # a run in Python checks the owner only
    with pytest.raises(UsageError):
        refuse_state_roots([plan_table(_table(tmp_path, "U"), TableState(str(tmp_path), "U"),
                                       state_given=True), plan])
    asked = plan_table(table, elsewhere, request=RunRequest(reload=True), state_given=True)
    assert asked.refusal is None and asked.has_work  # re-created on purpose: not checked

    state = TableState(str(tmp_path / "state"), "T")
    _commit(state, 1, "1.parquet", ("a", "b"))
    assert plan_table(table, state, state_given=True).refusal is None
    owned = plan_table(_table(tmp_path, "U"), state)
    assert isinstance(owned.refusal, StateOwnerError) and owned.state_root_refused
    late = plan_table(table, state, request=RunRequest(rollback_to=9))
    assert not late.state_root_refused  # a refused snapshot is the table's own matter
